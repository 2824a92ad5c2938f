'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, ManualClock } = require('..')

const RANGE = (code) => ({ name: 'RangeError', code })
const TYPE = (code) => ({ name: 'TypeError', code })

test('bad rates are RangeErrors naming the field', () => {
  for (const bad of [NaN, -1, 0, Infinity]) {
    assert.throws(() => new TokenBucket(10, bad), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /refill_per_sec/ })
  }
  for (const bad of [0, -3, 1.5, NaN]) {
    assert.throws(() => new TokenBucket(bad, 1), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /capacity/ })
  }
  assert.throws(() => new FixedWindow(0, 1000), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
  assert.throws(() => new SlidingWindow(5, -1), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /window/ })
  assert.throws(() => new SlidingWindow(5, NaN), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
})

test('bad rate strings are RangeErrors quoting the input', () => {
  assert.throws(() => TokenBucket.fromRate('10 per second'), { ...RANGE('ERR_RATOMIC_INVALID_RATE'), message: /10 per second/ })
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
  assert.throws(() => tb.allow('x'.repeat(1025)), { ...RANGE('ERR_RATOMIC_KEY_TOO_LONG'), message: /1025 bytes/ })
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
