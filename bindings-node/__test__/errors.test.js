'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, ManualClock } = require('..')

const RANGE = (code) => ({ name: 'RangeError', code })
const TYPE = (code) => ({ name: 'TypeError', code })

test('bad rates are RangeErrors naming the field', () => {
  for (const bad of [NaN, -1, 0, Infinity]) {
    assert.throws(() => new TokenBucket(10, bad), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /refillPerSec/ })
  }
  for (const bad of [0, -3, 1.5, NaN]) {
    assert.throws(() => new TokenBucket(bad, 1), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /capacity/ })
  }
  assert.throws(() => new FixedWindow(0, 1000), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => new SlidingWindow(5, -1), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /window/ })
  assert.throws(() => new SlidingWindow(5, NaN), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
})

test('bad rate strings are RangeErrors quoting the input', () => {
  assert.throws(() => TokenBucket.fromRate('10 per fortnight'), { ...RANGE('ERR_RATOMIC_INVALID_RATE'), message: /10 per fortnight/ })
  assert.throws(() => new FixedWindow('5/fortnight'), { ...RANGE('ERR_RATOMIC_INVALID_RATE'), message: /fortnight/ })
  assert.throws(() => new SlidingWindow(5, 'soon'), RANGE('ERR_RATOMIC_INVALID_RATE'))
  assert.throws(() => new Limiter({ a: '0/s' }), RANGE('ERR_RATOMIC_INVALID_RATE'))
})

test('arguments of the wrong type are TypeErrors', () => {
  assert.throws(() => new TokenBucket('10', 1), TypeError) // a string capacity is read as a rate and options must be an object
  assert.throws(() => new TokenBucket(10, null), TYPE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => new TokenBucket({}, 1), TYPE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => new TokenBucket(10, 1, { clock: 5 }), { ...TYPE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /clock/ })
  assert.throws(() => new TokenBucket(10, 1, { maxKeys: '5' }), { name: 'TypeError', message: /maxKeys/ })
  assert.throws(() => new TokenBucket(10, 1, { colour: 'red' }), { name: 'TypeError', message: /unknown option "colour"/ })
  assert.throws(() => new Limiter(5), TypeError)
  assert.throws(() => new Limiter({ a: { algorithm: 'leakyBucket', rate: '1/s' } }), { name: 'TypeError', message: /algorithm/ })
  assert.throws(() => new Limiter({ a: { rate: '1/s', colour: 1 } }), { name: 'TypeError', message: /colour/ })
  assert.throws(() => new FixedWindow(5, {}), TypeError)
})

test('a key of the wrong type is a TypeError', () => {
  const tb = new TokenBucket(10, 1)
  for (const bad of [42, null, undefined, {}, [], Symbol('k'), () => 1, 10n, true]) {
    assert.throws(() => tb.allow(bad), { ...TYPE('ERR_RATOMIC_INVALID_KEY'), message: /key must be a string or a Buffer/ })
  }
  assert.equal(tb.size, 0)
})

