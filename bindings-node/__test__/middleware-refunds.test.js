'use strict'
// skipSuccessfulRequests / skipFailedRequests are refunds (issue 38): a
// request is charged on the way in and given back when its response says
// so — exactly what it took, never more than the limit allows, and never
// into a window it was not counted in. Over real sockets, under
// concurrency: 30 requests at once, the admitted ones held until the test
// answers them. Every kind of limiter, both frameworks.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const express = require('express')
const Fastify = require('fastify')
const { Redis } = require('ioredis')
const rateLimit = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, Stack, Quotas, DirectTokenBucket, ManualClock } = require('ratomic')
const { RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow } = require('ratomic/redis')
const { startRedis, SLOW_MACHINE_MS } = require('./redis-server')

const IP = '127.0.0.1'

// A server whose GET /work?hold=1 is held until the test answers it (with
// the status it chooses), and whose GET /work answers 200 at once.
const FRAMEWORKS = {
  async express(options, held) {
    const app = express()
    app.use(rateLimit(options))
    app.get('/work', (req, res) => {
      if (req.query.hold !== '1') return res.send('ok')
      held.push((status) => res.status(status).send(String(status)))
    })
    const server = http.createServer(app)
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((resolve) => server.close(resolve)) }
  },
  async fastify(options, held) {
    const app = Fastify()
    await app.register(ratomicFastify, options)
    app.get('/work', (request, reply) => {
      if (request.query.hold !== '1') return reply.send('ok')
      return new Promise((resolve) => held.push((status) => resolve(reply.code(status).send(String(status)))))
    })
    return { url: await app.listen({ port: 0, host: '127.0.0.1' }), close: () => app.close() }
  },
}

// Starts `n` held requests at once; resolves when every one is either
// held by the server or answered (a 429), with the answers to come.
async function burst(url, held, n) {
  const before = held.length
  let denied = 0
  const answers = Array.from({ length: n }, () =>
    fetch(`${url}/work?hold=1`).then(async (r) => {
      await r.text()
      if (r.status === 429) denied++
      return r.status
    })
  )
  while (held.length - before + denied < n) await new Promise((resolve) => setImmediate(resolve))
  return { admitted: held.length - before, answers }
}

