'use strict'
// ratomic/postgres against a real PostgreSQL (a throwaway cluster that
// run-tests.sh starts with postgres/server.sh; its URL in
// RATOMIC_POSTGRES_URL), through the pg Pool a Node team holds: parity with
// the in-memory limiters on the same explicit times, batches, misuse
// refused before any statement, the failure policy.
const test = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { Pool } = require('pg')
const ratomic = require('..')
const { PostgresBase, PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow, PostgresLimiter, migrate, schema } = require('../postgres')

const url = process.env.RATOMIC_POSTGRES_URL
assert.ok(url, 'RATOMIC_POSTGRES_URL: run these tests with bindings-node/run-tests.sh (it starts a server)')
const pool = new Pool({ connectionString: url, max: 4 })
test.after(() => pool.end())
test.before(() => migrate(pool))

const prefix = () => 't-' + crypto.randomBytes(6).toString('hex')
// Every field, waits in whole µs rounded up (PostgreSQL computes in whole µs).
const up = (ms) => Math.ceil(Math.round(ms * 1e6) / 1000)
const fields = (d) => [d.allowed, d.remaining, d.limit, up(d.retryAfterMs), up(d.resetAfterMs)]

// A small deterministic generator (the same steps every run).
function rng(seed) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

for (const [name, make] of [
  ['token bucket', (clock, o) => [new ratomic.TokenBucket(5, 50, { clock }), new PostgresTokenBucket(5, 50, o)]],
  ['fixed window', (clock, o) => [new ratomic.FixedWindow(4, 100, { clock }), new PostgresFixedWindow(4, 100, o)]],
  ['sliding window', (clock, o) => [new ratomic.SlidingWindow(4, 100, { clock }), new PostgresSlidingWindow(4, 100, o)]],
  ['limiter', (clock, o) => [
    new ratomic.Limiter({ burst: '2/10ms', window: '5/100ms' }, { clock }),
    new PostgresLimiter({ burst: '2/10ms', window: '5/100ms' }, o),
  ]],
]) {
  test(`${name}: every field equals the in-memory limiter on the same explicit times`, async () => {
    const clock = new ratomic.ManualClock()
    const [mem, pg] = make(clock, { client: pool, prefix: prefix() })
    const r = rng(7)
    let now = 1000
    for (let step = 0; step < 200; step++) {
      now += [0, 0, 1, 3, 8, 32][Math.floor(r() * 6)] // whole ms
      clock.set(now)
      const key = ['a', 'b', Buffer.from([0x63, 0, 0xff])][Math.floor(r() * 3)]
      const cost = Math.floor(r() * (pg.limit + 1))
      const what = r()
      if (what < 0.6) {
        assert.deepEqual(fields(await pg.allowAt(key, now, cost)), fields(mem.allow(key, cost)), `step ${step}`)
      } else if (what < 0.75) {
        assert.deepEqual(fields(await pg.peekAt(key, now, cost)), fields(mem.peek(key, cost)), `step ${step}`)
      } else if (what < 0.85) {
        await pg.refundAt(key, now, cost)
        mem.refund(key, cost)
      } else {
        const reqs = [0, 1, 2].map(() => [r() < 0.5 ? 'a' : 'b', Math.floor(r() * (pg.limit + 1))])
        const got = (await pg.allowManyAt(reqs, now)).map(fields)
        assert.deepEqual(got, mem.allowMany(reqs).map(fields), `step ${step}`)
      }
    }
  })
}

test('calls at the server time answer from postgres, then the deny cache', async () => {
  const pg = new PostgresLimiter({ burst: '2/h', day: '10/d' }, { client: pool, prefix: prefix() })
  assert.deepEqual([(await pg.allow('k')).allowed, (await pg.allow('k')).allowed], [true, true])
  const denied = await pg.allow('k')
  assert.equal(denied.allowed, false)
  assert.equal(denied.source, 'postgres')
  assert.deepEqual(denied.deniedBy, ['burst'])
  assert.equal((await pg.allow('k')).source, 'deny_cache')
  await pg.refund('k', 1)
  assert.equal((await pg.allow('k')).allowed, true)
  await pg.reset('k')
  assert.equal((await pg.peek('k', 0)).remaining, 2)
  assert.equal((await pg.acquire('k', 2, { timeoutMs: 0 })).allowed, true)
  assert.equal(await pg.gc(), 0, 'the key is not full')
})

