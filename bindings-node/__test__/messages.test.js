'use strict'
// The messages a user reads, pinned word for word: each names the parameter
// (as this package spells it), the value as JavaScript prints it, and the
// range accepted; a wrong type is a TypeError naming the parameter. And a
// limiter printed shows its rule with its unit.
const test = require('node:test')
const assert = require('node:assert/strict')
const { inspect } = require('node:util')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, Stack, Quotas, DirectTokenBucket, ManualClock } = require('..')

const MAX = 'must be a whole number from 1 to 9007199254740991, Number.MAX_SAFE_INTEGER'

function thrown(f) {
  try {
    f()
  } catch (e) {
    return [e.name, e.code, e.message]
  }
  assert.fail('did not throw')
}

test('a capacity or limit out of range: the name, the value as written, the range', () => {
  const range = (m) => ['RangeError', 'ERR_RATOMIC_INVALID_ARGUMENT', m]
  assert.deepEqual(thrown(() => new TokenBucket(2 ** 64, 1)), range(`invalid capacity: 18446744073709552000 (above the maximum: ${MAX})`))
  assert.deepEqual(thrown(() => new TokenBucket(1e300, 1)), range(`invalid capacity: 1e+300 (above the maximum: ${MAX})`))
  assert.deepEqual(thrown(() => new TokenBucket(0, 1)), range(`invalid capacity: 0 (${MAX})`))
  assert.deepEqual(thrown(() => new TokenBucket(1.5, 1)), range(`invalid capacity: 1.5 (${MAX})`))
  assert.deepEqual(thrown(() => new FixedWindow(0, 1000)), range(`invalid limit: 0 (${MAX})`))
  assert.deepEqual(thrown(() => new TokenBucket('10/s', { burst: 0 })), range(`invalid burst: 0 (${MAX})`))
  assert.deepEqual(thrown(() => new TokenBucket(5, 1, { maxKeys: 0 })), range(`invalid maxKeys: 0 (${MAX})`))
})

test('a rate or a window out of range names refillPerSec or windowMs, in their units', () => {
  const range = (m) => ['RangeError', 'ERR_RATOMIC_INVALID_ARGUMENT', m]
  for (const bad of [0, -1, NaN, Infinity]) {
    assert.deepEqual(
      thrown(() => new TokenBucket(10, bad)),
      range(`invalid refillPerSec: ${bad} (must be a finite number of tokens per second > 0)`),
    )
  }
  assert.deepEqual(
    thrown(() => new TokenBucket(10, 1e-30)),
    range('invalid refillPerSec: 1e-30 (is too small: one token would take more than 2^63 ns to refill)'),
  )
  const window = 'must be a number of milliseconds from 0.000001 (1 ns) to 9223372036854.773 (about 292 years)'
  assert.deepEqual(thrown(() => new FixedWindow(5, 0)), range(`invalid windowMs: 0 (${window})`))
  // The bounds hold after rounding to whole nanoseconds: the maximum itself
  // is a window; below half a nanosecond is not.
  assert.equal(String(new FixedWindow(5, 9223372036854.773)).startsWith('FixedWindow { fixed window 5 per '), true)
  assert.equal(String(new FixedWindow(1, 0.000001)), 'FixedWindow { fixed window 1 per 1ns, keys: 0 }')
  assert.deepEqual(thrown(() => new FixedWindow(5, 1e-9)), range(`invalid windowMs: 1e-9 (${window})`))
  assert.deepEqual(thrown(() => new SlidingWindow(5, -1)), range(`invalid windowMs: -1 (${window})`))
  assert.deepEqual(thrown(() => new SlidingWindow(5, 1e30)), range(`invalid windowMs: 1e+30 (above the maximum: ${window})`))
  assert.deepEqual(
    thrown(() => new Limiter({ hourly: { algorithm: 'fixedWindow', limit: 5, window: 3_600_000 } })),
    ['TypeError', 'ERR_RATOMIC_INVALID_ARGUMENT', 'limit "hourly": window must be a duration string like "1min", got a number (give milliseconds as windowMs)'],
  )
})

