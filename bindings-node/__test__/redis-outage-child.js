'use strict'
// The process redis-outage.test.js watches: a limiter on a Redis client of
// its own (node-redis or ioredis), driven a line at a time on stdin, each
// answered by one JSON line on stdout. A crash is the process's exit, which
// the test sees.
//
//   KIND: node-redis | ioredis | node-redis-listener (the user's
//   client.on('error') before the limiter) | node-redis-listener-later
//   (after it)
const { createClient } = require('redis')
const { Redis } = require('ioredis')
const { RedisTokenBucket } = require('../redis')

const { PORT: port, APP: app, KIND: kind } = process.env
const { runChild, mine } = require('./outage-harness')

async function main() {
  let client
  if (kind === 'ioredis') {
    client = new Redis({ port: Number(port), host: '127.0.0.1', lazyConnect: true })
    await client.connect()
  } else {
    // A fixed, short wait between reconnects: the test waits for them.
    client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: () => 20 } })
    if (kind === 'node-redis-listener') client.on('error', mine)
    await client.connect()
  }
  await (kind === 'ioredis' ? client.call('CLIENT', 'SETNAME', app) : client.sendCommand(['CLIENT', 'SETNAME', app]))
  // breakerThreshold 0: every call tries the server, so the first one after
  // it is back reaches it. A long timeout: the reply, not the clock, ends a call.
  const limiter = new RedisTokenBucket('1000/h', { client, prefix: app, onError: 'deny', breakerThreshold: 0, timeoutMs: 1000 })
  if (kind === 'node-redis-listener-later') client.on('error', mine)
  const isOpen = () => (kind === 'ioredis' ? client.status === 'ready' : client.isReady)
  // Connections lost so far: counted, not polled, as a client may be back
  // before the test asks.
  let drops = 0
  client.on(kind === 'ioredis' ? 'close' : 'reconnecting', () => drops++)

  return {
    async allow() {
      const d = await limiter.allow('k')
      return { allowed: d.allowed, source: d.source }
    },
    // Waits until the client has seen its connection go.
    async dropped() {
      while (drops === 0) await new Promise((r) => setTimeout(r, 5))
      return {}
    },
    // Waits until the client is connected again.
    async ready() {
      while (!isOpen()) await new Promise((r) => setTimeout(r, 5))
      return {}
    },
    async quit() {
      if (kind === 'ioredis') client.disconnect()
      else client.destroy()
      return {}
    },
  }
}

runChild(main)
