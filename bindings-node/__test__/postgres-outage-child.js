'use strict'
// The process postgres-outage.test.js watches: a limiter on a pg Pool (or
// Client) of its own, driven a line at a time on stdin, each answered by one
// JSON line on stdout. A crash is the process's exit, which the test sees.
//
//   KIND: pool | client | pool-listener (the user's pool.on('error') before
//   the limiter) | pool-listener-later (after it)
const { Pool, Client } = require('pg')
const { PostgresTokenBucket } = require('../postgres')

const { URL: url, APP: app, KIND: kind } = process.env
const { runChild, mine } = require('./outage-harness')

async function main() {
  let client
  if (kind === 'client') {
    client = new Client({ connectionString: url, application_name: app })
    await client.connect()
  } else {
    // idleTimeoutMillis 0: an idle connection stays until it fails.
    client = new Pool({ connectionString: url, application_name: app, max: 2, idleTimeoutMillis: 0 })
  }
  if (kind === 'pool-listener') client.on('error', mine)
  // breakerThreshold 0: every call tries the server, so the first one after
  // it is back reaches it.
  const limiter = new PostgresTokenBucket('1000/h', { client, prefix: app, onError: 'deny', breakerThreshold: 0 })
  if (kind === 'pool-listener-later') client.on('error', mine)
  const ended = kind === 'client' ? new Promise((resolve) => client.once('end', resolve)) : null

  return {
    async allow() {
      const d = await limiter.allow('k')
      return { allowed: d.allowed, source: d.source }
    },
    // Waits until the failed connections are gone: the Pool has dropped
    // them (it does so in its 'error' handling), the Client has ended.
    async dropped() {
      if (ended !== null) await ended
      else while (client.totalCount > 0) await new Promise((r) => setTimeout(r, 5))
      return {}
    },
    async quit() {
      await client.end()
      return {}
    },
  }
}

runChild(main)