test('a cost: above the maximum it exceeds the limit; below 0 it says the range', () => {
  const tb = new TokenBucket(10, 1)
  const above = 'cost 1152921504606847000 exceeds the limit: a cost must be a whole number from 0 to the limit, which is at most 9007199254740991'
  for (const limiter of [tb, new Limiter({ a: '10/s' })]) {
    assert.deepEqual(thrown(() => limiter.allow('k', 2 ** 60)), ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', above])
    assert.deepEqual(thrown(() => limiter.peek('k', 2 ** 60)), ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', above])
  }
  assert.deepEqual(thrown(() => new DirectTokenBucket(10, 1).allow(2 ** 60)), ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', above])
  assert.deepEqual(thrown(() => new Quotas().allow('k', '10/s', 2 ** 60)), ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', above])
  assert.deepEqual(thrown(() => new Stack({ tb }).allow(['k'], 2 ** 60)), ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', above])
  assert.deepEqual(
    thrown(() => tb.allow('k', 11)),
    ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', 'cost 11 exceeds the limit 10: this call could never be allowed'],
  )
  assert.deepEqual(
    thrown(() => tb.allow('k', -1)),
    ['RangeError', 'ERR_RATOMIC_INVALID_ARGUMENT', 'invalid cost: -1 (must be a whole number from 0 to the limit)'],
  )
  assert.deepEqual(
    thrown(() => tb.allowMany([['k', 2 ** 60]])),
    ['RangeError', 'ERR_RATOMIC_COST_EXCEEDS_LIMIT', `request 0 of the batch: ${above} (nothing in the batch was decided)`],
  )
  assert.equal(tb.size, 0, 'nothing changed')
})

test('refund names tokens', () => {
  const tokens = 'invalid tokens: -1 (must be a whole number from 0 to 9007199254740991, Number.MAX_SAFE_INTEGER)'
  for (const refund of [
    () => new TokenBucket(10, 1).refund('k', -1),
    () => new Limiter({ a: '1/s' }).refund('k', -1),
    () => new DirectTokenBucket(10, 1).refund(-1),
    () => new Quotas().refund('k', '1/s', -1),
    () => new Stack({ a: new TokenBucket(1, 1) }).refund(['k'], -1),
  ]) {
    assert.deepEqual(thrown(refund), ['RangeError', 'ERR_RATOMIC_INVALID_ARGUMENT', tokens])
  }
})

test('a wrong type is a TypeError naming the parameter and what it got', () => {
  const tb = new TokenBucket(10, 1)
  const type = (m) => ['TypeError', 'ERR_RATOMIC_INVALID_ARGUMENT', m]
  assert.deepEqual(thrown(() => tb.allow('k', '2')), type('cost must be a number, got a string'))
  assert.deepEqual(thrown(() => tb.peek('k', null)), type('cost must be a number, got null'))
  assert.deepEqual(thrown(() => tb.refund('k', 2n)), type('tokens must be a number, got a bigint'))
  assert.deepEqual(thrown(() => new DirectTokenBucket(1, 1).allow({})), type('cost must be a number, got an object'))
  assert.deepEqual(thrown(() => new Stack({ tb }).allow(['k'], '1')), type('cost must be a number, got a string'))
  assert.deepEqual(thrown(() => new FixedWindow(5, null)), type('FixedWindow windowMs must be a number of milliseconds or a duration string like "1min", got null'))
  assert.deepEqual(thrown(() => new TokenBucket(10, 1, { maxKeys: '5' })), type('maxKeys must be a number, got a string'))
})

test('a limiter prints its rule with its unit', () => {
  const clock = new ManualClock()
  const fw = new FixedWindow(5, 60, { clock })
  assert.equal(String(fw), 'FixedWindow { fixed window 5 per 60ms, keys: 0 }')
  fw.allow('k')
  assert.equal(inspect(fw), 'FixedWindow { fixed window 5 per 60ms, keys: 1 }')
  assert.equal(`${new SlidingWindow('100/h')}`, 'SlidingWindow { sliding window 100 per 1h, keys: 0 }')
  assert.equal(String(new TokenBucket(10, 10)), 'TokenBucket { token bucket 10 per 1s, keys: 0 }')
  assert.equal(String(new TokenBucket('5 per minute')), 'TokenBucket { token bucket 5 per 1m, keys: 0 }')
  // A burst of 50 at 10/s: 50 refilled over 5 s.
  assert.equal(String(TokenBucket.fromRate('10/s', { burst: 50 })), 'TokenBucket { token bucket 50 per 5s, keys: 0 }')
  assert.equal(inspect(new DirectTokenBucket('1000/s')), 'DirectTokenBucket { token bucket 1000 per 1s }')
  const l = new Limiter({ burst: '5/s', daily: { algorithm: 'fixedWindow', rate: '1000/day' } })
  assert.equal(inspect(l), 'Limiter { "burst": token bucket 5 per 1s, "daily": fixed window 1000 per 1d, keys: 0 }')
  assert.equal(String(l.select(['daily'])), 'Limiter { "daily": fixed window 1000 per 1d, keys: 0 }')
  assert.equal(
    inspect(new Stack({ ip: new TokenBucket('10/s'), global: new DirectTokenBucket('1000/s') })),
    'Stack { "ip": TokenBucket { token bucket 10 per 1s, keys: 0 }, "global": DirectTokenBucket { token bucket 1000 per 1s } }',
  )
  assert.equal(inspect(new Quotas()), 'Quotas { buckets: 0 }')
})

test('several limits in one string, as slowapi and limits write them', () => {
  const clock = new ManualClock()
  const l = new Limiter('10/second;1000/day', { clock })
  assert.deepEqual(l.names, ['10/second', '1000/day'])
  assert.deepEqual(l.rules['10/second'], { algorithm: 'tokenBucket', limit: 10, capacity: 10, refillPerSec: 10 })
  assert.deepEqual(l.rules['1000/day'], { algorithm: 'tokenBucket', limit: 1000, capacity: 1000, refillPerSec: 1000 / 86_400 })
  for (let i = 0; i < 10; i++) assert.equal(l.allow('k').allowed, true)
  const d = l.allow('k')
  assert.deepEqual([d.allowed, d.deniedBy], [false, ['10/second']])
  // Separators ; , and |, spaces around them, "per" and word units in any case.
  assert.deepEqual(new Limiter(' 5 per Minute , 100/hour | 2/s ').names, ['5 per Minute', '100/hour', '2/s'])
  assert.deepEqual(Limiter.shared('messages-limits-string', '3/s;30/min').names, ['3/s', '30/min'])
  assert.deepEqual(
    thrown(() => new Limiter('10/s;10/s')),
    ['RangeError', 'ERR_RATOMIC_INVALID_ARGUMENT', 'invalid limits: "10/s;10/s" ("10/s" is given twice)'],
  )
  const [name, code, message] = thrown(() => new Limiter('10/s;ten/day'))
  assert.deepEqual([name, code], ['RangeError', 'ERR_RATOMIC_INVALID_RATE'])
  assert.match(message, /^invalid rate "ten\/day": /)
})

test('"5 per minute" works wherever a rate string does', () => {
  const clock = new ManualClock()
  assert.deepEqual(new TokenBucket('5 per minute', { clock }).rule, new TokenBucket('5/min', { clock }).rule)
  assert.deepEqual(new FixedWindow('5 per minute').rule, { algorithm: 'fixedWindow', limit: 5, windowMs: 60_000, rate: '5/m' })
  assert.equal(new SlidingWindow('10 per 2 minutes').rule.windowMs, 120_000)
  assert.equal(new DirectTokenBucket('5 per minute').limit, 5)
  assert.equal(new Quotas({ clock }).allow('k', '5 per minute').remaining, 4)
  assert.deepEqual(new Limiter({ a: { algorithm: 'fixedWindow', rate: '5 per minute' } }).rules.a.windowMs, 60_000)
})

test('a clock reading or a decision field out of range: the value as JavaScript prints it', () => {
  assert.deepEqual(thrown(() => new TokenBucket(1, 1, { clock: () => 1e300 }).allow('k')), [
    'RangeError',
    'ERR_RATOMIC_INVALID_CLOCK',
    "invalid clock reading: 1e+300 ms (a time must be a number of milliseconds >= 0 and at most 2^62 − 1 ns, 4611686018427.388 ms, after the clock's epoch)",
  ])
  const d = { allowed: true, remaining: 1, limit: 1, retryAfterMs: -1, resetAfterMs: 0 }
  assert.deepEqual(thrown(() => new TokenBucket(1, 1).headers(d)), [
    'RangeError',
    'ERR_RATOMIC_INVALID_ARGUMENT',
    'invalid decision.retryAfterMs: -1 (must be a finite number of milliseconds >= 0)',
  ])
})
