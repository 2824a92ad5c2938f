'use strict'
// ratomic/redis against real redis-servers (started here on free 127.0.0.1
// ports, without persistence; run-tests.sh installs redis-server), through
// both clients a Node team holds: ioredis and node-redis.
//
// The behaviours of the in-memory limiters, on Redis; parity with them on
// the same explicit times; 100 concurrent promises and 4 processes on a
// bucket of 50; a server killed or frozen mid-run; NOSCRIPT; clients of the
// wrong kind.
const test = require('node:test')
const assert = require('node:assert/strict')
const { fork } = require('node:child_process')
const crypto = require('node:crypto')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const ratomic = require('..')
const { RedisBase, RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow, RedisLimiter } = require('../redis')
const { startRedis, answered, SLOW_MACHINE_MS } = require('./redis-server')

// What a call against a dead or frozen server may take before the test calls
// it a hang. Not a speed requirement (timeoutMs is 100; a loaded machine may
// take longer to run the timer): a call with no timeout would wait forever.
const HANG_BOUND_MS = 30_000

// Every limiter here that should hear from Redis waits up to SLOW_MACHINE_MS
// for it: with the 50 ms default a loaded machine's stall would be a
// timeout (the first call also waits for the connection). Only the tests of
// failures keep short timeouts, which must fire once the server is gone.

// ---- a child process racing on a bucket (see the 4-process test) -----------------

if (process.env.RATOMIC_REDIS_CHILD) {
  const { port, prefix, calls } = JSON.parse(process.env.RATOMIC_REDIS_CHILD)
  const client = new Redis({ port, host: '127.0.0.1' })
  const l = new RedisTokenBucket(50, 1 / 3600, { client, prefix, denyCache: 0, timeoutMs: SLOW_MACHINE_MS })
  process.once('message', async () => {
    const ds = await Promise.all(Array.from({ length: calls }, () => l.allow('hot')))
    process.send(ds.filter((d) => d.allowed).length, () => {
      client.disconnect()
      process.disconnect()
    })
  })
  process.send('ready')
  return
}

// ---- fixtures ----------------------------------------------------------------------

let server
const opened = []

test.before(async () => {
  server = await startRedis()
})

test.after(async () => {
  for (const c of opened) await close(c)
  await server.stop()
})

async function close(c) {
  try {
    if (typeof c.pipeline === 'function') c.disconnect()
    else if (c.isOpen) await c.destroy()
  } catch {
    // already closed
  }
}

// A fresh client of each kind on `port`, closed when the file ends.
const CLIENTS = {
  ioredis: async (port, extra = {}) => {
    const c = new Redis({ port, host: '127.0.0.1', ...extra })
    c.on('error', () => {}) // a stopped server is reported per command
    return c
  },
  'node-redis': async (port, extra = {}) => {
    const c = createClient({ socket: { port, host: '127.0.0.1', ...extra.socket }, ...extra.options })
    c.on('error', () => {}) // a stopped server is reported per command
    await c.connect()
    return c
  },
}

async function client(kind, port = server.port, extra) {
  const c = await CLIENTS[kind](port, extra)
  opened.push(c)
  return c
}

const prefix = () => `t-${crypto.randomBytes(6).toString('hex')}:`

// Every field of a decision, waits in whole µs rounded up: Redis computes in
// whole µs (exact for these rules' buckets and windows; a sliding window's
// exact wait is rounded up there, so a caller who waits it is never early).
const up = (ms) => Math.ceil(Math.round(ms * 1e6) / 1000)
const fields = (d) => [d.allowed, d.remaining, d.limit, up(d.retryAfterMs), up(d.resetAfterMs)]

