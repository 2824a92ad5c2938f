'use strict'
// CoarseClock (issue 39): the opt-in coarse clock, read natively, on the
// default clock's timeline: it works with sharedFile and beside the default
// clock in a Stack; a limiter on it never grants more than its limit.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { CoarseClock, DirectTokenBucket, TokenBucket, Stack } = require('..')

const SLOW = 1 / 3600 // one token an hour: no refill during a test

test('a CoarseClock reads the monotonic timeline in ticks', () => {
  const coarse = new CoarseClock()
  assert.ok(coarse.resolutionMs > 0 && coarse.resolutionMs <= 10, `resolution ${coarse.resolutionMs} ms`)
  const a = coarse.now()
  assert.ok(coarse.now() >= a)
})

test('limiters on a CoarseClock decide natively, keyed and direct', () => {
  const clock = new CoarseClock()
  const tb = new TokenBucket(3, SLOW, { clock })
  assert.equal(tb.clock, clock)
  assert.deepEqual([1, 2, 3, 4].map(() => tb.allow('k').allowed), [true, true, true, false])
  const direct = new DirectTokenBucket(3, SLOW, { clock })
  assert.deepEqual([1, 2, 3, 4].map(() => direct.allow().allowed), [true, true, true, false])
  // One timeline: a Stack takes it beside a limiter on the default clock.
  const stack = new Stack({ coarse: tb, fine: new TokenBucket(3, 1) })
  assert.equal(stack.allow(['k', 'k']).allowed, false) // the coarse member is spent
})

test('a shared file takes the CoarseClock (it refuses a clock of its own): one count for both', { skip: process.platform !== 'linux' && 'shared files are Linux-only' }, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-coarse-'))
  try {
    const file = path.join(dir, 'limits')
    const onCoarse = new TokenBucket(3, SLOW, { clock: new CoarseClock(), sharedFile: file })
    const onDefault = new TokenBucket(3, SLOW, { sharedFile: file })
    assert.deepEqual([1, 2, 3].map(() => onCoarse.allow('k').allowed), [true, true, true])
    assert.equal(onDefault.allow('k').allowed, false)
    assert.equal(onCoarse.allow('k').allowed, false)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
