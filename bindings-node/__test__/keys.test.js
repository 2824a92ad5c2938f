'use strict'
// Keys are bytes: a string's UTF-8, a Buffer's contents.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, Limiter, Stack, ManualClock } = require('..')

const INVALID_KEY = { name: 'TypeError', code: 'ERR_RATOMIC_INVALID_KEY', message: /lone surrogate/ }

// Issue 11: V8's UTF-8 conversion turned every lone surrogate into U+FFFD,
// so '\ud800', '\udbff' and '\ufffd' shared one bucket. A string with a lone
// surrogate has no UTF-8 form: it is refused, as Python refuses it.
test('a string with a lone surrogate is a TypeError, never a shared bucket', () => {
  const tb = new TokenBucket(1, 1, { clock: new ManualClock() })
  for (const key of ['\ud800', '\udbff', '\udc00', 'a\ud800b', 'x\udfff', '\udc00\ud800', 'y'.repeat(300) + '\ud800']) {
    assert.throws(() => tb.allow(key), INVALID_KEY, JSON.stringify(key))
    assert.throws(() => tb.peek(key), INVALID_KEY)
    assert.throws(() => tb.refund(key), INVALID_KEY)
    assert.throws(() => tb.reset(key), INVALID_KEY)
  }
  assert.equal(tb.size, 0, 'nothing was charged')
  assert.equal(tb.allow('\ufffd').allowed, true)
  assert.equal(tb.allow('\ufffd').allowed, false, "'\\ufffd' is an ordinary key")
})

test("'\\ufffd' and well-formed surrogate pairs are keys of their own", () => {
  const tb = new TokenBucket(2, 1, { clock: new ManualClock() })
  assert.equal(tb.allow('\ufffd').remaining, 1)
  assert.equal(tb.allow(Buffer.from([0xef, 0xbf, 0xbd])).remaining, 0, 'U+FFFD is the bytes EF BF BD')
  assert.equal(tb.allow('\ud83d\ude00').remaining, 1, 'a pair is one character')
  assert.equal(tb.allow(Buffer.from('😀')).remaining, 0, 'encoded as its 4 UTF-8 bytes')
  assert.equal(tb.allow('é€😀a').remaining, 1)
  assert.equal(tb.allow(Buffer.from('é€😀a')).remaining, 0)
  const long = 'é'.repeat(200) + '😀' // longer than the stack buffer
  assert.equal(tb.allow(long).remaining, 1)
  assert.equal(tb.allow(Buffer.from(long)).remaining, 0)
})

test('lone surrogates are refused in batches, stacks and selections too', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket(1, 1, { clock })
  assert.throws(() => tb.allowMany(['a', '\ud800']), { ...INVALID_KEY, index: 1 })
  const l = new Limiter({ a: '1/s' }, { clock })
  assert.throws(() => l.allow('\udbff'), INVALID_KEY)
  assert.throws(() => l.select(['a']).allow('\udbff'), INVALID_KEY)
  assert.throws(() => new Stack({ tb, l }).allow(['ok', '\udbff']), INVALID_KEY)
  assert.equal(tb.size + l.size, 0)
})

test('a key too long is measured in UTF-8 bytes, before it is copied twice', () => {
  const tb = new TokenBucket(1, 1, { maxKeyLen: 8 })
  assert.throws(() => tb.allow('é'.repeat(5)), { name: 'RangeError', code: 'ERR_RATOMIC_KEY_TOO_LONG', message: /10 bytes/ })
  assert.throws(() => tb.allow('x'.repeat(1e6)), { code: 'ERR_RATOMIC_KEY_TOO_LONG', message: /1000000 bytes/ })
  assert.equal(tb.allow('é'.repeat(4)).allowed, true)
})