// ---- the behaviours, through both clients --------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a burst is granted, then denied with the exact wait`, async () => {
    const l = new RedisTokenBucket(3, 1, { client: await client(kind), prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
    const ds = []
    for (let i = 0; i < 4; i++) ds.push(await l.allowAt('k', 10_000))
    assert.deepEqual(
      ds.map((d) => d.allowed),
      [true, true, true, false]
    )
    assert.deepEqual(
      ds.map((d) => d.remaining),
      [2, 1, 0, 0]
    )
    assert.equal(ds[3].retryAfterMs, 1000)
    assert.equal(ds[3].resetAfterMs, 3000)
    assert.ok(ds.every((d) => d.source === 'redis' && d.limit === 3))
    assert.deepEqual(Object.keys(ds[0]).sort(), ['allowed', 'limit', 'remaining', 'resetAfterMs', 'retryAfterMs', 'source'])
    assert.equal((await l.allowAt('k', 10_999.999)).allowed, false)
    assert.equal((await l.allowAt('k', 11_000)).allowed, true, 'refilled after exactly retryAfterMs')
  })

  test(`${kind}: keys are independent; reset and refund give tokens back`, async () => {
    const c = await client(kind)
    const p = prefix()
    // 2 an hour: no token comes back during the test, however slow the machine.
    const l = new RedisTokenBucket('2/h', { client: c, prefix: p, timeoutMs: SLOW_MACHINE_MS })
    assert.equal((await l.allow('a', 2)).allowed, true)
    assert.equal((await l.allow('a')).allowed, false)
    assert.equal((await l.allow('b')).allowed, true, 'another key has its own bucket')
    await l.reset('a')
    assert.equal((await l.allow('a', 2)).allowed, true, 'a reset key is full')
    await l.refund('a', 1)
    const d = await l.peek('a')
    assert.ok(d.allowed && d.remaining === 0)
    const exists = kind === 'ioredis' ? await c.exists(`${p}{a}`) : await c.sendCommand(['EXISTS', `${p}{a}`])
    assert.equal(exists, 1, 'keys live at <prefix>{key}')
    assert.equal(l.prefix, p)
    assert.equal(l.client, c)
  })

  test(`${kind}: windows and a two-limit limiter decide as documented`, async () => {
    const c = await client(kind)
    const p = prefix()
    const fw = new RedisFixedWindow(2, 10_000, { client: c, prefix: p + 'fw:', timeoutMs: SLOW_MACHINE_MS })
    const at = async (l, times) => {
      const out = []
      for (const t of times) out.push((await l.allowAt('k', t)).allowed)
      return out
    }
    assert.deepEqual(await at(fw, [0, 1000, 9000, 10_000]), [true, true, false, true])
    const sw = new RedisSlidingWindow('2/10s', { client: c, prefix: p + 'sw:', timeoutMs: SLOW_MACHINE_MS })
    assert.deepEqual(await at(sw, [0, 1000, 12_000, 19_000]), [true, true, false, true])
    const m = new RedisLimiter({ burst: '2/s', daily: { algorithm: 'fixedWindow', limit: 3, window: '1d' } }, { client: c, prefix: p + 'm:', timeoutMs: SLOW_MACHINE_MS })
    const ds = []
    for (const t of [0, 0, 0, 5000, 10_000]) ds.push(await m.allowAt('u', t))
    assert.deepEqual(
      ds.map((d) => d.allowed),
      [true, true, false, true, false]
    )
    assert.deepEqual(ds[2].deniedBy, ['burst'])
    assert.deepEqual(ds[4].deniedBy, ['daily'])
    assert.ok(ds[4].entries[0].allowed, 'on a denial each entry is what that limit alone would answer')
    assert.deepEqual(m.names, ['burst', 'daily'])
    assert.equal(ds[0].entries[1].name, 'daily')
    assert.equal(ds[0].entries[1].remaining, 2)
    assert.equal(m.limit, 2)
    const many = await m.allowManyAt(['v', ['v', 2], 'w'], 0)
    assert.deepEqual(
      many.map((d) => [d.allowed, d.source]),
      [
        [true, 'redis'],
        [false, 'redis'],
        [true, 'redis'],
      ]
    )
  })

  test(`${kind}: acquire waits out the denial, or resolves with it past timeoutMs`, async () => {
    const c = await client(kind)
    // The denial on a bucket that refills once an hour: a stall between the
    // two calls cannot refill it.
    const hourly = new RedisTokenBucket(1, 1 / 3600, { client: c, prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
    assert.equal((await hourly.allow('k')).allowed, true)
    const denied = await hourly.acquire('k', 1, { timeoutMs: 0 })
    assert.ok(!denied.allowed && denied.retryAfterMs > 0, 'a wait past the timeout: the denial, nothing slept')
    const l = new RedisTokenBucket(1, 50, { client: c, prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
    assert.equal((await l.allow('k')).allowed, true)
    const d = await l.acquire('k')
    assert.equal(d.allowed, true, 'granted once the 20 ms refill has passed')
    const ac = new AbortController()
    ac.abort(new Error('gone'))
    await assert.rejects(l.acquire('k', 1, { signal: ac.signal }), /gone/)
  })
}

test('bad input rejects with the in-memory errors before any round trip', async () => {
  // Nothing listens on port 1: a round trip would fail (as a timeout).
  const dead = new Redis({ port: 1, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  opened.push(dead)
  const l = new RedisTokenBucket('2/s', { client: dead, timeoutMs: 5000 })
  const code = (c) => (e) => e.code === c
  await assert.rejects(l.allow('k', 3), code('ERR_RATOMIC_COST_EXCEEDS_LIMIT'))
  await assert.rejects(l.allow('x'.repeat(1025)), code('ERR_RATOMIC_KEY_TOO_LONG'))
  await assert.rejects(l.allow(42), TypeError)
  await assert.rejects(l.allow('k', 1.5), RangeError)
  await assert.rejects(l.allow('k', '1'), TypeError)
  await assert.rejects(l.allowAt('k', NaN), RangeError)
  await assert.rejects(l.allowAt('k', '5'), TypeError)
  await assert.rejects(l.refund('k', -1), RangeError)
  await assert.rejects(l.reset({}), TypeError)
  await assert.rejects(l.allowMany(['a', ['b', 9]]), (e) => e.code === 'ERR_RATOMIC_COST_EXCEEDS_LIMIT' && e.index === 1)
  await assert.rejects(l.allowMany('ab'), TypeError)
  await assert.rejects(l.acquire('k', 1, { timeoutMs: -1 }), RangeError)
  assert.equal(dead.status, 'wait', 'nothing was sent: the client never connected')
  assert.throws(() => new RedisTokenBucket('ten/s', { client: dead }), code('ERR_RATOMIC_INVALID_RATE'))
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, prefix: 'a{b}' }), /prefix/)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, prefix: 7 }), TypeError)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, onError: 'ignore' }), /onError/)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, onError: new ratomic.Limiter({ a: '1/s' }) }), TypeError)
  assert.throws(() => new RedisLimiter({ a: '1/s' }, { client: dead, onError: new ratomic.TokenBucket('1/s') }), TypeError)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, timeoutMs: 0 }), RangeError)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, denyCache: -1 }), RangeError)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, denyCache: '5' }), TypeError)
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, colour: 'red' }), /colour/)
  // Out of range: refused quoting the value as given, never clamped or saturated.
  for (const [name, value, range] of [
    ['breakerThreshold', 2 ** 40, 'whole number from 0 to 4294967295'],
    ['breakerCooldownMs', 1e30, 'finite number of milliseconds from 0 to 18446744073709.551615: 2^64 − 1 ns'],
    ['breakerFailureTimeMs', 1e30, 'finite number of milliseconds from 0 to 18446744073709.551615: 2^64 − 1 ns'],
  ]) {
    const shown = value === 1e30 ? '1e+30' : String(value)
    assert.throws(() => new RedisTokenBucket('2/s', { client: dead, [name]: value }), {
      name: 'RangeError',
      message: `invalid ${name}: ${shown} (above the maximum: must be a ${range})`,
    })
  }
  assert.throws(() => new RedisTokenBucket('2/s', { client: dead, onError: 'deny', denyRetryAfterMs: 1e30 }), {
    message: /^invalid denyRetryAfterMs: 1e\+30 \(above the maximum/,
  })
  assert.throws(() => new RedisTokenBucket('2/s'), /client/)
  assert.throws(() => new RedisLimiter({}, { client: dead }), RangeError)
  assert.throws(() => new RedisBase([], { client: dead }, false), /not constructible/)
})

