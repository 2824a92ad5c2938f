'use strict'
// acquire() waits out retryAfterMs on the limiter's clock; a ManualClock drives it.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, Limiter, Stack, ManualClock } = require('..')

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

test('acquire resolves with the denial when the wait would pass timeoutMs', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  tb.allow('k')
  // A denial is a value, as core's and Python's acquire return it.
  const d = await tb.acquire('k', 1, { timeoutMs: 999 })
  assert.equal(d.allowed, false)
  assert.equal(d.retryAfterMs, 1000)
  assert.equal(clock.now(), 0, 'it did not wait')
  const p = tb.acquire('k', 1, { timeoutMs: 1000 })
  await tick()
  clock.advance(1000)
  assert.equal((await p).allowed, true)
})

test('timeoutMs bounds the total wait, over several waits', async () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  tb.allow('k')
  const p = tb.acquire('k', 1, { timeoutMs: 1500 })
  await tick()
  clock.advance(1000) // wakes acquire, whose retry runs after this test's next line
  assert.equal(tb.allow('k').allowed, true, 'another caller takes the token first')
  const d = await p
  assert.equal(d.allowed, false, 'a second wait of 1000 ms would pass 1500 ms in total')
  assert.equal(d.retryAfterMs, 1000)
})

test('acquire on a Stack waits for every member', async () => {
  const clock = new ManualClock()
  const ip = new TokenBucket(1, 1, { clock })
  const user = new TokenBucket(1, 2, { clock })
  const stack = new Stack({ ip, user })
  stack.allow(['10.0.0.1', 'alice'])
  const p = stack.acquire(['10.0.0.1', 'alice'])
  await tick()
  clock.advance(1000)
  const d = await p
  assert.equal(d.allowed, true)
  assert.deepEqual(d.entries.map((e) => e.name), ['ip', 'user'])
  const denied = await stack.acquire(['10.0.0.1', 'alice'], 1, { timeoutMs: 10 })
  assert.deepEqual(denied.deniedBy, ['ip', 'user'])
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
