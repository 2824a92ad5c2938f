'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, ManualClock } = require('..')

test('decision is a plain object with the five fields', () => {
  const tb = new TokenBucket(2, 1)
  const d = tb.allow('k')
  assert.deepEqual(Object.keys(d), ['allowed', 'remaining', 'limit', 'retryAfterMs', 'resetAfterMs'])
  assert.equal(Object.getPrototypeOf(d), Object.prototype)
  assert.deepEqual({ ...d, resetAfterMs: 0 }, { allowed: true, remaining: 1, limit: 2, retryAfterMs: 0, resetAfterMs: 0 })
})

test('token bucket from rate strings', () => {
  const clock = new ManualClock()
  const a = TokenBucket.fromRate('10/s', { clock })
  const b = new TokenBucket('10/s', { clock, burst: 20 })
  const c = new TokenBucket(4, '2/s', { clock })
  assert.equal(a.allow('k').limit, 10)
  assert.equal(b.allow('k').limit, 20)
  for (let i = 0; i < 4; i++) assert.ok(c.allow('k').allowed)
  const d = c.allow('k')
  assert.equal(d.allowed, false)
  assert.equal(d.retryAfterMs, 500)
})

test('retryAfterMs is fractional', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 3, { clock })
  tb.allow('k')
  const d = tb.allow('k')
  assert.ok(Math.abs(d.retryAfterMs - 1000 / 3) < 1e-5, String(d.retryAfterMs))
  assert.notEqual(d.retryAfterMs, Math.round(d.retryAfterMs))
})

test('a clock that steps back never grants more', () => {
  const clock = new ManualClock(10_000)
  const tb = new TokenBucket(2, 1, { clock })
  tb.allow('k')
  tb.allow('k')
  clock.set(5_000)
  const d = tb.allow('k')
  assert.equal(d.allowed, false)
  assert.ok(d.retryAfterMs > 0)
  assert.equal(d.remaining, 0)
})

test('Buffer and string keys name the same bytes', () => {
  const tb = new TokenBucket(2, 1, { clock: new ManualClock() })
  tb.allow('é')
  assert.equal(tb.allow(Buffer.from('é')).remaining, 0)
  assert.equal(tb.allow(new Uint8Array([1, 2])).remaining, 1)
  const long = 'x'.repeat(1000) // beyond the stack buffer, within max_key_len
  assert.equal(tb.allow(long).remaining, 1)
  assert.equal(tb.allow(long).remaining, 0)
})

test('peek, refund, reset, size, gc', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(3, 1, { clock })
  assert.equal(tb.size, 0)
  tb.allow('k', 2)
  assert.equal(tb.size, 1)
  assert.deepEqual(tb.peek('k'), tb.peek('k'))
  // peek answers what allow would: remaining is counted after the (hypothetical) charge.
  assert.deepEqual([tb.peek('k').allowed, tb.peek('k').remaining], [true, 0])
  assert.equal(tb.peek('k', 0).remaining, 1)
  assert.equal(tb.peek('k', 2).allowed, false)
  tb.refund('k', 1)
  assert.equal(tb.peek('k', 0).remaining, 2)
  tb.refund('k', 3)
  assert.equal(tb.peek('k', 0).remaining, 3, 'never above full')
  tb.allow('k', 3)
  tb.reset('k')
  assert.equal(tb.peek('k', 0).remaining, 3)
  tb.allow('a')
  clock.advance(10_000)
  assert.equal(tb.gc(), 1)
  assert.equal(tb.size, 0)
})

test('cost 0 answers like peek', () => {
  const tb = new TokenBucket(2, 1, { clock: new ManualClock() })
  tb.allow('k')
  const d = tb.allow('k', 0)
  assert.equal(d.allowed, true)
  assert.equal(d.remaining, 1)
  assert.equal(tb.peek('k', 0).remaining, 1)
})

test('allowMany decides in order at one clock reading', () => {
  let reads = 0
  const tb = new TokenBucket(1, 1, { clock: () => { reads++; return 0 } })
  const out = tb.allowMany(['a', 'a', ['b', 1], ['c']])
  assert.deepEqual(out.map((d) => d.allowed), [true, false, true, true])
  assert.equal(reads, 1)
})

test('allowMany with a bad pair throws and charges nothing', () => {
  const tb = new TokenBucket(1, 1, { clock: new ManualClock() })
  assert.throws(() => tb.allowMany(['a', ['b', 2]]), RangeError)
  assert.equal(tb.size, 0)
})

test('fixed window: limit per window, retry at the next window', () => {
  const clock = new ManualClock()
  const fw = new FixedWindow(2, 1000, { clock })
  assert.ok(fw.allow('k').allowed)
  assert.ok(fw.allow('k').allowed)
  const d = fw.allow('k')
  assert.equal(d.allowed, false)
  assert.equal(d.retryAfterMs, 1000)
  clock.advance(1000)
  assert.ok(fw.allow('k').allowed)
  assert.equal(new FixedWindow('5/min', { clock }).allow('k').limit, 5)
  assert.equal(new FixedWindow(7, '1min', { clock }).allow('k').limit, 7)
})

