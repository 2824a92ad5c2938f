'use strict'
// DirectTokenBucket: one token bucket for all traffic, no key (core's
// DirectTokenBucket). The token bucket's equations (GCRA) on a ManualClock, its errors
// (a TokenBucket's), acquire, headers, Stack membership and sharing.
const test = require('node:test')
const assert = require('node:assert/strict')
const { DirectTokenBucket, TokenBucket, FixedWindow, Limiter, Stack, ManualClock } = require('..')

const RANGE = (code) => ({ name: 'RangeError', code })
const TYPE = (code) => ({ name: 'TypeError', code })
const tick = () => new Promise((resolve) => setImmediate(resolve))

// GCRA with T = 1000 / refillPerSec ms (exact here), B = capacity, τ = B·T.
test('a fresh bucket passes exactly B unit calls; the denial waits T and is full after τ', () => {
  const clock = new ManualClock(5_000)
  const b = new DirectTokenBucket(5, 4, { clock }) // T = 250 ms, τ = 1250 ms
  for (let i = 1; i <= 5; i++) {
    assert.deepEqual(b.allow(), { allowed: true, remaining: 5 - i, limit: 5, retryAfterMs: 0, resetAfterMs: 250 * i })
  }
  assert.deepEqual(b.allow(), { allowed: false, remaining: 0, limit: 5, retryAfterMs: 250, resetAfterMs: 1250 })
  // A cost n on the drained bucket: retry after n·T (new − τ − now), reset unchanged.
  assert.deepEqual(b.allow(3), { allowed: false, remaining: 0, limit: 5, retryAfterMs: 750, resetAfterMs: 1250 })
  clock.advance(100)
  assert.deepEqual(b.allow(3), { allowed: false, remaining: 0, limit: 5, retryAfterMs: 650, resetAfterMs: 1150 })
  clock.advance(650)
  assert.deepEqual(b.allow(3), { allowed: true, remaining: 0, limit: 5, retryAfterMs: 0, resetAfterMs: 1250 })
  clock.advance(1250)
  assert.deepEqual(b.peek(0), { allowed: true, remaining: 5, limit: 5, retryAfterMs: 0, resetAfterMs: 0 }, 'full after τ')
})

test('after draining, 1/refillPerSec restores exactly one token; fractional refill is never lost', () => {
  const clock = new ManualClock()
  const rate = 3 // T = 333.33… ms: fractional
  const b = new DirectTokenBucket(5, rate, { clock })
  for (let i = 0; i < 5; i++) assert.ok(b.allow().allowed)
  assert.equal(b.allow().allowed, false)
  clock.advance(1000 / rate)
  assert.deepEqual([b.allow().allowed, b.allow().allowed], [true, false], 'exactly one token came back')
  clock.advance(500 / rate)
  assert.equal(b.allow().allowed, false)
  clock.advance(500 / rate)
  assert.equal(b.allow().allowed, true, 'two half-intervals make a token')
})

test('every denial has retryAfterMs > 0, and waiting it out passes', () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket(3, 7, { clock })
  b.allow(3)
  for (let i = 0; i < 20; i++) {
    const d = b.allow()
    assert.equal(d.allowed, false)
    assert.ok(d.retryAfterMs > 0, `retryAfterMs ${d.retryAfterMs}`)
    clock.advance(d.retryAfterMs / 3)
  }
  clock.advance(b.peek().retryAfterMs)
  assert.equal(b.allow().allowed, true)
})

test('a clock that steps back never grants more', () => {
  const clock = new ManualClock(10_000)
  const b = new DirectTokenBucket(2, 1, { clock })
  b.allow(2)
  clock.set(0)
  const d = b.allow()
  assert.equal(d.allowed, false)
  assert.equal(d.remaining, 0, 'never below 0')
  assert.ok(d.retryAfterMs > 0)
})

test('peek changes nothing; cost 0 answers like peek', () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket(4, 1, { clock })
  b.allow()
  const before = b.peek(0)
  for (let i = 0; i < 10; i++) b.peek(3)
  assert.deepEqual(b.peek(4), { allowed: false, remaining: 3, limit: 4, retryAfterMs: 1000, resetAfterMs: 1000 })
  assert.deepEqual(b.allow(0), before)
  assert.deepEqual(b.peek(0), before)
  assert.deepEqual(b.allow(3), { allowed: true, remaining: 0, limit: 4, retryAfterMs: 0, resetAfterMs: 4000 })
})