test('a client of the wrong kind is a clear TypeError', async () => {
  for (const wrong of [Redis, {}, 'redis://127.0.0.1', null, 42]) {
    assert.throws(() => new RedisTokenBucket('2/s', { client: wrong }), (e) => e instanceof TypeError && /client must be/.test(e.message))
  }
  const { createCluster } = require('redis')
  const cluster = createCluster({ rootNodes: [{ url: server.url }] })
  assert.throws(() => new RedisTokenBucket('2/s', { client: cluster }), /client must be/, 'node-redis clusters are not supported: use ioredis')
})

// ---- parity with memory ----------------------------------------------------------

function rng(seed) {
  // mulberry32: a small seeded generator, so a failing sequence replays.
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// [op, key, cost, atMs] with times in whole µs (Redis's resolution).
function* pairs(seed) {
  const r = rng(seed)
  const pick = (xs) => xs[Math.floor(r() * xs.length)]
  const below = (n) => Math.floor(r() * n)
  let us = below(10_000_000)
  for (let i = 0; i < 300; i++) {
    us += pick([0, 0, 1 + below(50_000), 1 + below(2_000_000)])
    yield [pick(['allow', 'allow', 'peek']), pick(['a', 'b']), 1 + below(3), us / 1000]
  }
}

const KINDS = {
  tokenBucket: [(o) => new ratomic.TokenBucket(5, 10, o), (o) => new RedisTokenBucket(5, 10, { ...o, timeoutMs: SLOW_MACHINE_MS })],
  fixedWindow: [(o) => new ratomic.FixedWindow(4, 2000, o), (o) => new RedisFixedWindow(4, 2000, { ...o, timeoutMs: SLOW_MACHINE_MS })],
  slidingWindow: [(o) => new ratomic.SlidingWindow(6, 3000, o), (o) => new RedisSlidingWindow(6, 3000, { ...o, timeoutMs: SLOW_MACHINE_MS })],
}

for (const [name, [inMemory, onRedis]] of Object.entries(KINDS)) {
  test(`${name}: every field equals the in-memory limiter on the same times`, async () => {
    const c = await client('ioredis')
    for (const seed of [0, 1, 2]) {
      const clock = new ratomic.ManualClock()
      const memory = inMemory({ clock })
      const redis = onRedis({ client: c, prefix: prefix() })
      assert.equal(redis.limit, memory.limit)
      for (const [op, key, cost, atMs] of pairs(seed)) {
        clock.set(atMs)
        const m = memory[op](key, cost)
        const r = await redis[op + 'At'](key, atMs, cost)
        assert.deepEqual(fields(r), fields(m), `${op} ${key} ${cost} at ${atMs} (seed ${seed})`)
        if (name !== 'slidingWindow') assert.deepEqual({ ...r, source: undefined }, { ...m, source: undefined })
      }
    }
  })
}

test('a limiter and its batches equal memory on the same times', async () => {
  const limits = { burst: '4/s', minute: { algorithm: 'slidingWindow', limit: 10, window: '1min' }, hour: { algorithm: 'fixedWindow', rate: '30/h' } }
  for (const kind of Object.keys(CLIENTS)) {
    const c = await client(kind)
    for (const seed of [0, 1]) {
      const clock = new ratomic.ManualClock()
      const memory = new ratomic.Limiter(limits, { clock })
      const redis = new RedisLimiter(limits, { client: c, prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
      const r = rng(seed + 100)
      const multi = (d) => [...fields(d), d.deniedBy, d.entries.map((e) => [e.name, ...fields(e)])]
      for (const [op, key, cost, atMs] of pairs(seed)) {
        clock.set(atMs)
        if (r() < 0.2) {
          const reqs = [[key, cost], 'c', [key, 1]]
          const ms = memory.allowMany(reqs)
          const rs = await redis.allowManyAt(reqs, atMs)
          assert.deepEqual(rs.map(multi), ms.map(multi))
          continue
        }
        const m = memory[op](key, cost)
        const d = await redis[op + 'At'](key, atMs, cost)
        assert.deepEqual(multi(d), multi(m), `${kind}: ${op} ${key} ${cost} at ${atMs}`)
      }
    }
  }
})

// ---- concurrency ---------------------------------------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: 100 concurrent promises on a bucket of 50 get exactly 50`, async () => {
    const l = new RedisTokenBucket(50, 1 / 3600, { client: await client(kind), prefix: prefix(), denyCache: 0, timeoutMs: SLOW_MACHINE_MS })
    const ds = await Promise.all(Array.from({ length: 100 }, () => l.allow('hot')))
    assert.equal(ds.filter((d) => d.allowed).length, 50)
    const many = await l.allowMany(['hot', 'hot'])
    assert.deepEqual(
      many.map((d) => d.allowed),
      [false, false]
    )
  })
}