// Waits until `remaining()` (maybe a promise) is `want`, for refunds made
// after the response (a Redis refund is a round trip): the final value is
// what is asserted. Up to SLOW_MACHINE_MS (200 polls, about a second, could
// end while a loaded machine's Redis had yet to run the refunds).
async function settle(remaining, want) {
  const end = performance.now() + SLOW_MACHINE_MS
  for (;;) {
    const got = await remaining()
    if (got === want || performance.now() > end) return got
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

// Each limiter: 10 requests for the client until refunded, and how many it has left.
function local() {
  const clock = new ManualClock()
  const tb = () => new TokenBucket('10/min', { clock })
  return {
    TokenBucket: () => {
      const l = tb()
      return { options: { limiter: l }, remaining: () => l.peek(IP, 0).remaining }
    },
    FixedWindow: () => {
      const l = new FixedWindow(10, 60_000, { clock })
      return { options: { limiter: l }, remaining: () => l.peek(IP, 0).remaining }
    },
    SlidingWindow: () => {
      const l = new SlidingWindow(10, 60_000, { clock })
      return { options: { limiter: l }, remaining: () => l.peek(IP, 0).remaining }
    },
    Limiter: () => {
      const l = new Limiter({ perMinute: { algorithm: 'fixedWindow', limit: 10, windowMs: 60_000 }, hourly: '100/h' }, { clock })
      return { options: { limiter: l }, remaining: () => l.peek(IP, 0).remaining }
    },
    Stack: () => {
      const ip = tb()
      const l = new Stack({ ip, global: new DirectTokenBucket('1000/min', { clock }) })
      return { options: { limiter: l }, remaining: () => ip.peek(IP, 0).remaining }
    },
    Quotas: () => {
      const quotas = new Quotas({ clock })
      return { options: { limiter: quotas, quota: () => '10/min' }, remaining: () => quotas.peek(IP, '10/min', 0).remaining }
    },
    DirectTokenBucket: () => {
      const direct = new DirectTokenBucket('10/min', { clock })
      return { options: { limiter: direct }, remaining: () => direct.peek(0).remaining }
    },
  }
}

for (const framework of Object.keys(FRAMEWORKS)) {
  for (const [kind, make] of Object.entries(local())) {
    for (const mode of ['skipFailedRequests', 'skipSuccessfulRequests']) {
      test(`${framework}, ${kind}, ${mode}: 30 at once, 10 admitted; exactly the skipped ones given back`, async () => {
        await refunds(framework, make(), mode)
      })
    }
  }
}

async function refunds(framework, { options, remaining }, mode) {
  const held = []
  const reports = []
  const server = await FRAMEWORKS[framework]({ ...options, [mode]: true, onLimiterError: (e) => reports.push(e) }, held)
  try {
    const first = await burst(server.url, held, 30)
    assert.equal(first.admitted, 10, 'the bound, under concurrency')
    // 4 fail, 6 succeed; the skipped ones are given back, the others stay counted.
    held.splice(0).forEach((answer, i) => answer(i < 4 ? 500 : 200))
    const statuses = (await Promise.all(first.answers)).sort()
    assert.deepEqual(statuses, [...Array(6).fill(200), ...Array(20).fill(429), ...Array(4).fill(500)])
    const back = mode === 'skipFailedRequests' ? 4 : 6
    assert.equal(await settle(remaining, back), back, 'exactly the skipped requests given back')
    const second = await burst(server.url, held, 30)
    assert.equal(second.admitted, back, 'no more than the refunds')
    held.splice(0).forEach((answer) => answer(mode === 'skipFailedRequests' ? 200 : 500))
    await Promise.all(second.answers)
    assert.equal(await settle(remaining, 0), 0)
    assert.deepEqual(reports, [])
  } finally {
    held.splice(0).forEach((answer) => answer(200))
    await server.close()
  }
}

for (const framework of Object.keys(FRAMEWORKS)) {
  for (const [kind, make] of Object.entries({
    FixedWindow: (clock) => new FixedWindow(2, 60_000, { clock }),
    SlidingWindow: (clock) => new SlidingWindow(2, 60_000, { clock }),
    'Limiter with a window': (clock) => new Limiter({ w: { algorithm: 'fixedWindow', limit: 2, windowMs: 60_000 }, b: '100/h' }, { clock }),
    'Stack with a window': (clock) => new Stack({ w: new FixedWindow(2, 60_000, { clock }), b: new TokenBucket('100/h', { clock }) }),
  })) {
    test(`${framework}, ${kind}: a refund after the request's window ended goes to no other window`, async () => {
      const clock = new ManualClock()
      const held = []
      const server = await FRAMEWORKS[framework]({ limiter: make(clock), skipFailedRequests: true }, held)
      const get = async (path) => (await fetch(server.url + path)).status
      try {
        // Counted in one window, failing only once the next has begun and is full.
        const a = await burst(server.url, held, 1)
        clock.advance(60_000)
        let filled = 0
        while ((await get('/work')) === 200) filled++
        assert.ok(filled >= 1, 'the next window admits')
        held.splice(0).forEach((answer) => answer(500))
        assert.deepEqual(await Promise.all(a.answers), [500])
        assert.equal(await get('/work'), 429, 'the new window keeps its count')
        // Failing within its own window: given back.
        clock.advance(120_000)
        const b = await burst(server.url, held, 1)
        assert.equal(await get('/work'), 200)
        held.splice(0).forEach((answer) => answer(500))
        await Promise.all(b.answers)
        assert.deepEqual([await get('/work'), await get('/work')], [200, 429])
      } finally {
        held.splice(0).forEach((answer) => answer(200))
        await server.close()
      }
    })
  }
}

test('Redis limiters: a RedisTokenBucket and a RedisFixedWindow refund; a RedisSlidingWindow is refused at set-up', async (t) => {
  const redis = await startRedis()
  const client = new Redis(redis.port, '127.0.0.1', { lazyConnect: true })
  await client.connect()
  try {
    let n = 0
    for (const framework of Object.keys(FRAMEWORKS)) {
      for (const [kind, make] of Object.entries({
        RedisTokenBucket: (prefix) => new RedisTokenBucket('10/min', { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
        RedisFixedWindow: (prefix) => new RedisFixedWindow(10, 3_600_000, { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
      })) {
        await t.test(`${framework}, ${kind}`, async () => {
          for (const mode of ['skipFailedRequests', 'skipSuccessfulRequests']) {
            const limiter = make(`t${n++}:`)
            await refunds(framework, { options: { limiter }, remaining: async () => (await limiter.peek(IP, 0)).remaining }, mode)
          }
        })
      }
      assert.throws(() => rateLimit({ limiter: new RedisSlidingWindow(10, 60_000, { client }), skipFailedRequests: true }), { name: 'TypeError', message: /RedisFixedWindow/ })
    }
  } finally {
    client.disconnect()
    await redis.stop()
  }
})

test('Postgres limiters: a PostgresTokenBucket and a PostgresFixedWindow refund; a PostgresSlidingWindow is refused at set-up', async (t) => {
  // The PostgreSQL that run-tests.sh starts (RATOMIC_POSTGRES_URL).
  const url = process.env.RATOMIC_POSTGRES_URL
  assert.ok(url, 'RATOMIC_POSTGRES_URL: run with bindings-node/run-tests.sh (it starts a server)')
  const { Pool } = require('pg')
  const { PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow, migrate } = require('ratomic/postgres')
  const client = new Pool({ connectionString: url, max: 8 })
  try {
    await migrate(client)
    const run = `refunds-${process.pid}-${Date.now()}-`
    let n = 0
    for (const framework of Object.keys(FRAMEWORKS)) {
      for (const [kind, make] of Object.entries({
        PostgresTokenBucket: (prefix) => new PostgresTokenBucket('10/min', { client, prefix }),
        PostgresFixedWindow: (prefix) => new PostgresFixedWindow(10, 3_600_000, { client, prefix }),
      })) {
        await t.test(`${framework}, ${kind}`, async () => {
          for (const mode of ['skipFailedRequests', 'skipSuccessfulRequests']) {
            const limiter = make(`${run}${n++}`)
            await refunds(framework, { options: { limiter }, remaining: async () => (await limiter.peek(IP, 0)).remaining }, mode)
          }
        })
      }
      assert.throws(() => rateLimit({ limiter: new PostgresSlidingWindow(10, 60_000, { client }), skipFailedRequests: true }), {
        name: 'TypeError',
        message: /PostgresFixedWindow/,
      })
    }
  } finally {
    await client.end()
  }
})