test('refund gives tokens back, never above full; reset fills the bucket', () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket(5, 1, { clock })
  b.allow(4)
  b.refund()
  assert.equal(b.peek(0).remaining, 2)
  b.refund(2)
  assert.equal(b.peek(0).remaining, 4)
  b.refund(100)
  assert.deepEqual(b.peek(0), { allowed: true, remaining: 5, limit: 5, retryAfterMs: 0, resetAfterMs: 0 }, 'never above full')
  b.allow(5)
  b.reset()
  assert.deepEqual(b.peek(0), { allowed: true, remaining: 5, limit: 5, retryAfterMs: 0, resetAfterMs: 0 })
  b.refund(0)
  assert.equal(b.peek(0).remaining, 5)
})

// The same decisions as a keyed TokenBucket on one key, operation by operation.
test('decides exactly as a TokenBucket on one key (random operations, a fractional rate)', () => {
  const clock = new ManualClock()
  const direct = new DirectTokenBucket(7, 2.5, { clock })
  const keyed = new TokenBucket(7, 2.5, { clock })
  let seed = 42
  const random = (n) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed % n
  }
  for (let i = 0; i < 2_000; i++) {
    const n = random(8)
    switch (random(6)) {
      case 0:
      case 1:
        assert.deepEqual(direct.allow(n), keyed.allow('k', n), `allow(${n}) at ${clock.now()}`)
        break
      case 2:
        assert.deepEqual(direct.peek(n), keyed.peek('k', n))
        break
      case 3:
        direct.refund(n)
        keyed.refund('k', n)
        break
      case 4:
        clock.advance(random(1000) / 3)
        break
      default:
        if (random(20) === 0) {
          direct.reset()
          keyed.reset('k')
        } else {
          assert.deepEqual(direct.allow(), keyed.allow('k'))
        }
    }
  }
})

test('Promise-interleaved calls grant at most capacity', async () => {
  const b = new DirectTokenBucket(50, 1, { clock: new ManualClock() })
  const results = await Promise.all(Array.from({ length: 100 }, async (_, i) => {
    if (i % 3 === 0) await tick()
    return b.allow()
  }))
  assert.equal(results.filter((d) => d.allowed).length, 50)
})

test('the constructors take a TokenBucket\'s shapes', () => {
  const clock = new ManualClock()
  assert.deepEqual(new DirectTokenBucket(10, 2).rule, { algorithm: 'tokenBucket', limit: 10, capacity: 10, refillPerSec: 2 })
  assert.deepEqual(new DirectTokenBucket('1000/s').rule, new TokenBucket('1000/s').rule)
  assert.deepEqual(new DirectTokenBucket('100/min', { burst: 20, clock }).rule, TokenBucket.fromRate('100/min', { burst: 20 }).rule)
  assert.deepEqual(new DirectTokenBucket(20, '10/s').rule, new TokenBucket(20, '10/s').rule)
  assert.deepEqual(DirectTokenBucket.fromRate(' 3/250ms ', { clock }).rule, TokenBucket.fromRate('3/250ms').rule)
  const b = new DirectTokenBucket(20, '10/s', { clock })
  assert.equal(b.limit, 20)
  assert.equal(b.clock, clock)
  assert.equal(new DirectTokenBucket(1, 1).clock, undefined)
  assert.ok(new DirectTokenBucket(1, 1).now() > 0, 'the monotonic clock')
  let t = 12.5
  assert.equal(new DirectTokenBucket(1, 1, { clock: () => t }).now(), 12.5)
  clock.set(777)
  assert.equal(b.now(), 777)
})

