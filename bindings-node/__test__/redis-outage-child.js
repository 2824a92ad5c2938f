'use strict'
// The process redis-outage.test.js watches: a limiter on a Redis client of
// its own (node-redis or ioredis), driven a line at a time on stdin, each
// answered by one JSON line on stdout. A crash is the process's exit, which
// the test sees.
//
//   KIND: node-redis | ioredis | node-redis-listener (the user's
//   client.on('error') before the limiter) | node-redis-listener-later
//   (after it) | node-redis-pool (a createClientPool of one connection,
//   which re-emits its clients' 'error')
const { createClient, createClientPool } = require('redis')
const { Redis } = require('ioredis')
const { RedisTokenBucket } = require('../redis')

const { PORT: port, APP: app, KIND: kind } = process.env
const { runChild, mine, reports } = require('./outage-harness')

async function main() {
  let client
  if (kind === 'ioredis') {
    client = new Redis({ port: Number(port), host: '127.0.0.1', lazyConnect: true })
    await client.connect()
  } else if (kind === 'node-redis-pool') {
    // One connection, so that CLIENT SETNAME names the one the test kills.
    const options = { url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: () => 20 } }
    client = createClientPool(options, { minimum: 1, maximum: 1 })
    await client.connect()
  } else {
    // A fixed, short wait between reconnects: the test waits for them.
    client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: () => 20 } })
    if (kind === 'node-redis-listener') client.on('error', mine)
    await client.connect()
  }
  await (kind === 'ioredis' ? client.call('CLIENT', 'SETNAME', app) : client.sendCommand(['CLIENT', 'SETNAME', app]))
  // breakerThreshold 0: every call tries the server, so the first one after
  // it is back reaches it. A long timeout: the reply, not the clock, ends a
  // call that should reach Redis, even on a loaded machine (its stalls can
  // pass 1 s).
  const limiter = new RedisTokenBucket('1000/h', { client, prefix: app, onError: 'deny', breakerThreshold: 0, timeoutMs: 5000 })
  // The calls made while the server is down: the same bucket on the same
  // client, with a short timeout. They wait in the client's offline queue
  // until it fires (no reply can come), so however slow the machine, they
  // answer by the policy; with the long one each waited 5 s.
  const whileDown = new RedisTokenBucket('1000/h', { client, prefix: app, onError: 'deny', breakerThreshold: 0, timeoutMs: 200 })
  if (kind === 'node-redis-listener-later') client.on('error', mine)
  const isOpen = () => (kind === 'ioredis' ? client.status === 'ready' : client.isReady)
  // Connections lost so far: counted, not polled, as a client may be back
  // before the test asks.
  let drops = 0
  if (kind !== 'node-redis-pool') client.on(kind === 'ioredis' ? 'close' : 'reconnecting', () => drops++)

  return {
    async allow() {
      const d = await limiter.allow('k')
      return { allowed: d.allowed, source: d.source }
    },
    async allowWhileDown() {
      const d = await whileDown.allow('k')
      return { allowed: d.allowed, source: d.source }
    },
    // Waits until the client has seen its connection go.
    // (A pool passes on no 'reconnecting': its re-emitted 'error', which
    // ratomic's listener turns into a warning, is the sign.)
    async dropped() {
      const seen = () => (kind === 'node-redis-pool' ? reports().warnings.length > 0 : drops > 0)
      while (!seen()) await new Promise((r) => setTimeout(r, 5))
      return {}
    },
    // Waits until the client is connected again (a pool: until its
    // connection answers a PING, which waits out the reconnect).
    async ready() {
      if (kind === 'node-redis-pool') await client.sendCommand(['PING'])
      else while (!isOpen()) await new Promise((r) => setTimeout(r, 5))
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
