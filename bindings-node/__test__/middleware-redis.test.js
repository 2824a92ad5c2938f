'use strict'
// ratomic/express and ratomic/fastify with limiters on Redis (ratomic/redis):
// a real redis-server on a free 127.0.0.1 port, servers on port 0, fetch.
// The decisions are awaited, the header fields are those of the in-memory
// limiters, and a Redis that stops answering gets the limiter's onError
// policy, or (onError "raise") passOnStoreError's answer — never a 500, never
// a hang.
const test = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const http = require('node:http')
const express = require('express')
const Fastify = require('fastify')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const { rateLimit } = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { PROBLEM_CONTENT_TYPE } = require('ratomic')
const { RedisTokenBucket, RedisFixedWindow, RedisLimiter } = require('ratomic/redis')
const { startRedis, answered, SLOW_MACHINE_MS } = require('./redis-server')

// The limiters that should hear from Redis wait up to SLOW_MACHINE_MS for it
// (the 50 ms default would make a loaded machine's stall a timeout; the
// first call also waits for the connection). The test of a dead server keeps
// the default, and bounds a request by HANG_BOUND_MS: a hang, not a speed.
const HANG_BOUND_MS = 30_000

let server
const clients = []

test.before(async () => {
  server = await startRedis()
})

test.after(async () => {
  for (const c of clients) {
    if (typeof c.pipeline === 'function') c.disconnect()
    else if (c.isOpen) await c.destroy()
  }
  await server.stop()
})

function ioredis(port = server.port) {
  const c = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0 })
  c.on('error', () => {}) // a stopped server is reported per command
  clients.push(c)
  return c
}

async function nodeRedis(port = server.port) {
  const c = createClient({ socket: { port, host: '127.0.0.1' } })
  c.on('error', () => {})
  await c.connect()
  clients.push(c)
  return c
}

const prefix = () => `mw-${crypto.randomBytes(6).toString('hex')}:`

async function serve(app) {
  const s = http.createServer(app)
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${s.address().port}`, close: () => s.close() }
}

test('express on a RedisTokenBucket (ioredis): standard fields, the decision with its source, then a 429 problem', async () => {
  const limiter = new RedisTokenBucket('3/min', { client: ioredis(), prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
  const app = express()
  app.use(rateLimit({ limiter, name: 'per-ip', legacyHeaders: true }))
  app.get('/', (req, res) => res.send(`${req.rateLimit.remaining} ${req.rateLimit.source}`))
  const s = await serve(app)
  try {
    for (const left of [2, 1, 0]) {
      const r = await fetch(s.url)
      assert.equal(r.status, 200)
      assert.equal(await r.text(), `${left} redis`)
      assert.equal(r.headers.get('ratelimit-policy'), '"per-ip";q=3;w=60')
      assert.match(r.headers.get('ratelimit'), new RegExp(`^"per-ip";r=${left};t=\\d+$`))
      assert.equal(r.headers.get('x-ratelimit-remaining'), String(left))
    }
    const denied = await fetch(s.url)
    assert.equal(denied.status, 429)
    assert.ok(Number(denied.headers.get('retry-after')) >= 1)
    assert.ok(denied.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
    assert.deepEqual((await denied.json())['violated-policies'], ['per-ip'])
    // The count is on Redis: a second limiter object on the same prefix sees it.
    const again = new RedisTokenBucket('3/min', { client: ioredis(), prefix: limiter.prefix, timeoutMs: SLOW_MACHINE_MS })
    assert.equal((await again.peek('127.0.0.1')).allowed, false)
  } finally {
    s.close()
  }
})

test('express on a RedisLimiter (node-redis): every policy listed, the denier named', async () => {
  // 2 a minute: no token comes back between the requests, however slow the machine.
  const limiter = new RedisLimiter(
    { burst: '2/min', daily: { algorithm: 'fixedWindow', rate: '100/day' } },
    { client: await nodeRedis(), prefix: prefix(), timeoutMs: SLOW_MACHINE_MS }
  )
  const app = express()
  app.use(rateLimit({ limiter, keyGenerator: (req) => req.headers['x-api-key'] }))
  app.get('/', (req, res) => res.json(req.rateLimit.entries.map((e) => e.remaining)))
  const s = await serve(app)
  try {
    const key = { headers: { 'x-api-key': 'k1' } }
    const r = await fetch(s.url, key)
    assert.equal(r.status, 200)
    assert.deepEqual(await r.json(), [1, 99])
    assert.equal(r.headers.get('ratelimit-policy'), '"burst";q=2;w=60, "daily";q=100;w=86400')
    assert.equal((await fetch(s.url, key)).status, 200)
    const denied = await fetch(s.url, key)
    assert.equal(denied.status, 429)
    assert.deepEqual((await denied.json())['violated-policies'], ['burst'])
    assert.equal((await fetch(s.url, { headers: { 'x-api-key': 'k2' } })).status, 200, 'another key is not denied')
  } finally {
    s.close()
  }
})

test('fastify on a RedisFixedWindow: the hook awaits the decision', async () => {
  const app = Fastify()
  await app.register(ratomicFastify, { limiter: new RedisFixedWindow(2, '1h', { client: ioredis(), prefix: prefix(), timeoutMs: SLOW_MACHINE_MS }) })
  app.get('/', async (request) => ({ left: request.rateLimit.remaining, source: request.rateLimit.source }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${app.server.address().port}`
  try {
    const r = await fetch(url)
    assert.deepEqual(await r.json(), { left: 1, source: 'redis' })
    assert.equal(r.headers.get('ratelimit-policy'), '"default";q=2;w=3600')
    assert.equal((await fetch(url)).status, 200)
    const denied = await fetch(url)
    assert.equal(denied.status, 429)
    assert.ok(denied.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
  } finally {
    await app.close()
  }
})

