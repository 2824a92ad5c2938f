// The typings of `ratomic/postgres`, checked by tsc against postgres.d.ts
// (misuse must not type-check: each expected error is marked) and then run
// against the real PostgreSQL that run-tests.sh starts (RATOMIC_POSTGRES_URL),
// so every typed call is also a real call. typings-match.test.js checks that
// this file uses every declaration.
import test from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import { Limiter, TokenBucket } from 'ratomic'
import {
  migrate,
  PostgresBase,
  PostgresClient,
  PostgresDecision,
  PostgresFixedWindow,
  PostgresLimiter,
  PostgresMultiDecision,
  PostgresOptions,
  PostgresSlidingWindow,
  PostgresSource,
  PostgresTokenBucket,
  schema,
} from 'ratomic/postgres'

// pg ships no typings of its own (and @types/pg is not a dependency): its Pool, as this test uses it.
const { Pool } = require('pg') as { Pool: new (o: { connectionString?: string; host?: string; port?: number; max?: number }) => PostgresClient & { end(): Promise<void> } }

test('typings: ratomic/postgres through a pg Pool', async () => {
  const url = process.env.RATOMIC_POSTGRES_URL
  assert.ok(url, 'RATOMIC_POSTGRES_URL: run with bindings-node/run-tests.sh (it starts a server)')
  const pool = new Pool({ connectionString: url, max: 2 })
  const dead = new Pool({ host: '127.0.0.1', port: 1 })
  try {
    const client: PostgresClient = pool
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1)
    await migrate(client)
    await migrate(pool, { unlogged: false })
    const sql: string = schema(true)
    assert.match(sql, /UNLOGGED/)
    const prefix = `types-${process.pid}-${Date.now()}`
    const options: PostgresOptions = {
      client,
      prefix,
      onError: new TokenBucket('5/s'),
      denyRetryAfterMs: 500,
      denyCache: 100,
      breakerThreshold: 3,
      breakerCooldownMs: 2000,
      maxKeyLen: 64,
    }
    const tb = new PostgresTokenBucket(5, 1, options)
    const d: PostgresDecision = await tb.allow('k')
    const source: PostgresSource = d.source
    assert.equal(source, 'postgres')
    // peek answers as allow would: one more taken.
    assert.equal((await tb.peek('k')).remaining, 3)
    await tb.refund('k', 1)
    assert.equal((await tb.allowAt('j', 1000, 2)).remaining, 3)
    assert.equal((await tb.peekAt('j', 1000)).remaining, 2)
    await tb.refundAt('j', 1000, 1)
    await tb.reset('k')
    const many: PostgresDecision[] = await tb.allowMany(['a', ['b', 2], Buffer.from('c')])
    assert.equal(many.length, 3)
    assert.equal((await tb.allowManyAt(['j'], 1000))[0].remaining, 3)
    assert.equal((await tb.acquire('k', 1, { timeoutMs: 0 })).allowed, true)
    const removed: number = await tb.gc()
    assert.ok(removed >= 0)
    assert.equal(tb.client, pool)
    assert.equal(tb.prefix, prefix)
    assert.equal(tb.limit, 5)
    assert.equal(tb.breakerOpen, false)
    assert.ok(tb instanceof PostgresBase)

    // Leases: off by default; 'auto' or a size; giveBack() returns what is unused.
    assert.equal(tb.lease, null)
    const leasing = new PostgresTokenBucket(80, 10, { client, prefix: `${prefix}-lease`, lease: 'auto', leaseKeys: 100, maxInFlight: 2 })
    const max: number | null = leasing.lease
    assert.equal(max, 10)
    await leasing.allow('k')
    await leasing.allow('k') // a warm key: this statement took a lease
    const held: number = leasing.leasesHeld
    assert.equal(held, 1)
    const back: number = await leasing.giveBack()
    assert.equal(back, 1)
    assert.equal(leasing.leasesHeld, 0)
    // @ts-expect-error lease is 'off', 'auto' or a number
    assert.throws(() => new PostgresTokenBucket(5, 1, { client, lease: 'always' }), RangeError)

    // Header fields and problem bodies, as the in-memory limiters give them (what the middleware sends).
    const fields: Array<[string, string]> = tb.headers(d, { name: 'api', legacy: true })
    assert.deepEqual(fields[0], ['RateLimit-Policy', '"api";q=5;w=5'])
    const problem: string | null = tb.problem(d, { name: 'api' })
    assert.equal(problem, null)

    const fw = new PostgresFixedWindow(10, 60000, { client, prefix, onError: 'allow' })
    const sw = new PostgresSlidingWindow('10/min', { client, prefix, onError: 'deny' })
    assert.equal((await new PostgresTokenBucket('10/s', { client, prefix, burst: 20 }).allow('k2')).limit, 20)
    assert.equal((await new PostgresFixedWindow('3/s', { client, prefix }).allow('k3')).limit, 3)
    for (const l of [fw, sw]) assert.equal((await l.allow('k4')).source, 'postgres')
    const printed: string = fw.toString()
    assert.equal(printed, `PostgresFixedWindow { fixed window 10 per 1m, prefix: ${JSON.stringify(prefix)} }`)
    assert.equal(inspect(sw), `PostgresSlidingWindow { sliding window 10 per 1m, prefix: ${JSON.stringify(prefix)} }`)

    const m = new PostgresLimiter({ burst: '2/s', day: { algorithm: 'fixedWindow', rate: '100/d' } }, { client, prefix, onError: new Limiter({ burst: '2/s' }) })
    const md: PostgresMultiDecision = await m.allow('u')
    assert.deepEqual(
      md.entries.map((e) => e.name),
      ['burst', 'day']
    )
    assert.deepEqual(m.names, ['burst', 'day'])
    assert.equal(md.source, 'postgres')
    assert.equal(m.headers(md, { legacy: false })[0][1], '"burst";q=2;w=1, "day";q=100;w=86400')
    assert.equal(m.problem(md), null)
    assert.equal(String(m), `PostgresLimiter { "burst": token bucket 2 per 1s, "day": fixed window 100 per 1d, prefix: ${JSON.stringify(prefix)} }`)
    // @ts-expect-error a PostgresLimiter's limits are named already
    assert.throws(() => m.headers(md, { name: 'x' }), TypeError)

    // The in-memory limiter given as onError answers while the server cannot be reached.
    const local = new PostgresTokenBucket(5, 1, { client: dead, onError: new TokenBucket(1, 1) })
    const fell: PostgresDecision = await local.allow('k')
    assert.deepEqual([fell.allowed, fell.source], [true, 'fallback'])
    assert.deepEqual([(await local.allow('k')).allowed], [false])

    // @ts-expect-error the client is required
    assert.throws(() => new PostgresTokenBucket(5, 1, {}), TypeError)
    // @ts-expect-error a URL is not a client
    assert.throws(() => new PostgresTokenBucket(5, 1, { client: url }), TypeError)
    // @ts-expect-error a single-rule limiter falls back to a single-rule limiter, not a Limiter
    assert.throws(() => new PostgresTokenBucket(5, 1, { client, onError: new Limiter({ a: '1/s' }) }), TypeError)
    // @ts-expect-error onError is 'raise', 'allow', 'deny', 'fallback' or a limiter
    assert.throws(() => new PostgresTokenBucket(5, 1, { client, onError: 'ignore' }), RangeError)
    // @ts-expect-error PostgresBase is abstract
    assert.throws(() => new PostgresBase(), TypeError)
  } finally {
    await dead.end()
    await pool.end()
  }
})