test('a cost above capacity or not a whole number is a RangeError and changes nothing', () => {
  const tb = new TokenBucket(3, 1, { clock: new ManualClock() })
  assert.throws(() => tb.allow('k', 4), { ...RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'), message: /cost 4 exceeds the limit 3/ })
  for (const bad of [-1, 1.5, NaN, Infinity]) assert.throws(() => tb.allow('k', bad), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => tb.allow('k', '2'), TYPE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => tb.peek('k', 4), RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'))
  assert.throws(() => tb.refund('k', -1), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.equal(tb.size, 0)
  assert.equal(tb.allow('k', 3).allowed, true)
})

test('an overlong key is a RangeError, never truncated', () => {
  const tb = new TokenBucket(3, 1)
  assert.throws(() => tb.allow('x'.repeat(1025)), { ...RANGE('ERR_RATOMIC_KEY_TOO_LONG'), message: /^key is 1025 bytes long; the limit is 1024 bytes \(the limiter's maxKeyLen option\)$/ })
  assert.throws(() => tb.allow(Buffer.alloc(5000)), RANGE('ERR_RATOMIC_KEY_TOO_LONG'))
  assert.throws(() => tb.allow('é'.repeat(513)), { message: /1026 bytes/ }) // UTF-8 bytes, not characters
  assert.equal(tb.allow('x'.repeat(1024)).allowed, true)
  assert.equal(tb.size, 1)
})

test('a clock that throws propagates its error and changes no state', () => {
  let fail = false
  let t = 0
  const tb = new TokenBucket(2, 1, { clock: () => { if (fail) throw new Error('clock broke'); return t } })
  tb.allow('k')
  fail = true
  assert.throws(() => tb.allow('k'), { message: 'clock broke' })
  assert.throws(() => tb.reset('k'), { message: 'clock broke' })
  assert.throws(() => tb.allowMany(['k']), { message: 'clock broke' })
  fail = false
  assert.equal(tb.allow('k').remaining, 0, 'exactly one token had been taken')
})

test('a clock returning nonsense is a clear error', () => {
  assert.throws(() => new TokenBucket(2, 1, { clock: () => 'now' }).allow('k'), TYPE('ERR_RATOMIC_INVALID_CLOCK'))
  assert.throws(() => new TokenBucket(2, 1, { clock: () => NaN }).allow('k'), RANGE('ERR_RATOMIC_INVALID_CLOCK'))
  assert.throws(() => new TokenBucket(2, 1, { clock: () => -5 }).allow('k'), RANGE('ERR_RATOMIC_INVALID_CLOCK'))
  assert.throws(() => new TokenBucket(2, 1, { clock: () => 1e300 }).allow('k'), RANGE('ERR_RATOMIC_INVALID_CLOCK'))
  assert.throws(() => new ManualClock().advance(-1), RangeError)
  assert.throws(() => new ManualClock('0'), TypeError)
})

test('re-registering a shared name with another configuration is an Error with a code', () => {
  TokenBucket.shared('errors-test', 5, 1)
  assert.ok(TokenBucket.shared('errors-test', 5, 1))
  assert.throws(() => TokenBucket.shared('errors-test', 6, 1), (e) => {
    assert.equal(e.constructor, Error)
    assert.equal(e.code, 'ERR_RATOMIC_SHARED_CONFLICT')
    assert.match(e.message, /errors-test/)
    return true
  })
  assert.throws(() => TokenBucket.shared('errors-test-2', 5, 1, { clock: () => 0 }), { name: 'TypeError', message: /unknown option "clock"/ })
})

test('too many limits in a Limiter is a clear error', () => {
  const limits = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`l${i}`, '1/s']))
  assert.throws(() => new Limiter(limits), (e) => e instanceof Error && typeof e.code === 'string' && /16/.test(e.message))
})

// A batch: every request is checked before any is decided; the first
// invalid one fails the whole batch, naming its index.
test('a batch with an invalid request fails whole, naming the first invalid index', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(2, 1, { clock })
  assert.throws(() => tb.allowMany(['a', ['b', 3]]), {
    name: 'RangeError', code: 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', index: 1, message: /^request 1 of the batch: cost 3 exceeds the limit 2/,
  })
  assert.throws(() => tb.allowMany(['a', 'b', 42]), { name: 'TypeError', code: 'ERR_RATOMIC_INVALID_KEY', index: 2, message: /request 2 of the batch/ })
  assert.throws(() => tb.allowMany([['a', 1.5]]), { name: 'RangeError', index: 0 })
  assert.throws(() => tb.allowMany([['a', '1']]), { name: 'TypeError', index: 0 })
  // The first invalid request is named even when a later one is invalid in another way.
  assert.throws(() => tb.allowMany([['a', 9], 42]), { code: 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', index: 0 })
  assert.throws(() => tb.allowMany(['a', 'x'.repeat(2000), 42]), { code: 'ERR_RATOMIC_KEY_TOO_LONG', index: 1 })
  assert.equal(tb.size, 0, 'nothing in the failed batches was decided')
  assert.throws(() => tb.allowMany('a'), TypeError)
  const l = new Limiter({ small: '1/s', big: '5/s' }, { clock })
  assert.throws(() => l.allowMany(['k', ['k', 2]]), { code: 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', index: 1 })
  assert.deepEqual(l.select(['big']).allowMany([['k', 2]]).map((d) => d.remaining), [3])
  assert.equal(l.peek('k', 0).entries[0].remaining, 1, 'small was not charged by the selection')
})

test('a clock reading past 2^62 ns, negative or not a number is an error that changes nothing', () => {
  const CLOCK = { name: 'RangeError', code: 'ERR_RATOMIC_INVALID_CLOCK' }
  let t = 0
  const tb = new TokenBucket(1, 1, { clock: () => t })
  for (const bad of [1e300, Infinity, 2 ** 62 / 1e6 + 1, -1, -Infinity, NaN]) {
    t = bad
    assert.throws(() => tb.allow('k'), CLOCK, String(bad))
    assert.throws(() => tb.peek('k'), CLOCK)
    assert.throws(() => tb.allowMany(['k']), CLOCK)
    assert.throws(() => tb.gc(), CLOCK)
  }
  t = 4.6e12 // within 2^62 ns (about 4.61e12 ms)
  assert.equal(tb.allow('k').allowed, true)
  assert.throws(() => new TokenBucket(1, 1).gc(1e300), CLOCK)
  assert.throws(() => new TokenBucket(1, 1).gc(-1), CLOCK)
  assert.throws(() => new TokenBucket(1, 1).gc('0'), TypeError)
})

test('store options are checked: eviction, maxKeyBytes, maxKeys, maxKeyLen', () => {
  assert.throws(() => new TokenBucket(1, 1, { eviction: 'lru' }), { name: 'RangeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /eviction/ })
  assert.throws(() => new TokenBucket(1, 1, { eviction: 1 }), { name: 'TypeError', message: /eviction/ })
  assert.throws(() => new TokenBucket(1, 1, { maxKeyBytes: -1 }), { name: 'RangeError', message: /maxKeyBytes/ })
  assert.throws(() => new TokenBucket(1, 1, { maxKeyBytes: '1' }), { name: 'TypeError', message: /maxKeyBytes/ })
  assert.throws(() => new FixedWindow(1, 1000, { maxKeys: 0 }), { name: 'RangeError', message: /maxKeys/ })
  assert.throws(() => new SlidingWindow(1, 1000, { maxKeyLen: 0 }), { name: 'RangeError', message: /maxKeyLen/ })
  assert.throws(() => new TokenBucket(1, 1, { reserveKeys: -1 }), { name: 'RangeError', message: /reserveKeys/ })
  assert.throws(() => new TokenBucket(1, 1, { reserveKeys: '1' }), { name: 'TypeError', message: /reserveKeys/ })
  assert.throws(() => new FixedWindow(1, 1000, { maxKeys: 100, reserveKeys: 101 }), {
    name: 'RangeError',
    code: 'ERR_RATOMIC_INVALID_ARGUMENT',
    message: /invalid reserve_keys: 101 \(must be at most max_keys \(100\)/,
  })
})
