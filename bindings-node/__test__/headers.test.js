'use strict'
// HTTP header fields and problem bodies: formatted once in Rust (core's
// ratomic::headers); the face passes decisions back and returns pairs.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, Limiter, Quotas, ManualClock, PROBLEM_CONTENT_TYPE } = require('../ratomic.js')

test('a token bucket: fields when allowed and denied, legacy fields, the problem body', () => {
  const tb = new TokenBucket('2/s', { clock: new ManualClock() })
  const d = tb.allow('ip')
  assert.deepEqual(tb.headers(d), [['RateLimit-Policy', '"default";q=2;w=1'], ['RateLimit', '"default";r=1;t=1']])
  assert.equal(tb.problem(d), null)
  tb.allow('ip')
  const denied = tb.allow('ip')
  const h = Object.fromEntries(tb.headers(denied, { name: 'per-ip', legacy: true }))
  assert.equal(h['Retry-After'], '1', '500 ms rounded up, never 0')
  assert.deepEqual([h['X-RateLimit-Limit'], h['X-RateLimit-Remaining'], h['X-RateLimit-Reset']], ['2', '0', '1'])
  const body = JSON.parse(tb.problem(denied, { name: 'per-ip' }))
  assert.deepEqual([body.status, body['violated-policies'], body['retry-after']], [429, ['per-ip'], 1])
  assert.equal(PROBLEM_CONTENT_TYPE, 'application/problem+json')
})

test('a Limiter names each limit it was subject to, and the ones that denied', () => {
  const clock = new ManualClock()
  const l = new Limiter({ burst: '2/s', daily: { algorithm: 'fixedWindow', rate: '100/day' } }, { clock })
  l.allow('k', 2)
  const d = l.allow('k')
  const h = Object.fromEntries(l.headers(d))
  assert.equal(h['RateLimit-Policy'], '"burst";q=2;w=1, "daily";q=100;w=86400')
  assert.deepEqual(JSON.parse(l.problem(d))['violated-policies'], ['burst'])
  const daily = l.select(['daily']).allow('k')
  assert.equal(Object.fromEntries(l.headers(daily))['RateLimit-Policy'], '"daily";q=100;w=86400')
})

test('Quotas headers name the quota, and durations round up', () => {
  const clock = new ManualClock()
  const q = new Quotas({ clock })
  const d = q.allow('acme', '100/min')
  assert.deepEqual(q.headers(d, '100/min', { name: 'plan' })[0], ['RateLimit-Policy', '"plan";q=100;w=60'])
  // 1 s + a fraction of a ms must not round down to 1 s.
  const h = q.headers({ allowed: false, remaining: 0, limit: 1, retryAfterMs: 1000.0001, resetAfterMs: 1000.0001 }, '1/s')
  assert.deepEqual(Object.fromEntries(h)['Retry-After'], '2')
})

test("earlier drafts' fields, for every kind of limiter", () => {
  const clock = new ManualClock()
  const tb = new TokenBucket('2/s', { clock })
  const d = tb.allow('ip')
  assert.deepEqual(tb.headers(d, { draft: 'draft-7' }), [['RateLimit-Policy', '2;w=1'], ['RateLimit', 'limit=2, remaining=1, reset=1']])
  assert.deepEqual(tb.headers(d, { draft: 'draft-6', legacy: true }).map(([n]) => n), [
    'RateLimit-Policy', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset',
  ])
  assert.deepEqual(tb.headers(d, { draft: 'draft-8' }), tb.headers(d))
  const l = new Limiter({ burst: '2/s', daily: { algorithm: 'fixedWindow', rate: '100/day' } }, { clock })
  assert.equal(l.headers(l.allow('k'), { draft: 'draft-7' })[0][1], '2;w=1, 100;w=86400')
  const q = new Quotas({ clock })
  assert.equal(q.headers(q.allow('acme', '5/min'), '5/min', { draft: 'draft-6' })[1][1], '5')
  assert.throws(() => tb.headers(d, { draft: 'draft-5' }), { name: 'TypeError', message: /draft must be one of/ })
  assert.throws(() => l.headers(l.allow('k'), { name: 'x' }), TypeError)
})

test('bad arguments throw and format nothing', () => {
  const tb = new TokenBucket('2/s')
  const d = tb.allow('k')
  for (const [call, type] of [
    [() => tb.headers(d, { name: '' }), RangeError],
    [() => tb.headers(d, { name: 'caf\u00e9' }), RangeError],
    [() => tb.headers(d, { name: 5 }), TypeError],
    [() => tb.headers(d, { legacy: 'yes' }), TypeError],
    [() => tb.headers(d, { colour: 'red' }), TypeError],
    [() => tb.headers(null), TypeError],
    [() => tb.headers({ ...d, remaining: -1 }), RangeError],
    [() => tb.headers({ ...d, retryAfterMs: NaN }), RangeError],
    [() => new Limiter({ a: '1/s' }).headers(d), TypeError],
    [() => new Limiter({ a: '1/s' }).headers({ ...d, entries: [{ ...d, name: 'b' }] }), RangeError],
  ]) {
    assert.throws(call, type, String(call))
  }
})