// Bad arguments: the error a TokenBucket gives for the same arguments.
test('bad constructor arguments throw what TokenBucket throws', () => {
  // The message too, but for the list of options a TokenBucket takes.
  const thrown = (f) => {
    try {
      f()
    } catch (e) {
      return { name: e.name, code: e.code, message: e.message.replace(/ \(expected one of [^)]*\)/, '') }
    }
    assert.fail('did not throw')
  }
  const cases = [
    [10, NaN], [10, -1], [10, 0], [10, Infinity], [0, 1], [-3, 1], [1.5, 1], [NaN, 1], [2 ** 60, 1e-9],
    ['10 per fortnight'], ['5/fortnight'], ['0/s'], ['10/s', { burst: 0 }], ['10/s', { burst: 1.5 }], ['10/s', { burst: '2' }],
    ['10', 1], [10, null], [{}, 1], [10, 1, { clock: 5 }], [10, 1, { colour: 'red' }], [10, 1, 'options'], [10, '1/x'],
  ]
  for (const args of cases) {
    const mine = thrown(() => new DirectTokenBucket(...args))
    assert.deepEqual(mine, thrown(() => new TokenBucket(...args)), JSON.stringify(args))
    assert.ok(mine.code, `${JSON.stringify(args)}: has a code`)
    assert.ok(['TypeError', 'RangeError'].includes(mine.name), JSON.stringify(args))
  }
  // A keyed limiter's store options are not a direct bucket's.
  for (const option of ['maxKeys', 'maxKeyLen', 'maxKeyBytes', 'reserveKeys', 'eviction', 'sharedFile']) {
    assert.throws(() => new DirectTokenBucket(10, 1, { [option]: 1 }), { ...TYPE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /unknown option/ })
  }
  assert.throws(() => DirectTokenBucket.fromRate(10), TypeError)
})