test('sliding window weighs the previous window', () => {
  const clock = new ManualClock()
  const sw = new SlidingWindow(4, 1000, { clock })
  for (let i = 0; i < 4; i++) assert.ok(sw.allow('k').allowed)
  assert.equal(sw.allow('k').allowed, false)
  clock.advance(1500) // half of the previous window still counts: 4 * 0.5 = 2
  assert.ok(sw.allow('k').allowed)
  assert.ok(sw.allow('k').allowed)
  const d = sw.allow('k')
  assert.equal(d.allowed, false)
  assert.ok(d.retryAfterMs > 0)
  assert.equal(new SlidingWindow('3/s', { clock }).allow('x').limit, 3)
})

test('Limiter: all or nothing, entries and deniedBy', () => {
  const clock = new ManualClock()
  const l = new Limiter({ burst: '2/s', hourly: { algorithm: 'slidingWindow', limit: 3, window: '1h' } }, { clock })
  assert.deepEqual(l.names, ['burst', 'hourly'])
  const d1 = l.allow('u')
  assert.equal(d1.allowed, true)
  assert.deepEqual(d1.entries.map((e) => e.name), ['burst', 'hourly'])
  assert.deepEqual(d1.deniedBy, [])
  l.allow('u')
  const d3 = l.allow('u')
  assert.equal(d3.allowed, false)
  assert.deepEqual(d3.deniedBy, ['burst'])
  assert.equal(d3.retryAfterMs, 500)
  assert.equal(l.select(['hourly']).peek('u', 0).remaining, 1, 'hourly was not charged for the denied call')
  clock.advance(1000)
  l.allow('u')
  const d5 = l.allow('u')
  assert.deepEqual(d5.deniedBy, ['hourly'])
})

test('Limiter: array form and per-request limit selection', () => {
  const clock = new ManualClock()
  const l = new Limiter([
    { name: 'burst', capacity: 1, refillPerSec: 1 },
    { name: 'daily', algorithm: 'fixedWindow', rate: '3/day' },
  ], { clock })
  const daily = l.select(['daily'])
  assert.equal(daily, l.select(['daily']), 'selections are cached')
  assert.ok(l.allow('u').allowed)
  assert.equal(l.allow('u').allowed, false)
  const d = daily.allow('u')
  assert.equal(d.allowed, true)
  assert.deepEqual(d.entries.map((e) => e.name), ['daily'])
  assert.equal(d.remaining, 1, 'the selection shares the daily count')
  assert.throws(() => l.select(['nope']), RangeError)
})

test('max keys and max key length options', () => {
  const tb = new TokenBucket(1, 1, { maxKeyLen: 4, maxKeys: 1000 })
  assert.ok(tb.allow('abcd').allowed)
  assert.throws(() => tb.allow('abcde'), { name: 'RangeError', code: 'ERR_RATOMIC_KEY_TOO_LONG' })
})

test('a Date.now clock works', () => {
  const tb = new TokenBucket(1, 1, { clock: Date.now })
  assert.ok(tb.allow('k').allowed)
  assert.equal(tb.allow('k').allowed, false)
})

test('allowMany on the monotonic clock decides at one reading', () => {
  const tb = new TokenBucket(1, 1000) // a token per millisecond
  const out = tb.allowMany(['k', 'k', 'k'])
  assert.deepEqual(out.map((d) => d.allowed), [true, false, false])
  assert.ok(out[1].retryAfterMs > 0 && out[1].retryAfterMs <= 1)
})

test('every limiter is a BaseLimiter', () => {
  const { BaseLimiter } = require('..')
  for (const l of [new TokenBucket(1, 1), new FixedWindow('1/s'), new SlidingWindow('1/s'), new Limiter({ a: '1/s' }), TokenBucket.shared('base-test', 1, 1)]) {
    assert.ok(l instanceof BaseLimiter)
  }
})

test('gc at an explicit time, on the limiter\'s clock', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(2, 1, { clock }) // full again 2 s after draining
  tb.allow('k', 2)
  assert.equal(tb.gc(1999), 0, 'not full yet at 1999 ms')
  assert.equal(tb.size, 1)
  assert.equal(tb.gc(2000), 1)
  assert.equal(tb.size, 0)
  assert.equal(tb.allow('k').remaining, 0, 'at the clock\'s time (0) the key is still drained: forgetting changed nothing')
  const fw = new FixedWindow(5, 1000, { clock })
  fw.allow('k')
  assert.equal(fw.gc(fw.now() + 1000), 1)
  const mono = new SlidingWindow(5, 1000)
  mono.allow('k')
  assert.equal(mono.gc(mono.now() + 2000), 1, 'a limiter on the monotonic clock reads its time with now()')
})

