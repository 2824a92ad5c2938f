'use strict'
// Quotas: the quota comes with each call; one bucket per (quota, key). Each
// bucket must answer as a TokenBucket of that quota; bad calls change nothing.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Quotas, TokenBucket, ManualClock } = require('../ratomic.js')

test('each quota answers as a token bucket of that quota, and is its own bucket', () => {
  const clock = new ManualClock()
  const q = new Quotas({ clock })
  const ref = new TokenBucket('3/s', { clock })
  for (let i = 0; i < 8; i++) {
    assert.deepEqual(q.allow('k', '3/s'), ref.allow('k'))
    clock.advance(125)
  }
  const other = q.allow('k', { capacity: 10, refillPerSec: 5 }, 4)
  assert.deepEqual([other.allowed, other.remaining, other.limit], [true, 6, 10])
  assert.deepEqual(q.peek('k', { rate: '3/s' }, 0), ref.peek('k', 0), '{ rate } is the same quota as the string')
  assert.equal(q.size, 2)
})

test('refund, reset, gc, acquire', async () => {
  const clock = new ManualClock()
  const q = new Quotas({ clock })
  assert.equal(q.allow('k', '4/s', 4).allowed, true)
  q.refund('k', '4/s', 1)
  assert.equal(q.peek('k', '4/s', 0).remaining, 1)
  q.reset('k', '4/s')
  assert.equal(q.peek('k', '4/s', 0).remaining, 4)
  assert.equal(q.allow('k', '4/s', 4).allowed, true)
  // acquire sleeps on the manual clock until it is moved by a token's time.
  let done = null
  const p = q.acquire('k', '4/s', 1).then((d) => { done = d })
  await new Promise(setImmediate)
  assert.equal(done, null, 'still waiting')
  clock.advance(250)
  await p
  assert.equal(done.allowed, true)
  clock.advance(1000)
  assert.equal(q.gc(), 1)
  assert.equal(q.size, 0)
})

test('bad calls throw the usual errors and change nothing', () => {
  const q = new Quotas({ clock: new ManualClock(), maxKeyLen: 4 })
  const cases = [
    [() => q.allow('k', '3/s', 4), RangeError, 'ERR_RATOMIC_COST_EXCEEDS_LIMIT'],
    [() => q.allow('12345', '3/s'), RangeError, 'ERR_RATOMIC_KEY_TOO_LONG'],
    [() => q.allow('k', '3 per fortnight'), RangeError, 'ERR_RATOMIC_INVALID_RATE'],
    [() => q.allow('k', { capacity: 0, refillPerSec: 1 }), RangeError, undefined],
    [() => q.allow('k', { capacity: 3, refillPerSec: NaN }), RangeError, undefined],
    [() => q.allow('k', { capacity: 3, refillPerSec: -1 }), RangeError, undefined],
    [() => q.allow('k', { limit: 3, window: '1s' }), TypeError, 'ERR_RATOMIC_INVALID_ARGUMENT'],
    [() => q.allow('k', 3), TypeError, 'ERR_RATOMIC_INVALID_ARGUMENT'],
    [() => q.allow('k', null), TypeError, 'ERR_RATOMIC_INVALID_ARGUMENT'],
    [() => q.allow('k', { capacity: '3', refillPerSec: 1 }), TypeError, 'ERR_RATOMIC_INVALID_ARGUMENT'],
    [() => q.allow(42, '3/s'), TypeError, undefined],
    [() => q.allow('k', '3/s', 'one'), TypeError, 'ERR_RATOMIC_INVALID_ARGUMENT'],
    [() => q.allow('k', '3/s', 1.5), RangeError, undefined],
    [() => q.refund('k', '3/s', -1), RangeError, undefined],
    [() => q.gc(-1), RangeError, undefined],
  ]
  for (const [call, type, code] of cases) {
    assert.throws(call, (e) => e instanceof type && (code === undefined || e.code === code), String(call))
  }
  assert.equal(q.size, 0)
  assert.equal(q.maxKeyLen, 4)
  assert.equal(q.allow('1234', '3/s').allowed, true, 'a key of exactly maxKeyLen is fine')
})
