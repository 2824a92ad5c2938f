'use strict'
// HTTP header fields and problem bodies: formatted once in Rust (core's
// ratomic::headers); the face passes decisions back and returns pairs.
const test = require('node:test')
const assert = require('node:assert/strict')
const { TokenBucket, FixedWindow, Limiter, Stack, Quotas, ManualClock, PROBLEM_CONTENT_TYPE } = require('../ratomic.js')

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

// The strings of core's tests/stack.rs stack_headers_list_every_member_and_name_who_denied
// (its keyless global bucket is here a token bucket on one key: Node has no direct bucket).
test('a Stack: one item per member, named as the member, and the members that denied', () => {
  const clock = new ManualClock()
  const ip = new TokenBucket('2/s', { clock })
  const user = new FixedWindow('100/min', { clock })
  const global = new TokenBucket('1000/s', { clock })
  const stack = new Stack({ ip, user, global })
  const keys = ['10.0.0.1', 'alice', '']
  const d = stack.allow(keys)
  assert.deepEqual(stack.headers(d), [
    ['RateLimit-Policy', '"ip";q=2;w=1, "user";q=100;w=60, "global";q=1000;w=1'],
    ['RateLimit', '"ip";r=1;t=1, "user";r=99;t=60, "global";r=999;t=1'],
  ])
  assert.equal(stack.problem(d), null)
  assert.ok(stack.allow(keys).allowed)
  const denied = stack.allow(keys)
  // Nothing charged on the denial: user still at 98, global at 998.
  assert.deepEqual(stack.headers(denied, { legacy: true }), [
    ['RateLimit-Policy', '"ip";q=2;w=1, "user";q=100;w=60, "global";q=1000;w=1'],
    ['RateLimit', '"ip";r=0;t=1, "user";r=98;t=60, "global";r=998;t=1'],
    ['Retry-After', '1'],
    ['X-RateLimit-Limit', '2'],
    ['X-RateLimit-Remaining', '0'],
    ['X-RateLimit-Reset', '60'],
  ])
  assert.equal(
    stack.problem(denied),
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,' +
      '"detail":"Quota exceeded for ip; retry after 1 s.","violated-policies":["ip"],"retry-after":1}'
  )
  assert.deepEqual(stack.headers(denied, { draft: 'draft-7' }), [
    ['RateLimit-Policy', '2;w=1, 100;w=60, 1000;w=1'],
    ['RateLimit', 'limit=2, remaining=0, reset=60'],
    ['Retry-After', '1'],
  ])
  assert.deepEqual(stack.headers(denied, { draft: 'draft-6' }).map(([n]) => n), [
    'RateLimit-Policy', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'Retry-After',
  ])
  assert.deepEqual(stack.headers(denied, { draft: 'draft-8' }), stack.headers(denied))
})

test('a Stack holding a Limiter decides, but its headers and problem name that member', () => {
  const clock = new ManualClock()
  const stack = new Stack({ ip: new TokenBucket('2/s', { clock }), user: new Limiter({ burst: '1/s' }, { clock }) })
  const d = stack.allow(['10.0.0.1', 'alice'])
  assert.ok(d.allowed, 'a stack that never formats headers may hold a Limiter')
  const NO_POLICY = { name: 'TypeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /stack member "user" is a Limiter/ }
  assert.throws(() => stack.headers(d), NO_POLICY)
  assert.throws(() => stack.problem(d), NO_POLICY)
})

test('a Stack: bad decisions and options throw and format nothing', () => {
  const clock = new ManualClock()
  const stack = new Stack({ ip: new TokenBucket('2/s', { clock }), global: new TokenBucket('1000/s', { clock }) })
  const d = stack.allow(['10.0.0.1', ''])
  const single = new TokenBucket('2/s').allow('k')
  const other = new Limiter({ burst: '1/s' }).allow('k')
  for (const [call, type] of [
    [() => stack.headers(null), TypeError],
    [() => stack.problem(undefined), TypeError],
    [() => stack.headers(single), TypeError],
    [() => stack.problem(single), TypeError],
    [() => stack.headers({ ...d, entries: 'ip' }), TypeError],
    [() => stack.headers(other), RangeError],
    [() => stack.problem(other), RangeError],
    [() => stack.headers({ ...d, entries: [] }), RangeError],
    [() => stack.headers({ ...d, entries: [{ ...d.entries[0], remaining: -1 }] }), RangeError],
    [() => stack.headers({ ...d, retryAfterMs: NaN }), RangeError],
    [() => stack.headers(d, { name: 'x' }), TypeError],
    [() => stack.headers(d, { draft: 'draft-5' }), TypeError],
    [() => stack.headers(d, { legacy: 1 }), TypeError],
  ]) {
    assert.throws(call, (e) => e instanceof type && e.code === 'ERR_RATOMIC_INVALID_ARGUMENT', String(call))
  }
  assert.throws(() => stack.headers(other), { message: 'no member named "burst" in this stack' })
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
