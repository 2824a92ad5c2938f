'use strict'
// Calls in flight at the same time share round trips (ratomic/redis),
// against a real redis-server, through ioredis and node-redis as they come:
// 1,000 concurrent promises on a bucket of 500 get exactly 500, with no
// error, in far fewer round trips than calls (counted by the server), on a
// handful of connections and timers; with leases, the calls waiting for a
// round trip that brings their key a lease are answered from it.
const test = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const { RedisTokenBucket } = require('../redis')
const { startRedis, SLOW_MACHINE_MS } = require('./redis-server')

let server
let admin

test.before(async () => {
  server = await startRedis()
  admin = new Redis({ port: server.port, host: '127.0.0.1' })
})

test.after(async () => {
  admin.disconnect()
  await server.stop()
})

// Default settings: only where the server is.
const CLIENTS = {
  ioredis: async () => new Redis({ port: server.port, host: '127.0.0.1' }),
  'node-redis': async () => createClient({ socket: { port: server.port, host: '127.0.0.1' } }).connect(),
}

async function closeClient(c) {
  if (typeof c.pipeline === 'function') c.disconnect()
  else await c.destroy()
}

// A field of `INFO <section>`.
async function info(section, field) {
  const text = await admin.info(section)
  const line = text.split('\r\n').find((l) => l.startsWith(field + ':'))
  assert.ok(line, `no ${field} in INFO ${section}`)
  return line.slice(field.length + 1)
}

async function counts() {
  return {
    reads: Number(await info('stats', 'total_reads_processed')),
    connections: Number(await info('stats', 'total_connections_received')),
    evalsha: Number((/cmdstat_evalsha:calls=(\d+)/.exec(await admin.info('commandstats')) || [0, 0])[1]),
  }
}

// 1,000 calls at once on a bucket of 500 (one an hour: nothing refills);
// what came back, what the server counted (less our own INFO calls), and the
// timers set while they were issued and in flight.
async function thousandAtOnce(kind, options = {}) {
  const client = await CLIENTS[kind]()
  const prefix = `t-${crypto.randomUUID().slice(0, 12)}:`
  // A 10 s deadline, not the 50 ms default: on a loaded CI machine a batch
  // of 256 script calls can take longer than 50 ms, and this pins the sharing
  // of round trips, not the machine's speed (the deadline has tests of its own).
  const l = new RedisTokenBucket(500, 1 / 3600, { client, prefix, timeoutMs: SLOW_MACHINE_MS, ...options })
  assert.equal((await l.peek('warm-up')).allowed, true, 'connected, the script loaded')
  const before = await counts()
  const realSetTimeout = global.setTimeout
  let timers = 0
  global.setTimeout = (...args) => {
    timers++
    return realSetTimeout(...args)
  }
  let settled
  try {
    settled = await Promise.allSettled(Array.from({ length: 1000 }, () => l.allow('hot')))
  } finally {
    global.setTimeout = realSetTimeout
  }
  const after = await counts()
  await l.close()
  await closeClient(client)
  return {
    granted: settled.filter((s) => s.status === 'fulfilled' && s.value.allowed).length,
    errors: settled.filter((s) => s.status === 'rejected').map((s) => s.reason),
    sources: new Set(settled.filter((s) => s.status === 'fulfilled').map((s) => s.value.source)),
    reads: after.reads - before.reads - 3, // less our three INFOs
    connections: after.connections - before.connections,
    evalsha: after.evalsha - before.evalsha,
    timers,
  }
}

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: 1,000 concurrent calls on a bucket of 500 share round trips and get exactly 500`, async () => {
    const r = await thousandAtOnce(kind)
    assert.deepEqual(r.errors, [])
    assert.equal(r.granted, 500)
    assert.ok(r.reads < 100, `${r.reads} round trips reached the server for 1,000 calls`)
    assert.equal(r.connections, 0, 'no connection opened beyond the client\'s own')
    assert.ok(r.timers < 20, `${r.timers} timers set for 1,000 calls`)
  })

  test(`${kind}: with leases, the calls waiting for a lease on its way are answered from it`, async () => {
    const r = await thousandAtOnce(kind, { lease: 'auto' })
    assert.deepEqual(r.errors, [])
    assert.equal(r.granted, 500)
    assert.ok(r.sources.has('lease'))
    assert.ok(r.evalsha < 100, `${r.evalsha} script calls for 1,000 decisions`)
    // One key: each round trip carries at most its one lease call — the
    // waiters are answered by the lease or the deny cache, not sent one
    // script call each once they have waited a few round trips.
    assert.ok(r.evalsha <= r.reads, `${r.evalsha} script calls in ${r.reads} round trips on one key`)
  })
}

// While a round trip is in flight, a call on a key whose lease is spent asks
// for no lease of its own (as in Rust's client): it waits, and the next round
// trip's plan asks for one lease that covers every call waiting on the key,
// all answered from it. One script call for the key, counted by the server;
// a call that asked as it queued took a lease sized for itself alone (4
// tokens), and the rest needed another round trip.
for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: calls waiting for a round trip ask for no lease and share one sized for them`, async () => {
    const client = await CLIENTS[kind]()
    const prefix = `t-${crypto.randomUUID().slice(0, 12)}:`
    // 10,000 tokens refilling one per 3.6 s: nothing refills meanwhile, and
    // 'auto' leases up to 1,250.
    const l = new RedisTokenBucket(10_000, 1 / 3.6, { client, prefix, lease: 'auto', timeoutMs: SLOW_MACHINE_MS })
    try {
      assert.equal((await l.allow('hot')).allowed, true) // seen once: no lease
      assert.equal((await l.allow('hot')).allowed, true) // warm: a lease of 2 comes with it
      assert.equal(l.leasesHeld, 1)
      const before = await counts()
      // 'other' is sent at once; the 100 calls on 'hot' come while it is in
      // flight: the lease's 2 answer two, the others wait.
      const out = await Promise.all([l.allow('other'), ...Array.from({ length: 100 }, () => l.allow('hot'))])
      const calls = (await counts()).evalsha - before.evalsha
      assert.ok(out.every((d) => d.allowed), 'all granted')
      assert.equal(calls, 2, `${calls} script calls: one for 'other', one lease for the 98 calls waiting on 'hot'`)
      assert.equal(out.slice(1).filter((d) => d.source === 'lease').length, 99)
    } finally {
      await l.close()
      await closeClient(client)
    }
  })
}