test('a bad cost or clock throws what TokenBucket throws, and changes nothing', () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket(3, 1, { clock })
  b.allow()
  assert.throws(() => b.allow(4), { ...RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'), message: /cost 4 exceeds the limit 3/ })
  assert.throws(() => b.peek(4), RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'))
  for (const bad of [-1, 1.5, NaN, Infinity]) {
    assert.throws(() => b.allow(bad), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), String(bad))
    assert.throws(() => b.peek(bad), RANGE('ERR_RATOMIC_INVALID_ARGUMENT'))
  }
  assert.throws(() => b.allow(2 ** 60), { ...RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'), message: /^cost 1152921504606847000 exceeds the limit/ })
  for (const bad of ['2', null, {}, 2n]) {
    assert.throws(() => b.allow(bad), { ...TYPE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /cost must be a number/ })
    assert.throws(() => b.peek(bad), TypeError)
  }
  assert.throws(() => b.refund(-1), { ...RANGE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /tokens/ })
  assert.throws(() => b.refund('1'), { ...TYPE('ERR_RATOMIC_INVALID_ARGUMENT'), message: /tokens must be a number/ })
  assert.deepEqual(b.peek(0), { allowed: true, remaining: 2, limit: 3, retryAfterMs: 0, resetAfterMs: 1000 }, 'nothing changed')
})

test('a clock that throws or returns nonsense is an error that changes nothing', () => {
  let t = 0
  let fail = false
  const b = new DirectTokenBucket(2, 1, { clock: () => { if (fail) throw new Error('clock broke'); return t } })
  b.allow()
  fail = true
  for (const call of [() => b.allow(), () => b.peek(), () => b.refund(), () => b.now()]) assert.throws(call, { message: 'clock broke' })
  b.reset() // fills the bucket at no time: it reads no clock
  fail = false
  b.allow()
  for (const [bad, error] of [['now', TYPE], [NaN, RANGE], [-5, RANGE], [1e300, RANGE], [Infinity, RANGE], [2 ** 62 / 1e6 + 1, RANGE]]) {
    t = bad
    assert.throws(() => b.allow(), error('ERR_RATOMIC_INVALID_CLOCK'), String(bad))
    assert.throws(() => b.peek(), error('ERR_RATOMIC_INVALID_CLOCK'))
    assert.throws(() => b.refund(), error('ERR_RATOMIC_INVALID_CLOCK'))
  }
  t = 0
  assert.equal(b.allow().remaining, 0, 'exactly one token had been taken')
})

test('acquire waits out retryAfterMs on the manual clock', async () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket(1, 4, { clock }) // a token every 250 ms
  assert.equal((await b.acquire()).allowed, true)
  let done = null
  const p = b.acquire().then((d) => { done = d })
  await tick()
  clock.advance(249)
  await tick()
  assert.equal(done, null, 'still waiting 1 ms early')
  clock.advance(1)
  await p
  assert.equal(done.allowed, true)
  assert.equal(b.peek().allowed, false, 'acquire consumed the token')
  // With timeoutMs: the denial, without waiting, once the wait would pass it.
  const denied = await b.acquire(1, { timeoutMs: 100 })
  assert.deepEqual([denied.allowed, denied.retryAfterMs], [false, 250])
  const ac = new AbortController()
  const aborted = b.acquire(1, { signal: ac.signal })
  await tick()
  ac.abort()
  await assert.rejects(aborted, { name: 'AbortError' })
  await assert.rejects(b.acquire(2), RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'))
  await assert.rejects(b.acquire(1, 5), TypeError)
  clock.advance(250)
  assert.equal(b.allow().allowed, true, 'the aborted and failed acquires took nothing')
})

test('headers and problem are a TokenBucket\'s', () => {
  const clock = new ManualClock()
  const b = new DirectTokenBucket('2/s', { clock })
  const tb = new TokenBucket('2/s', { clock })
  for (let i = 0; i < 3; i++) {
    const [d, k] = [b.allow(), tb.allow('k')]
    assert.deepEqual(d, k)
    for (const options of [undefined, { name: 'global' }, { name: 'g', legacy: true }, { draft: 'draft-7' }, { draft: 'draft-6', legacy: true }]) {
      assert.deepEqual(b.headers(d, options), tb.headers(k, options))
    }
    assert.deepEqual(b.problem(d, { name: 'global' }), tb.problem(k, { name: 'global' }))
  }
  const denied = b.allow()
  assert.deepEqual(b.headers(denied, { name: 'global' }), [
    ['RateLimit-Policy', '"global";q=2;w=1'],
    ['RateLimit', '"global";r=0;t=1'],
    ['Retry-After', '1'],
  ])
  assert.deepEqual(JSON.parse(b.problem(denied, { name: 'global' }))['violated-policies'], ['global'])
  assert.throws(() => b.headers(denied, { name: 'café' }), RangeError)
  assert.throws(() => b.headers(null), TypeError)
  assert.throws(() => b.headers(denied, { colour: 1 }), TypeError)
  assert.throws(() => b.problem(denied, { legacy: true }), TypeError)
})

test('a Stack member: its key is ignored, all or nothing with the others', () => {
  const clock = new ManualClock()
  const ip = new TokenBucket(2, 1, { clock })
  const global = new DirectTokenBucket(3, 1, { clock })
  const stack = new Stack({ ip, global })
  assert.deepEqual(stack.allow(['10.0.0.1', '']).entries.map((e) => [e.name, e.remaining]), [['ip', 1], ['global', 2]])
  assert.ok(stack.allow(['10.0.0.2', 'whatever']).allowed, 'any key: the same bucket')
  assert.ok(stack.allow(['10.0.0.3', Buffer.from([1, 2, 3])]).allowed)
  assert.equal(global.peek(0).remaining, 0)
  const d = stack.allow(['10.0.0.4', ''])
  assert.deepEqual(d.deniedBy, ['global'])
  assert.equal(d.retryAfterMs, 1000)
  assert.equal(ip.peek('10.0.0.4', 0).remaining, 2, 'the ip was not charged for the denial')
  clock.advance(1000)
  ip.allow('10.0.0.1', 2)
  assert.deepEqual(stack.allow(['10.0.0.1', '']).deniedBy, ['ip'])
  assert.equal(global.peek(0).remaining, 1, 'the direct bucket was not charged for the ip\'s denial')
  stack.refund(['10.0.0.2', 'x'], 5)
  assert.equal(global.peek(0).remaining, 3, 'refund reaches it, never above full')
  global.allow(3)
  stack.reset(['10.0.0.2', 'x'])
  assert.equal(global.peek(0).remaining, 3, 'reset reaches it: full for everyone')
  assert.throws(() => stack.allow(['10.0.0.1']), { name: 'RangeError', message: /one key per member/ })
  assert.throws(() => stack.allow(['10.0.0.1', 5]), TYPE('ERR_RATOMIC_INVALID_KEY'), 'the stack still takes a key for it')
  assert.throws(() => stack.allow(['10.0.0.1', ''], 4), RANGE('ERR_RATOMIC_COST_EXCEEDS_LIMIT'))
  assert.equal(global.peek(0).remaining, 3)
  // Its headers item, as any member's.
  const h = new Stack({ ip: new TokenBucket('10/s', { clock }), global: new DirectTokenBucket('1000/s', { clock }) })
  assert.equal(h.headers(h.allow(['a', '']))[0][1], '"ip";q=10;w=1, "global";q=1000;w=1')
  assert.ok(new Stack([['only', new DirectTokenBucket(1, 1)]]).allow(['']).allowed)
  assert.ok(new Stack({ l: new Limiter({ a: '1/s' }, { clock }), f: new FixedWindow('5/s', { clock }), global }).allow(['k', 'k', '']).allowed)
})

test('a Stack refuses a direct bucket on another clock', () => {
  const a = new ManualClock()
  const b = new ManualClock()
  const CLOCKS = { name: 'RangeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /another clock/ }
  const onA = new DirectTokenBucket(1, 1, { clock: a })
  const monotonic = new DirectTokenBucket(1, 1)
  assert.throws(() => new Stack({ ip: new TokenBucket(1, 1, { clock: b }), onA }), CLOCKS)
  assert.throws(() => new Stack({ onA, ip: new TokenBucket(1, 1, { clock: b }) }), CLOCKS)
  assert.throws(() => new Stack({ onA, monotonic }), CLOCKS)
  assert.throws(() => new Stack({ monotonic, ip: new TokenBucket(1, 1, { clock: a }) }), CLOCKS)
  assert.throws(() => new Stack({ onA }, { clock: b }), CLOCKS, 'the clock option must be the members\' clock')
  assert.throws(() => new Stack({ monotonic }, { clock: a }), CLOCKS)
  assert.throws(() => new Stack({ f: new DirectTokenBucket(1, 1, { clock: () => 0 }), g: new TokenBucket(1, 1, { clock: () => 0 }) }), CLOCKS)
  // One clock for all: the same ManualClock, the same function, or none.
  const stack = new Stack({ onA, ip: new TokenBucket(1, 1, { clock: a }) })
  assert.equal(stack.clock, a, 'the stack reads the first member\'s clock')
  assert.ok(new Stack({ ip: new TokenBucket(1, 1, { clock: a }), onA }, { clock: a }))
  const fn = () => 0
  assert.ok(new Stack({ f: new DirectTokenBucket(1, 1, { clock: fn }), g: new FixedWindow(1, 1000, { clock: fn }) }))
  assert.ok(new Stack({ monotonic, ip: new TokenBucket(1, 1), shared: DirectTokenBucket.shared('direct-stack-clock', 1, 1) }))
})

test('shared: one process-wide bucket per name; a conflict is an Error with a code', () => {
  const a = DirectTokenBucket.shared('direct-shared-test', 2, 1)
  const b = DirectTokenBucket.shared('direct-shared-test', 2, 1)
  assert.equal(a.allow().remaining, 1)
  assert.equal(b.allow().remaining, 0, 'the same bucket')
  assert.equal(a.allow().allowed, false)
  assert.equal(a.clock, undefined)
  assert.ok(DirectTokenBucket.shared('direct-shared-rate', '10/s', { burst: 3 }).limit === 3)
  const CONFLICT = (message) => (e) => {
    assert.equal(e.constructor, Error)
    assert.equal(e.code, 'ERR_RATOMIC_SHARED_CONFLICT')
    assert.match(e.message, message)
    return true
  }
  assert.throws(() => DirectTokenBucket.shared('direct-shared-test', 3, 1), CONFLICT(/different configuration/))
  // The same rule as another kind of limiter is a conflict too, either way round.
  assert.throws(() => TokenBucket.shared('direct-shared-test', 2, 1), CONFLICT(/another kind of limiter/))
  TokenBucket.shared('keyed-shared-test', 2, 1)
  assert.throws(() => DirectTokenBucket.shared('keyed-shared-test', 2, 1), CONFLICT(/another kind of limiter/))
  assert.throws(() => DirectTokenBucket.shared('direct-shared-x', 2, 1, { clock: () => 0 }), { name: 'TypeError', message: /unknown option "clock"/ })
  assert.throws(() => DirectTokenBucket.shared('direct-shared-x', 2, 1, { maxKeys: 5 }), { name: 'TypeError', message: /unknown option "maxKeys"/ })
  assert.throws(() => DirectTokenBucket.shared(5, 2, 1), TypeError)
})

test('no native handle on the public object; it is no BaseLimiter', () => {
  const { BaseLimiter } = require('..')
  const b = new DirectTokenBucket(1, 1)
  assert.deepEqual(Object.getOwnPropertyNames(b), [])
  assert.ok(!(b instanceof BaseLimiter))
  assert.deepEqual(Object.getOwnPropertyNames(DirectTokenBucket.prototype).sort(), [
    'acquire', 'allow', 'clock', 'constructor', 'headers', 'limit', 'now', 'peek', 'problem', 'refund', 'reset', 'rule', 'toString',
  ])
})
