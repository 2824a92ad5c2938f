'use strict'
// Limiter: several named limits on one key, and selections of them.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Limiter, ManualClock } = require('..')

// Issue 11: selections were cached under names.join('\0'), so after
// select(['a\0b']) a select(['a', 'b']) got that view, and limit `a` was
// bypassed.
test('a selection is cached by the limits it selects, never by an ambiguous name', () => {
  const clock = new ManualClock()
  const l = new Limiter({ a: '1/s', b: '5/s', 'a\u0000b': '5/s' }, { clock })
  assert.deepEqual(l.select(['a\u0000b']).allow('k').entries.map((e) => e.name), ['a\u0000b'])
  const ab = l.select(['a', 'b'])
  assert.deepEqual(ab.names, ['a', 'b', 'a\u0000b'], 'names lists all of the limiter\'s limits')
  assert.deepEqual(ab.allow('k').entries.map((e) => e.name), ['a', 'b'])
  const d = ab.allow('k')
  assert.equal(d.allowed, false, 'limit a (1/s) applies')
  assert.deepEqual(d.deniedBy, ['a'])
})

test('selections of the same limits are one view, whatever the order of the names', () => {
  const l = new Limiter({ a: '1/s', b: '5/s', c: '5/s' }, { clock: new ManualClock() })
  const ab = l.select(['a', 'b'])
  assert.equal(l.select(['a', 'b']), ab)
  assert.equal(l.select(['b', 'a']), ab)
  assert.equal(l.select(['a', 'b', 'a']), ab)
  assert.equal(ab.select(['a', 'b']), ab, 'a view selects among the whole limiter\'s limits')
  assert.equal(l.select(['a', 'b', 'c']).select(['c']), l.select(['c']))
  assert.equal(ab.select(['a', 'b', 'c']).allow('k').entries.length, 3)
  assert.throws(() => l.select(['nope']), { name: 'RangeError', code: 'ERR_RATOMIC_UNKNOWN_LIMIT' })
  assert.throws(() => l.select([]), { name: 'RangeError', code: 'ERR_RATOMIC_UNKNOWN_LIMIT' })
  assert.throws(() => l.select('a'), TypeError)
})

test('rules and limits are readable, and read back as constructor input', () => {
  const limits = {
    burst: { capacity: 5, refillPerSec: 2.5 },
    hourly: { algorithm: 'slidingWindow', limit: 100, window: '1h' },
    daily: { algorithm: 'fixedWindow', rate: '1000/d' },
  }
  const l = new Limiter(limits, { clock: new ManualClock() })
  assert.deepEqual(l.rules, {
    burst: { algorithm: 'tokenBucket', limit: 5, capacity: 5, refillPerSec: 2.5 },
    hourly: { algorithm: 'slidingWindow', limit: 100, windowMs: 3_600_000, rate: '100/h' },
    daily: { algorithm: 'fixedWindow', limit: 1000, windowMs: 86_400_000, rate: '1000/d' },
  })
  const again = new Limiter(l.rules)
  assert.deepEqual(again.rules, l.rules)
  assert.deepEqual(l.select(['daily']).rules, l.rules, 'a view has the same rules')
})

test('a Limiter entry carries its limit\'s index from core, not a name search', () => {
  const l = new Limiter([{ name: 'x', rate: '2/s' }, { name: 'y', rate: '1/s' }], { clock: new ManualClock() })
  assert.deepEqual(l.select(['y']).allow('k').entries.map((e) => [e.name, e.remaining]), [['y', 0]])
  assert.deepEqual(l.peek('k', 0).entries.map((e) => [e.name, e.remaining]), [['x', 2], ['y', 0]])
})
