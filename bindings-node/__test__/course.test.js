'use strict'
// The five course behaviours (stage 1, token bucket), with an injected clock.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, ManualClock } = require('..')

for (const [label, makeClock] of [
  ['ManualClock', () => { const c = new ManualClock(); return { clock: c, advance: (ms) => c.advance(ms) } }],
  ['clock function', () => { let t = 1_000; return { clock: () => t, advance: (ms) => { t += ms } } }],
]) {
  test(`${label}: full bucket allows capacity`, () => {
    const { clock } = makeClock()
    const tb = new TokenBucket(10, 1, { clock })
    for (let i = 0; i < 10; i++) assert.equal(tb.allow('k').allowed, true, `call ${i + 1}`)
    const d = tb.allow('k')
    assert.equal(d.allowed, false)
    assert.ok(d.retryAfterMs > 0)
  })

  test(`${label}: denial carries retry after`, () => {
    const { clock, advance } = makeClock()
    const tb = new TokenBucket(3, 7, { clock })
    for (let i = 0; i < 3; i++) tb.allow('k')
    for (let i = 0; i < 20; i++) {
      const d = tb.allow('k')
      assert.equal(d.allowed, false)
      assert.ok(d.retryAfterMs > 0, `retryAfterMs ${d.retryAfterMs}`)
      advance(d.retryAfterMs / 3)
    }
  })

  test(`${label}: refill restores tokens`, () => {
    const { clock, advance } = makeClock()
    const rate = 3 // tokens a second: 1/rate = 333.33… ms, fractional
    const tb = new TokenBucket(5, rate, { clock })
    for (let i = 0; i < 5; i++) assert.ok(tb.allow('k').allowed)
    assert.equal(tb.allow('k').allowed, false)
    advance(1000 / rate)
    const d = tb.allow('k')
    assert.equal(d.allowed, true)
    assert.equal(d.remaining, 0)
    assert.equal(tb.allow('k').allowed, false, 'exactly one token came back')
    // Fractional refill is never lost: two half-intervals make a token.
    advance(500 / rate)
    assert.equal(tb.allow('k').allowed, false)
    advance(500 / rate)
    assert.equal(tb.allow('k').allowed, true)
  })

  test(`${label}: per key isolated`, () => {
    const { clock } = makeClock()
    const tb = new TokenBucket(2, 1, { clock })
    tb.allow('a')
    tb.allow('a')
    assert.equal(tb.allow('a').allowed, false)
    const b = tb.allow('b')
    assert.equal(b.allowed, true)
    assert.equal(b.remaining, 1)
  })

  test(`${label}: concurrent allow grants at most capacity`, async () => {
    const { clock } = makeClock()
    const tb = new TokenBucket(50, 1, { clock })
    const results = await Promise.all(Array.from({ length: 100 }, async () => tb.allow('k')))
    assert.equal(results.filter((d) => d.allowed).length, 50)
  })
}
