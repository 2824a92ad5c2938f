'use strict'
// ratomic/express and ratomic/fastify with limiters in PostgreSQL
// (ratomic/postgres): the real PostgreSQL that run-tests.sh starts
// (RATOMIC_POSTGRES_URL), servers on port 0, fetch. The decisions are
// awaited, the header fields are those of the in-memory limiters, and a
// server that cannot be reached gets the limiter's onError (an in-memory
// limiter to fall back to), or passOnStoreError's answer.
const test = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const http = require('node:http')
const express = require('express')
const Fastify = require('fastify')
const { Pool } = require('pg')
const { rateLimit } = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { PROBLEM_CONTENT_TYPE, TokenBucket } = require('ratomic')
const { PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow, PostgresLimiter, migrate } = require('ratomic/postgres')

const url = process.env.RATOMIC_POSTGRES_URL
assert.ok(url, 'RATOMIC_POSTGRES_URL: run these tests with bindings-node/run-tests.sh (it starts a server)')
const pool = new Pool({ connectionString: url, max: 4 })
// A pool on a port nothing listens on: every query fails to connect.
const dead = new Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 1000 })
test.before(() => migrate(pool))
test.after(async () => {
  await pool.end()
  await dead.end()
})

const prefix = () => `mw-${crypto.randomBytes(6).toString('hex')}`

async function serve(app) {
  const s = http.createServer(app)
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${s.address().port}`, close: () => s.close() }
}

test('express on a PostgresTokenBucket: standard and legacy fields, the decision with its source, then a 429 problem', async () => {
  const limiter = new PostgresTokenBucket('3/min', { client: pool, prefix: prefix() })
  const app = express()
  app.use(rateLimit({ limiter, name: 'per-ip', legacyHeaders: true }))
  app.get('/', (req, res) => res.send(`${req.rateLimit.remaining} ${req.rateLimit.source}`))
  const s = await serve(app)
  try {
    for (const left of [2, 1, 0]) {
      const r = await fetch(s.url)
      assert.equal(r.status, 200)
      assert.equal(await r.text(), `${left} postgres`)
      assert.equal(r.headers.get('ratelimit-policy'), '"per-ip";q=3;w=60')
      assert.match(r.headers.get('ratelimit'), new RegExp(`^"per-ip";r=${left};t=\\d+$`))
      assert.equal(r.headers.get('x-ratelimit-limit'), '3')
      assert.equal(r.headers.get('x-ratelimit-remaining'), String(left))
    }
    const denied = await fetch(s.url)
    assert.equal(denied.status, 429)
    assert.ok(Number(denied.headers.get('retry-after')) >= 1)
    assert.ok(denied.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
    assert.deepEqual((await denied.json())['violated-policies'], ['per-ip'])
    // The count is in PostgreSQL: a second limiter object on the same prefix sees it.
    const again = new PostgresTokenBucket('3/min', { client: pool, prefix: limiter.prefix })
    assert.equal((await again.peek('127.0.0.1')).allowed, false)
  } finally {
    s.close()
  }
})

test('express on a PostgresLimiter: every policy listed, the denier named', async () => {
  const limiter = new PostgresLimiter({ burst: '2/min', daily: { algorithm: 'fixedWindow', rate: '100/day' } }, { client: pool, prefix: prefix() })
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

test('fastify on a PostgresFixedWindow and a PostgresSlidingWindow: the hook awaits the decision', async () => {
  for (const limiter of [new PostgresFixedWindow(2, '1h', { client: pool, prefix: prefix() }), new PostgresSlidingWindow(2, '1h', { client: pool, prefix: prefix() })]) {
    const app = Fastify()
    await app.register(ratomicFastify, { limiter })
    app.get('/', async (request) => ({ left: request.rateLimit.remaining, source: request.rateLimit.source }))
    await app.listen({ port: 0, host: '127.0.0.1' })
    const base = `http://127.0.0.1:${app.server.address().port}`
    try {
      const r = await fetch(base)
      assert.equal(r.status, 200)
      assert.deepEqual(await r.json(), { left: 1, source: 'postgres' })
      assert.equal(r.headers.get('ratelimit-policy'), '"default";q=2;w=3600')
      assert.match(r.headers.get('ratelimit'), /^"default";r=1;t=\d+$/)
      const second = await fetch(base)
      assert.equal(second.status, 200)
      assert.match(second.headers.get('ratelimit'), /^"default";r=0;t=\d+$/)
      const denied = await fetch(base)
      assert.equal(denied.status, 429)
      assert.ok(Number(denied.headers.get('retry-after')) >= 1)
      assert.ok(denied.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
    } finally {
      await app.close()
    }
  }
})

test('a PostgreSQL that cannot be reached: the in-memory onError limiter decides, or passOnStoreError; never a 500', async () => {
  const app = express()
  const reports = []
  const onLimiterError = (e) => reports.push(e.code)
  // Falls back to an in-memory bucket of 2: the third request is denied by it, not by a 503.
  const local = new PostgresTokenBucket('5/min', { client: dead, breakerThreshold: 0, onError: new TokenBucket(2, 1 / 60) })
  app.use('/local', rateLimit({ limiter: local, onLimiterError }))
  const raise = new PostgresTokenBucket('5/min', { client: dead, breakerThreshold: 0 })
  app.use('/closed', rateLimit({ limiter: raise, onLimiterError }))
  app.use('/open', rateLimit({ limiter: raise, passOnStoreError: true, onLimiterError }))
  app.use((req, res) => res.send(req.rateLimit ? req.rateLimit.source : 'unjudged'))
  const s = await serve(app)
  try {
    const get = async (path) => {
      const r = await fetch(s.url + path)
      return [r.status, r.status === 200 ? await r.text() : (await r.json()).status]
    }
    assert.deepEqual(await get('/local'), [200, 'fallback'])
    assert.deepEqual(await get('/local'), [200, 'fallback'])
    assert.deepEqual(await get('/local'), [429, 429])
    assert.deepEqual(await get('/closed'), [503, 503])
    assert.deepEqual(await get('/open'), [200, 'unjudged'])
    assert.ok(reports.includes('ERR_RATOMIC_BACKEND_POLICY'), 'the fallback is reported to the operator')
    assert.ok(reports.includes('ERR_RATOMIC_BACKEND'))
  } finally {
    s.close()
  }
})