test('a limiter\'s rule, limit, clock and store are readable', () => {
  const clock = new ManualClock(5)
  const tb = new TokenBucket(10, 2, { clock, maxKeyLen: 64 })
  assert.deepEqual(tb.rule, { algorithm: 'tokenBucket', limit: 10, capacity: 10, refillPerSec: 2 })
  assert.equal(tb.limit, 10)
  assert.equal(tb.clock, clock)
  assert.equal(tb.now(), 5)
  assert.equal(tb.maxKeyLen, 64)
  assert.deepEqual(TokenBucket.fromRate('3/250ms', { burst: 6 }).rule, { algorithm: 'tokenBucket', limit: 6, capacity: 6, refillPerSec: 12 })
  assert.deepEqual(new FixedWindow('100/15m').rule, { algorithm: 'fixedWindow', limit: 100, windowMs: 900_000, rate: '100/15m' })
  assert.deepEqual(new SlidingWindow(7, 1500).rule, { algorithm: 'slidingWindow', limit: 7, windowMs: 1500, rate: '7/1500ms' })
  assert.equal(new SlidingWindow(7, 1500).clock, undefined, 'the monotonic clock')
  const empty = tb.memoryBytes
  assert.ok(empty > 0 && empty <= 64 * 1024, `each shard starts with a small table: ${empty}`)
  tb.allow('short')
  const table = tb.memoryBytes
  assert.ok(table >= empty)
  tb.allow('x'.repeat(60)) // a long key is stored outside the table, and counted
  assert.ok(tb.memoryBytes >= table + 60, `${tb.memoryBytes}`)
})

test('reserveKeys makes room up front: no table grows while the keys come, and decisions are the same', () => {
  const clock = new ManualClock()
  for (const make of [
    (o) => new TokenBucket(3, 1, { clock, ...o }),
    (o) => new FixedWindow(3, 1000, { clock, ...o }),
    (o) => new SlidingWindow(3, 1000, { clock, ...o }),
    (o) => new Limiter({ a: '3/s', b: '10/min' }, { clock, ...o }),
  ]) {
    const sized = make({ reserveKeys: 5000 })
    const plain = make({})
    const room = sized.memoryBytes
    assert.ok(room > 10 * plain.memoryBytes, `${room} against ${plain.memoryBytes}`)
    for (let k = 0; k < 5000; k++) {
      for (let call = 0; call < 5; call++) {
        const a = sized.allow(`k${k}`)
        const b = plain.allow(`k${k}`)
        assert.deepEqual([a.allowed, a.remaining], [b.allowed, b.remaining])
      }
    }
    assert.equal(sized.size, 5000)
    assert.equal(sized.memoryBytes, room, 'no table grew')
  }
})

test('eviction and maxKeyBytes reach the store', () => {
  const clock = new ManualClock()
  for (const eviction of ['fair', 'strict']) {
    const tb = new TokenBucket(1, 1, { clock, maxKeys: 64, maxKeyBytes: 1 << 16, eviction })
    for (let i = 0; i < 1000; i++) tb.allow(`key:${i}`)
    assert.ok(tb.size <= 128, `${eviction}: ${tb.size} keys held`)
  }
  const strict = new TokenBucket(1, 1, { clock, maxKeys: 64, eviction: 'strict' })
  const fair = new TokenBucket(1, 1, { clock, maxKeys: 64, eviction: 'fair' })
  let deniedStrict = 0
  let deniedFair = 0
  // Single-use keys beyond maxKeys: strict denies new keys rather than over-grant; fair does not.
  for (let i = 0; i < 5000; i++) {
    if (!strict.allow(`once:${i}`).allowed) deniedStrict++
    if (!fair.allow(`once:${i}`).allowed) deniedFair++
  }
  assert.equal(deniedFair, 0)
  assert.ok(deniedStrict > 0, 'strict never grants more than remembering would')
})

test('allowMany decides batches of any size, small ones in the shared buffer and large ones in their own', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(2, 1, { clock })
  const l = new Limiter({ a: '2/s', b: '3/s' }, { clock })
  for (const size of [0, 1, 16, 17, 100, 1000]) {
    // Key k{j} comes at j, j + 50, j + 100...: its first two calls pass.
    const keys = Array.from({ length: size }, (_, i) => `k${i % 50}`)
    const expected = keys.map((_, i) => Math.floor(i / 50) < 2)
    const one = tb.allowMany(keys)
    assert.deepEqual(one.map((d) => d.allowed), expected, `TokenBucket, ${size}`)
    assert.deepEqual(one.slice(0, 1).map((d) => d.remaining), size > 0 ? [1] : [])
    const many = l.allowMany(keys)
    assert.deepEqual(many.map((d) => d.allowed), expected, `Limiter, ${size}`)
    for (const d of many) assert.deepEqual(d.entries.map((e) => e.name), ['a', 'b'])
    clock.advance(10_000) // every key full again
  }
})