test('bad input is refused before any statement, and the batch charges nothing', async () => {
  const p = prefix()
  const pg = new PostgresTokenBucket(3, 1, { client: pool, prefix: p })
  await assert.rejects(pg.allow('k', 4), (e) => e instanceof RangeError && e.code === 'ERR_RATOMIC_COST_EXCEEDS_LIMIT')
  await assert.rejects(pg.allowMany([['a', 1], ['b', 9]]), (e) => e.index === 1)
  await assert.rejects(pg.allow('x'.repeat(1025)), RangeError)
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM ratomic_v1_state WHERE prefix = $1', [p])
  assert.equal(rows[0].n, 0, 'nothing was written')
  assert.throws(() => new PostgresTokenBucket(3, 1, { client: {} }), TypeError)
})

test('a server that cannot be reached follows the policy', async () => {
  // A pool on a port nothing listens on: every query fails to connect.
  const dead = new Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 1000 })
  try {
    const closed = new PostgresTokenBucket('5/h', { client: dead, onError: 'deny', denyRetryAfterMs: 7000 })
    const d = await closed.allow('k')
    assert.deepEqual([d.allowed, d.source, d.retryAfterMs], [false, 'policy', 7000])
    const raising = new PostgresTokenBucket('5/h', { client: dead })
    await assert.rejects(raising.allow('k'), (e) => e.code === 'ERR_RATOMIC_BACKEND' && e.cause !== undefined)
    const fallback = new PostgresTokenBucket('5/h', { client: dead, onError: 'fallback' })
    assert.equal((await fallback.allow('k')).source, 'fallback')
  } finally {
    await dead.end()
  }
})

test('the schema is printable and unlogged on request; the base class is not constructible', () => {
  assert.match(schema(), /CREATE TABLE IF NOT EXISTS ratomic_v1_state/)
  assert.match(schema(true), /CREATE UNLOGGED TABLE IF NOT EXISTS ratomic_v1_state/)
  assert.throws(() => new PostgresBase([], {}, false), TypeError)
})

test('leases answer a hot key here, leave their slots alone under refunds and resets elsewhere, and go back', async () => {
  // 40 tokens, 40 an hour: nothing refills during the test. `auto`: leases
  // of at most 40 / 8 = 5 tokens; a warm key's first is 2.
  const p = prefix()
  const a = new PostgresTokenBucket(40, 40 / 3600, { client: pool, prefix: p, lease: 'auto' })
  const other = new PostgresTokenBucket(40, 40 / 3600, { client: pool, prefix: p })
  assert.equal(a.lease, 5)
  assert.equal((await a.allow('k')).source, 'postgres') // a key seen once takes no lease
  assert.equal((await a.allow('k')).source, 'postgres') // a warm key: this statement took a lease of 2
  assert.equal(a.leasesHeld, 1)
  assert.equal((await other.peek('k', 0)).remaining, 36)
  await other.refund('k', 5)
  await other.reset('k')
  assert.equal((await other.peek('k', 0)).remaining, 36, 'refunds and resets elsewhere leave the lease alone')
  const d = await a.allow('k')
  assert.deepEqual([d.source, d.allowed, d.remaining], ['lease', true, 37]) // the fleet's 36, plus 1 still leased
  assert.equal(await a.giveBack(), 1)
  assert.equal(a.leasesHeld, 0)
  assert.equal((await other.peek('k', 0)).remaining, 37)
})

test('bad lease options are clear errors', () => {
  assert.throws(() => new PostgresFixedWindow(10, 1000, { client: pool, lease: 4 }), /token bucket/)
  assert.throws(() => new PostgresTokenBucket(10, 1, { client: pool, lease: 'sometimes' }), /lease/)
  assert.equal(new PostgresFixedWindow(10, 1000, { client: pool, lease: 'auto' }).lease, null)
})

test('onError: an in-memory limiter decides every call while the server cannot be reached', async () => {
  const dead = new Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 1000 })
  try {
    const local = new ratomic.TokenBucket(2, 1 / 60)
    const pg = new PostgresTokenBucket('5/h', { client: dead, breakerThreshold: 0, onError: local })
    assert.deepEqual([(await pg.peek('k')).remaining, (await pg.peek('k')).source], [1, 'fallback'])
    const d = await pg.allow('k')
    assert.deepEqual([d.allowed, d.remaining, d.limit, d.source], [true, 1, 2, 'fallback'])
    const many = await pg.allowMany(['k', 'k'])
    assert.deepEqual(many.map((m) => [m.allowed, m.source]), [[true, 'fallback'], [false, 'fallback']])
    assert.equal(local.peek('k', 0).remaining, 0, 'the calls went to the local limiter')
    // A Limiter falls back to a Limiter; a refund still fails (nothing to give back to).
    const multi = new PostgresLimiter({ a: '1/h' }, { client: dead, onError: new ratomic.Limiter({ a: '1/h' }) })
    assert.deepEqual((await multi.allow('k')).entries.map((e) => e.name), ['a'])
    await assert.rejects(pg.refund('k', 1), (e) => e.code === 'ERR_RATOMIC_BACKEND')
    assert.throws(() => new PostgresTokenBucket('5/h', { client: dead, onError: new ratomic.Limiter({ a: '1/h' }) }), TypeError)
    assert.throws(() => new PostgresLimiter({ a: '1/h' }, { client: dead, onError: local }), TypeError)
    // The string policies still work.
    assert.equal((await new PostgresTokenBucket('5/h', { client: dead, onError: 'fallback' }).allow('k')).source, 'fallback')
  } finally {
    await dead.end()
  }
})