test('4 processes of 25 concurrent calls each on a bucket of 50 get exactly 50', async () => {
  const p = prefix()
  const children = Array.from({ length: 4 }, () =>
    fork(__filename, [], {
      env: { ...process.env, RATOMIC_REDIS_CHILD: JSON.stringify({ port: server.port, prefix: p, calls: 25 }) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
  )
  const message = (child) =>
    new Promise((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', (code) => reject(new Error(`child exited with ${code} before answering`)))
    })
  await Promise.all(children.map(message)) // each is ready
  const granted = children.map(message)
  for (const child of children) child.send('go')
  const counts = await Promise.all(granted)
  assert.equal(
    counts.reduce((a, b) => a + b, 0),
    50,
    `grants per process: ${counts}`
  )
})

// ---- NOSCRIPT, the deny cache, failures -----------------------------------------

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a server that forgot the script gets it again and nothing is charged twice`, async () => {
    const c = await client(kind)
    const flush = () => (kind === 'ioredis' ? c.script('FLUSH') : c.sendCommand(['SCRIPT', 'FLUSH']))
    const l = new RedisTokenBucket(3, 1 / 3600, { client: c, prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
    await flush()
    assert.equal((await l.allow('k')).remaining, 2)
    await flush()
    assert.equal((await l.allow('k')).remaining, 1, 'one EVAL after NOSCRIPT, charged once')
    await flush()
    const ds = await l.allowMany(['k', 'j'])
    assert.deepEqual(
      ds.map((d) => d.remaining),
      [0, 2]
    )
  })
}

test('denials are answered from the deny cache until their wait ends', async () => {
  const l = new RedisTokenBucket(1, 1 / 3600, { client: await client('ioredis'), prefix: prefix(), timeoutMs: SLOW_MACHINE_MS })
  assert.equal((await l.allow('k')).source, 'redis')
  const first = await l.allow('k')
  assert.ok(!first.allowed && first.source === 'redis')
  const again = await l.allow('k')
  assert.ok(!again.allowed && again.source === 'deny_cache' && again.retryAfterMs <= first.retryAfterMs)
  assert.equal((await l.peek('k')).source, 'redis', 'peek always asks')
  await l.reset('k')
  assert.equal((await l.allow('k')).source, 'redis', 'a reset through this limiter forgets the cached denial')
})

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a killed server is answered by the policy, without hanging`, async () => {
    const s = await startRedis()
    try {
      // The client's own reconnection is its owner's choice; the limiter's timeout bounds every call.
      const c = await client(kind, s.port, kind === 'ioredis' ? { maxRetriesPerRequest: 0 } : {})
      const p = prefix()
      const deny = new RedisTokenBucket('5/s', { client: c, prefix: p, onError: 'deny', denyRetryAfterMs: 2000, breakerThreshold: 3 })
      const allow = new RedisTokenBucket('5/s', { client: c, prefix: p, onError: 'allow', breakerThreshold: 0 })
      // The local limiters refill hourly: their counts below cannot move during the test.
      const local = new ratomic.TokenBucket('5/h')
      const fallback = new RedisTokenBucket('5/s', { client: c, prefix: p, onError: local })
      const strict = new RedisTokenBucket('5/s', { client: c, prefix: p, breakerThreshold: 0 })
      const localLimiter = new ratomic.Limiter({ a: '3/h' })
      const limiter = new RedisLimiter({ a: '3/s' }, { client: c, prefix: p + 'm:', onError: localLimiter })
      await answered(c, p)
      s.proc.kill('SIGKILL')
      await new Promise((r) => s.proc.once('exit', r))
      for (let i = 0; i < 5; i++) {
        const t = performance.now()
        const d = await deny.allow('k')
        assert.ok(performance.now() - t < HANG_BOUND_MS, 'no call waits on the dead server')
        assert.ok(!d.allowed && d.source === 'policy' && d.retryAfterMs === 2000)
      }
      assert.equal(deny.breakerOpen, true, 'three failures in a row open the breaker')
      const d = await allow.allow('k')
      assert.ok(d.allowed && d.source === 'policy')
      assert.deepEqual([(await fallback.allow('k')).source, (await fallback.allow('k')).source], ['fallback', 'fallback'])
      assert.equal(local.peek('k').remaining, 2, 'the fallback decided in the given limiter')
      const md = await limiter.allow('u')
      assert.ok(md.source === 'fallback' && md.entries[0].name === 'a' && localLimiter.peek('u').remaining === 1)
      assert.deepEqual(
        (await limiter.allowMany(['u', 'v'])).map((x) => x.source),
        ['fallback', 'fallback']
      )
      // The client's error is the cause; a call the client never answered timed out.
      await assert.rejects(strict.allow('k'), (e) => e.code === 'ERR_RATOMIC_BACKEND' && (e.cause instanceof Error || /timed out/.test(e.message)))
      await assert.rejects(strict.refund('k', 1), (e) => e.code === 'ERR_RATOMIC_BACKEND')
      await assert.rejects(strict.reset('k'), (e) => e.code === 'ERR_RATOMIC_BACKEND')
      await assert.rejects(strict.allowMany(['a']), (e) => e.code === 'ERR_RATOMIC_BACKEND')
      assert.deepEqual(
        (await allow.allowMany(['a', 'b'])).map((x) => x.source),
        ['policy', 'policy']
      )
    } finally {
      await s.stop()
    }
  })
}

// Failures in a row that took breakerFailureTimeMs open the breaker however
// few they are: each call to a stopped server takes timeoutMs (50 ms), so
// at most 3 of 20 reach the client before 120 ms is spent.
test('a stopped server: failures that took breakerFailureTimeMs open the breaker, whatever their count', async () => {
  const s = await startRedis()
  try {
    for (const kind of Object.keys(CLIENTS)) {
      const c = await client(kind, s.port)
      // Count what reaches the client, and pass it on.
      let sent = 0
      const method = kind === 'ioredis' ? 'call' : 'sendCommand'
      const real = c[method].bind(c)
      c[method] = (...args) => {
        sent++
        return real(...args)
      }
      const options = { breakerThreshold: 100, breakerCooldownMs: 3_600_000, breakerFailureTimeMs: 120, timeoutMs: 50 }
      const l = new RedisTokenBucket('5/s', { client: c, prefix: prefix(), onError: 'allow', ...options })
      await answered(c, prefix())
      sent = 0
      s.proc.kill('SIGSTOP') // accepts nothing, answers nothing
      try {
        for (let i = 0; i < 20; i++) assert.equal((await l.allow('k')).source, 'policy')
        assert.equal(l.breakerOpen, true, kind)
        assert.ok(sent >= 1 && sent <= 3, `${kind}: ${sent} of 20 calls reached the client`)
      } finally {
        s.proc.kill('SIGCONT')
      }
    }
  } finally {
    await s.stop()
  }
})

test('a frozen server times out within timeoutMs, for a call and for a batch', async () => {
  const s = await startRedis()
  try {
    for (const kind of Object.keys(CLIENTS)) {
      const c = await client(kind, s.port)
      const l = new RedisTokenBucket('5/s', { client: c, prefix: prefix(), onError: 'allow', breakerThreshold: 0, timeoutMs: 100 })
      await answered(c, prefix())
      s.proc.kill('SIGSTOP') // accepts nothing, answers nothing
      try {
        let t = performance.now()
        const d = await l.allow('k')
        assert.ok(d.source === 'policy' && performance.now() - t < HANG_BOUND_MS, `${kind}: ${performance.now() - t} ms`)
        t = performance.now()
        const ds = await l.allowMany(['a', 'b'])
        assert.ok(ds.every((x) => x.source === 'policy') && performance.now() - t < HANG_BOUND_MS)
      } finally {
        s.proc.kill('SIGCONT')
      }
    }
  } finally {
    await s.stop()
  }
})
