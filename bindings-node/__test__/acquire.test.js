'use strict'
// acquire() waits out retryAfterMs on the limiter's clock; a ManualClock drives it.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, Limiter, ManualClock } = require('..')

const tick = () => new Promise((resolve) => setImmediate(resolve))

test('acquire resolves at once when a token is there', async () => {
  const tb = new TokenBucket(1, 1, { clock: new ManualClock() })
  const d = await tb.acquire('k')
  assert.equal(d.allowed, true)
})

test('acquire waits exactly retryAfterMs on the manual clock', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 4, { clock }) // a token every 250 ms
  tb.allow('k')
  let done = null
  const p = tb.acquire('k').then((d) => { done = d })
  await tick()
  assert.equal(done, null)
  clock.advance(249)
  await tick()
  assert.equal(done, null, 'still waiting 1 ms early')
  clock.advance(1)
  await p
  assert.equal(done.allowed, true)
  assert.equal(tb.allow('k').allowed, false, 'acquire consumed the token')
})

test('acquire with a cost waits for enough tokens', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(3, 1, { clock })
  tb.allow('k', 3)
  const p = tb.acquire('k', 2)
  await tick()
  clock.advance(2000)
  const d = await p
  assert.deepEqual([d.allowed, d.remaining], [true, 0])
})

test('acquire honours an AbortSignal while waiting', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  tb.allow('k')
  const ac = new AbortController()
  const p = tb.acquire('k', 1, { signal: ac.signal })
  await tick()
  ac.abort()
  await assert.rejects(p, { name: 'AbortError' })
  clock.advance(1000)
  assert.equal(tb.allow('k').allowed, true, 'the aborted acquire took nothing')
})

test('acquire rejects at once on an already aborted signal', async () => {
  const tb = new TokenBucket(1, 1, { clock: new ManualClock() })
  await assert.rejects(tb.acquire('k', 1, { signal: AbortSignal.abort(new Error('stop')) }), { message: 'stop' })
  assert.equal(tb.size, 0)
})

test('acquire gives up when the wait would pass timeoutMs', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  tb.allow('k')
  await assert.rejects(tb.acquire('k', 1, { timeoutMs: 999 }), (e) => {
    assert.equal(e.code, 'ERR_RATOMIC_TIMEOUT')
    assert.equal(e.decision.allowed, false)
    assert.equal(e.decision.retryAfterMs, 1000)
    return true
  })
  const p = tb.acquire('k', 1, { timeoutMs: 1000 })
  await tick()
  clock.advance(1000)
  assert.equal((await p).allowed, true)
})

test('acquire on a Limiter resolves with the multi-limit decision', async () => {
  const clock = new ManualClock()
  const l = new Limiter({ a: '1/s', b: '5/s' }, { clock })
  l.allow('k')
  const p = l.acquire('k')
  await tick()
  clock.advance(1000)
  const d = await p
  assert.deepEqual(d.deniedBy, [])
  assert.equal(d.entries.length, 2)
})

test('acquire on the real clock waits and resolves', async () => {
  const tb = new TokenBucket(1, 50) // a token every 20 ms
  const t0 = performance.now() // before the allow: the token cannot come back before t0 + 20 ms
  tb.allow('k')
  const d = await tb.acquire('k')
  assert.equal(d.allowed, true)
  const waited = performance.now() - t0
  assert.ok(waited >= 19, `waited ${waited} ms`)
})

test('acquire argument errors', async () => {
  const tb = new TokenBucket(1, 1)
  await assert.rejects(tb.acquire('k', 1, { timeoutMs: -1 }), RangeError)
  await assert.rejects(tb.acquire('k', 1, { timeoutMs: '5' }), TypeError)
  await assert.rejects(tb.acquire('k', 2), RangeError)
})