// A pg Pool that counts the statements sent through it.
function counting(target) {
  const c = { statements: 0, query: (...a) => { c.statements++; return target.query(...a) } }
  return c
}

test('calls in flight at once share statements and stay exact: 400 at once on two keys of a bucket of 50 grant exactly 50 each', async () => {
  const client = counting(pool)
  const pg = new PostgresTokenBucket(50, 50 / 3600, { client, prefix: prefix(), maxInFlight: 2, denyCache: 0 })
  const keys = ['hot', Buffer.from([0, 0xff, 7])]
  const got = await Promise.all(Array.from({ length: 400 }, (_, i) => pg.allow(keys[i % 2])))
  for (const [j, key] of keys.entries()) {
    const mine = got.filter((_, i) => i % 2 === j)
    const allowed = mine.filter((d) => d.allowed)
    assert.equal(allowed.length, 50, `exactly the burst on ${key}`)
    // The i-th grant to reach the row leaves 50 - i tokens at its time, or
    // one fewer: a statement's time is when it started
    // (statement_timestamp()), and one that waited on another's row lock
    // decides at its earlier time, as the SPEC's equation gives. So, largest
    // first, the i-th remaining is 50 - i or 49 - i, and the first is 49.
    const left = allowed.map((d) => d.remaining).sort((a, b) => b - a)
    left.forEach((r, i) => assert.ok(r === 49 - i || (i > 0 && r === 48 - i), `remaining ${left} on ${key}`))
    for (const d of mine.filter((d) => !d.allowed)) {
      assert.deepEqual([d.remaining, d.limit, d.source], [0, 50, 'postgres'])
      assert.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 72000, `retry after ${d.retryAfterMs} ms`)
    }
  }
  assert.ok(client.statements < 40, `400 calls went in ${client.statements} statements, not one each`)
  assert.ok(client.statements >= 2)
})

test('calls alone go one statement each, and maxInFlight is checked', async () => {
  const client = counting(pool)
  // 5 an hour: no token comes back between the calls, however slow the machine.
  const pg = new PostgresTokenBucket(5, 5 / 3600, { client, prefix: prefix() })
  for (let i = 0; i < 3; i++) assert.equal((await pg.allow('k')).remaining, 4 - i)
  assert.equal(client.statements, 3)
  for (const bad of [0, 1.5, -1, '2', null]) {
    assert.throws(() => new PostgresTokenBucket(5, 1, { client: pool, maxInFlight: bad }), (e) => e instanceof TypeError && /maxInFlight/.test(e.message))
  }
})

test('a statement that times out with calls waiting: every call gets the policy, none hangs', async () => {
  // One connection holds the key's row locked; the limiter's statements wait for it until their statement_timeout.
  const p = prefix()
  const slow = new Pool({ connectionString: url, max: 2, statement_timeout: 200 })
  const holder = await pool.connect()
  try {
    const seed = new PostgresTokenBucket(100, 1, { client: pool, prefix: p })
    await seed.allow('k') // the row exists
    await holder.query('BEGIN')
    await holder.query('SELECT 1 FROM ratomic_v1_state WHERE prefix = $1 FOR UPDATE', [p])
    const make = (onError) => new PostgresTokenBucket(100, 1, { client: slow, prefix: p, onError, breakerThreshold: 0, maxInFlight: 1 })
    const denying = await Promise.all(Array.from({ length: 20 }, () => make('deny').allow('k')))
    // (each limiter its own queue: a shared one below)
    const one = make('deny')
    const queued = await Promise.all(Array.from({ length: 20 }, () => one.allow('k')))
    for (const d of [...denying, ...queued]) assert.deepEqual([d.allowed, d.source], [false, 'policy'])
    const raising = make('raise')
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => raising.allow('k')))
    for (const o of outcomes) {
      assert.equal(o.status, 'rejected')
      assert.equal(o.reason.code, 'ERR_RATOMIC_BACKEND')
      assert.match(o.reason.message, /timed out|timeout/i)
    }
    const local = new ratomic.TokenBucket(5, 1 / 3600)
    const falling = make(local)
    const fb = await Promise.all(Array.from({ length: 20 }, () => falling.allow('k')))
    assert.ok(fb.every((d) => d.source === 'fallback'))
    assert.equal(fb.filter((d) => d.allowed).length, 5, 'the local limiter decided each call once')
  } finally {
    await holder.query('ROLLBACK').catch(() => {})
    holder.release()
    await slow.end()
  }
})