test('a Redis that stops answering: onError decides, or passOnStoreError; never a 500 or a hang', async () => {
  const s = await startRedis()
  const c = ioredis(s.port)
  const p = prefix()
  const raise = new RedisTokenBucket('5/s', { client: c, prefix: p, breakerThreshold: 0 })
  const app = express()
  const onLimiterError = () => {}
  app.use('/closed', rateLimit({ limiter: raise, onLimiterError }))
  app.use('/open', rateLimit({ limiter: raise, passOnStoreError: true, onLimiterError }))
  app.use('/allow', rateLimit({ limiter: new RedisTokenBucket('5/s', { client: c, prefix: p, onError: 'allow' }) }))
  app.use('/deny', rateLimit({ limiter: new RedisTokenBucket('5/s', { client: c, prefix: p, onError: 'deny', denyRetryAfterMs: 3000 }) }))
  app.use((req, res) => res.send(req.rateLimit ? req.rateLimit.source : 'unjudged'))
  const web = await serve(app)
  try {
    // The server answers through this client before it dies (the routes'
    // limiters keep the 50 ms default, for the calls after).
    await answered(c, p)
    s.proc.kill('SIGKILL')
    await new Promise((r) => s.proc.once('exit', r))
    const t = performance.now()
    const closed = await fetch(`${web.url}/closed`)
    assert.equal(closed.status, 503, 'fail closed by default')
    assert.equal(closed.headers.get('retry-after'), '1')
    assert.equal((await closed.json()).title, 'Service Unavailable')
    const open = await fetch(`${web.url}/open`)
    assert.deepEqual([open.status, await open.text()], [200, 'unjudged'])
    const allowed = await fetch(`${web.url}/allow`)
    assert.deepEqual([allowed.status, await allowed.text()], [200, 'policy'])
    const denied = await fetch(`${web.url}/deny`)
    assert.equal(denied.status, 429)
    assert.equal(denied.headers.get('retry-after'), '3')
    assert.ok(performance.now() - t < HANG_BOUND_MS, 'no request waits on the dead server')
  } finally {
    web.close()
    await s.stop()
  }
})

test('bad options still throw at set-up with a Redis limiter', () => {
  const limiter = new RedisTokenBucket('5/s', { client: ioredis(), prefix: prefix() })
  assert.throws(() => rateLimit({ limiter, limit: 5 }), { name: 'TypeError', message: /either limiter or limit/ })
  assert.throws(() => rateLimit({ limiter, name: 'café' }), { name: 'RangeError' })
  assert.throws(() => rateLimit({ limiter: {} }), { name: 'TypeError', message: /ratomic\/redis/ })
})