test('the common call: granted by one upsert; a denial writes nothing and is answered in full', async () => {
  const p = prefix()
  const client = counting(pool)
  const pg = new PostgresTokenBucket(3, 3 / 3600, { client, prefix: p, denyCache: 0 })
  const got = []
  for (let i = 0; i < 3; i++) got.push(await pg.allow('k'))
  assert.deepEqual(got.map((d) => [d.allowed, d.remaining, d.limit]), [[true, 2, 3], [true, 1, 3], [true, 0, 3]])
  assert.equal(client.statements, 3, 'one statement per granted call')
  const row = async () => (await pool.query('SELECT xmin::text AS x, state FROM ratomic_v1_state WHERE prefix = $1', [p])).rows[0]
  const before = await row()
  const denied = await pg.allow('k')
  assert.deepEqual([denied.allowed, denied.remaining, denied.limit, denied.source], [false, 0, 3, 'postgres'])
  // One token every 1,200 s: the next comes within that (and not much sooner: 3 were just taken).
  assert.ok(denied.retryAfterMs > 1_100_000 && denied.retryAfterMs <= 1_200_000, `retry after ${denied.retryAfterMs} ms`)
  assert.ok(denied.resetAfterMs > 3_500_000 && denied.resetAfterMs <= 3_600_000, `reset after ${denied.resetAfterMs} ms`)
  assert.equal(client.statements, 5, 'the upsert, then ratomic_v1_call for the fields')
  assert.deepEqual(await row(), before, 'the denial wrote nothing')
  // A cost of 0 is not the upsert's either: ratomic_v1_call answers it, and writes nothing.
  const zero = await pg.allow('k', 0)
  assert.deepEqual([zero.allowed, zero.remaining], [true, 0])
  assert.deepEqual(await row(), before)
})

test('a leasing limiter coalesces too: calls that ask no lease wait and share statements, exactly', async () => {
  // lease 'auto': every call goes by the general begin (a warm key may ask
  // for a lease); those that ask none wait past maxInFlight (park) and go
  // together. 300 calls at once on 3 keys of a bucket of 40 an hour.
  const client = counting(pool)
  const pg = new PostgresTokenBucket(40, 40 / 3600, { client, prefix: prefix(), lease: 'auto', maxInFlight: 1, denyCache: 0 })
  const keys = ['a', 'b', Buffer.from([0, 1])]
  const got = await Promise.all(Array.from({ length: 300 }, (_, i) => pg.allow(keys[i % 3])))
  for (const [j] of keys.entries()) {
    const mine = got.filter((_, i) => i % 3 === j)
    assert.equal(mine.filter((d) => d.allowed).length, 40, `exactly the burst on key ${j}`)
    for (const d of mine.filter((d) => !d.allowed)) assert.equal(d.remaining, 0)
  }
  assert.ok(client.statements < 100, `300 calls went in ${client.statements} statements`)
  await pg.giveBack()
})

test('the upsert is sent cost × T exactly, past the whole numbers a double holds', async () => {
  // One token every 9,100,000,000,000,001 µs (~288 years): cost × T is odd
  // and above 2^53, where a JavaScript number would round it.
  const sent = []
  const client = { query: (q, ...rest) => { sent.push(q.values); return pool.query(q, ...rest) } }
  const t = '9100000000000001'
  for (const pg of [
    new PostgresTokenBucket(1, 1e6 / Number(t), { client, prefix: prefix(), maxInFlight: 1, denyCache: 0 }),
    new PostgresLimiter({ only: `1/${t}us` }, { client, prefix: prefix(), maxInFlight: 1, denyCache: 0 }),
  ]) {
    sent.length = 0
    const d = await pg.allow('k')
    assert.deepEqual([d.allowed, d.remaining, d.limit], [true, 0, 1])
    const upsert = sent.find((v) => v.length === 5)
    assert.ok(upsert, 'an allow on one token bucket goes by the upsert')
    const interval = upsert[4] // τ = capacity × T = T
    assert.equal(upsert[3], interval, 'the increment of a cost of 1 is T, to the µs')
    if (pg instanceof PostgresLimiter) assert.equal(interval, t)
    // The bucket is empty for ~288 years: the reply's reset is T (in ms, within a rounding).
    assert.ok(Math.abs(d.resetAfterMs - Number(interval) / 1000) < 1, `reset after ${d.resetAfterMs} ms`)
    assert.equal((await pg.allow('k')).allowed, false)
  }
})
