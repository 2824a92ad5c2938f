// The public typings, checked against the implementation: tsc compiles this
// file against ratomic.d.ts (misuse must not type-check: each expected error
// is marked), and `npm test` then runs what it emits, so every typed call
// below is also a real call. typings-match.test.js checks that it uses every
// declaration of ratomic.d.ts.
import test from 'node:test'
import assert from 'node:assert/strict'
import {
  AcquireOptions,
  BaseLimiter,
  ClockLike,
  Decision,
  DirectTokenBucket,
  FixedWindow,
  HeaderDraft,
  HeaderOptions,
  CoarseClock,
  Key,
  Limiter,
  LimiterOptions,
  LimitsString,
  ManualClock,
  MultiDecision,
  NamedDecision,
  PROBLEM_CONTENT_TYPE,
  Quotas,
  QuotaSpec,
  Rule,
  RuleInfo,
  SharedOptions,
  SlidingWindow,
  Stack,
  StoreOptions,
  TokenBucket,
} from 'ratomic'

test('typings: the coarse clock', () => {
  const coarse: CoarseClock = new CoarseClock()
  const resolution: number = coarse.resolutionMs
  const now: number = coarse.now()
  assert.ok(resolution > 0 && now >= 0)
  const tb = new TokenBucket(10, 5, { clock: coarse })
  assert.equal(tb.allow('k').allowed, true)
})

test('typings: a token bucket, every operation', async () => {
  const clock: ManualClock = new ManualClock(0)
  const options: LimiterOptions = { clock, maxKeys: 1000, maxKeyLen: 64, maxKeyBytes: 1 << 20, reserveKeys: 500, eviction: 'fair' }
  const shared: LimiterOptions = { maxKeys: 1000, sharedFile: '/run/user/1000/myapp-limits.shm' }
  assert.equal(shared.sharedFile?.endsWith('.shm'), true)
  const tb = new TokenBucket(10, 5, options)
  const key: Key = 'user:1'
  const d: Decision = tb.allow(key)
  const fields: [boolean, number, number, number, number] = [d.allowed, d.remaining, d.limit, d.retryAfterMs, d.resetAfterMs]
  assert.deepEqual(fields, [true, 9, 10, 0, 200])
  assert.equal(tb.allow(Buffer.from('user:1'), 2).remaining, 7)
  assert.equal(tb.peek('k').allowed, true)
  tb.refund(key, 1)
  tb.refund(key)
  tb.reset(key)
  const many: Decision[] = tb.allowMany(['a', ['b', 2], ['c']])
  assert.equal(many.length, 3)
  const size: number = tb.size
  const bytes: number = tb.memoryBytes
  const maxKeyLen: number = tb.maxKeyLen
  const now: number = tb.now()
  const dropped: number = tb.gc()
  assert.equal(tb.gc(now + 10_000), 3)
  assert.deepEqual([size, bytes > 0, maxKeyLen, now, dropped], [3, true, 64, 0, 0])
  const limit: number = tb.limit
  const rule: RuleInfo = tb.rule
  assert.deepEqual([limit, rule.algorithm], [10, 'tokenBucket'])
  const theClock: ClockLike | undefined = tb.clock
  assert.equal(theClock, clock)
  assert.equal(clock.advance(100), 100)
  assert.equal(clock.set(0), 0)
  assert.equal(clock.now(), 0)
  await clock.sleep(0)
  const acquireOptions: AcquireOptions = { signal: new AbortController().signal, timeoutMs: 500 }
  const got: Decision = await tb.acquire(key, 1, acquireOptions)
  assert.equal(got.allowed, true)
  const base: BaseLimiter = tb
  assert.ok(base instanceof BaseLimiter)
})

test('typings: constructors, rate strings, shared limiters', () => {
  const fromRate: TokenBucket = TokenBucket.fromRate('10/s', { burst: 20 })
  const str = new TokenBucket('100/min', { clock: () => 0, eviction: 'strict' })
  const shared: TokenBucket = TokenBucket.shared('typings-tb', 10, 1)
  const sharedRate: TokenBucket = TokenBucket.shared('typings-tb-rate', '10/s', { burst: 5 })
  const sharedOptions: SharedOptions = { maxKeys: 100 }
  const store: StoreOptions = sharedOptions
  const fw = new FixedWindow(100, 60_000, store)
  const fw2 = new FixedWindow('100/min')
  const fwShared: FixedWindow = FixedWindow.shared('typings-fw', 5, '1s')
  const sw = new SlidingWindow(100, '1min', { clock: new ManualClock() })
  const sw2 = new SlidingWindow('3/s')
  const swShared: SlidingWindow = SlidingWindow.shared('typings-sw', '5/s')
  assert.deepEqual(
    [fromRate, str, shared, sharedRate, fw, fw2, fwShared, sw, sw2, swShared].map((l) => l.limit),
    [20, 100, 10, 5, 100, 100, 5, 100, 3, 5],
  )
  assert.equal(fw.rule.algorithm, 'fixedWindow')
  assert.equal(sw.rule.algorithm, 'slidingWindow')
  // Printed with the rule's units.
  const printed: string = new FixedWindow(5, 60).toString()
  assert.equal(printed, 'FixedWindow { fixed window 5 per 60ms, keys: 0 }')
})

test('typings: a Limiter and its selections', () => {
  const hourly: Rule = { algorithm: 'slidingWindow', limit: 100, window: '1h' }
  const limiter = new Limiter({ burst: '10/s', daily: { algorithm: 'fixedWindow', rate: '1000/day' }, hourly })
  const md: MultiDecision = limiter.allow('user:1')
  const entry: NamedDecision = md.entries[0]
  const deniedBy: string[] = md.deniedBy
  assert.deepEqual([entry.name, deniedBy], ['burst', []])
  const names: string[] = limiter.names
  const rules: Record<string, RuleInfo> = limiter.rules
  assert.deepEqual(Object.keys(rules), names)
  const burstOnly: Limiter = limiter.select(['burst'])
  assert.deepEqual(burstOnly.allow('user:1').entries.map((e) => e.name), ['burst'])
  const again = new Limiter(Object.values(rules).map((r, i) => ({ ...r, name: names[i] })))
  assert.deepEqual(again.rules, rules)
  const shared: Limiter = Limiter.shared('typings-limiter', { burst: '2/s' })
  assert.equal(shared.names.length, 1)
  // As Python's limits / slowapi write several limits; windows in milliseconds are windowMs.
  const slowapi: LimitsString = '10/second;1000 per day'
  const fromString = new Limiter(slowapi)
  assert.deepEqual(fromString.names, ['10/second', '1000 per day'])
  assert.equal(Limiter.shared('typings-limiter-string', '5/s|10/min').names.length, 2)
  const inMs: Rule = { algorithm: 'fixedWindow', limit: 5, windowMs: 60_000 }
  assert.equal(new Limiter({ inMs }).rules.inMs.algorithm, 'fixedWindow')
  const printed: string = fromString.toString()
  assert.equal(printed, 'Limiter { "10/second": token bucket 10 per 1s, "1000 per day": token bucket 1000 per 1d, keys: 0 }')
})

test('typings: a Stack, every operation', async () => {
  const clock = new ManualClock()
  const stack = new Stack({ ip: new TokenBucket(5, 1, { clock }), user: new FixedWindow(2, 1000, { clock }) }, { clock })
  const d: MultiDecision = stack.allow(['10.0.0.1', 'alice'])
  assert.equal(d.allowed, true)
  assert.equal(stack.peek(['10.0.0.1', 'alice'], 1).allowed, true)
  stack.refund(['10.0.0.1', 'alice'], 1)
  stack.reset(['10.0.0.1', 'alice'])
  const names: string[] = stack.names
  const theClock: ClockLike | undefined = stack.clock
  assert.deepEqual([names, theClock], [['ip', 'user'], clock])
  const waited: MultiDecision = await stack.acquire(['10.0.0.1', 'alice'], 1, { timeoutMs: 0 })
  assert.equal(waited.allowed, true)
  const pairs = new Stack([['a', new TokenBucket(1, 1)]])
  assert.deepEqual(pairs.names, ['a'])
  const printed: string = pairs.toString()
  assert.equal(printed, 'Stack { "a": TokenBucket { token bucket 1 per 1s, keys: 0 } }')
  const fields: Array<[string, string]> = stack.headers(d, { legacy: true, draft: 'draft-11' })
  assert.equal(fields[0][1], '"ip";q=5;w=5, "user";q=2;w=1')
  // @ts-expect-error a stack's items are named as its members
  assert.throws(() => stack.headers(d, { name: 'x' }), TypeError)
  const body: string | null = stack.problem(d)
  assert.equal(body, null)
})

test('typings: a DirectTokenBucket, every operation', async () => {
  const clock = new ManualClock()
  const global = new DirectTokenBucket(10, 5, { clock })
  const d: Decision = global.allow()
  assert.deepEqual([d.allowed, d.remaining, d.limit, d.retryAfterMs, d.resetAfterMs], [true, 9, 10, 0, 200])
  assert.equal(global.allow(2).remaining, 7)
  assert.equal(global.peek().remaining, 6, 'what allow() would leave')
  assert.equal(global.peek(7).allowed, true)
  global.refund(2)
  global.refund()
  assert.equal(global.peek(0).remaining, 10)
  global.allow(10)
  global.reset()
  const waited: Decision = await global.acquire(1, { timeoutMs: 0 })
  assert.equal(waited.allowed, true)
  assert.equal((await global.acquire()).remaining, 8)
  const limit: number = global.limit
  const rule: RuleInfo = global.rule
  const theClock: ClockLike | undefined = global.clock
  const now: number = global.now()
  assert.deepEqual([limit, rule.algorithm, theClock, now], [10, 'tokenBucket', clock, 0])
  const fields: Array<[string, string]> = global.headers(d, { name: 'global', legacy: true, draft: 'draft-11' })
  assert.deepEqual(fields[0], ['RateLimit-Policy', '"global";q=10;w=2'])
  const body: string | null = global.problem(d, { name: 'global' })
  assert.equal(body, null)
  const fromRate: DirectTokenBucket = DirectTokenBucket.fromRate('1000/s', { burst: 50, clock })
  const str = new DirectTokenBucket('100/min', { clock: () => 0 })
  const withRate = new DirectTokenBucket(20, '10/s')
  const shared: DirectTokenBucket = DirectTokenBucket.shared('typings-direct', 10, 1)
  const sharedRate: DirectTokenBucket = DirectTokenBucket.shared('typings-direct-rate', '10/s', { burst: 5 })
  assert.deepEqual([fromRate, str, withRate, shared, sharedRate].map((b) => b.limit), [50, 100, 20, 10, 5])
  // A Stack member: its key is ignored, but the stack takes one per member.
  const stack = new Stack({ ip: new TokenBucket(5, 1, { clock }), global }, { clock })
  assert.deepEqual(stack.allow(['10.0.0.1', '']).entries.map((e) => e.remaining), [4, 7])
  const pairs = new Stack([['everyone', shared]])
  assert.equal(pairs.allow(['']).allowed, true)
  // @ts-expect-error a DirectTokenBucket has no key
  assert.throws(() => global.allow('user:1'), TypeError)
  // @ts-expect-error nor key options
  assert.throws(() => new DirectTokenBucket(1, 1, { maxKeys: 10 }), TypeError)
  // @ts-expect-error it is no BaseLimiter: allowMany, size and gc are for keys
  assert.equal(global.size, undefined)
  const printed: string = global.toString()
  assert.equal(printed, 'DirectTokenBucket { token bucket 10 per 2s }')
})

test('typings: Quotas, every operation', async () => {
  const clock = new ManualClock()
  const q = new Quotas({ clock, maxKeys: 1000 })
  const plan: QuotaSpec = '2/s'
  const d: Decision = q.allow('acme', plan)
  assert.equal(d.remaining, 1)
  assert.equal(q.allow(Buffer.from('acme'), { capacity: 5, refillPerSec: 1 }, 2).remaining, 3)
  assert.equal(q.peek('acme', { rate: '2/s', burst: 2 }, 0).remaining, 1)
  q.refund('acme', plan, 1)
  q.refund('acme', plan)
  q.reset('acme', plan)
  const waited: Decision = await q.acquire('acme', plan, 1, { timeoutMs: 0 })
  assert.equal(waited.allowed, true)
  const sizes: [number, number, number, number] = [q.size, q.memoryBytes, q.maxKeyLen, q.gc(10_000)]
  assert.equal(sizes[0] >= 0 && sizes[1] > 0 && sizes[2] > 0 && sizes[3] >= 0, true)
  const theClock: ClockLike | undefined = q.clock
  assert.equal(theClock, clock)
  assert.equal(q.now(), 0)
  const printed: string = q.toString()
  assert.match(printed, /^Quotas \{ buckets: \d+ \}$/)
  // @ts-expect-error a quota is a rate string or a token-bucket object
  assert.throws(() => q.allow('acme', 5), TypeError)
})

test('typings: HTTP headers and problem bodies', () => {
  const clock = new ManualClock()
  const tb = new TokenBucket('2/s', { clock })
  const options: HeaderOptions = { name: 'per-ip', legacy: true }
  const fields: Array<[string, string]> = tb.headers(tb.allow('ip'), options)
  assert.deepEqual(fields[0], ['RateLimit-Policy', '"per-ip";q=2;w=1'])
  tb.allow('ip')
  const body: string | null = tb.problem(tb.allow('ip'), { name: 'per-ip' })
  assert.equal(JSON.parse(body ?? '{}').status, 429)
  const draft: HeaderDraft = 'draft-7'
  const older: HeaderOptions = { draft, legacy: false }
  assert.equal(tb.headers(tb.peek('other'), older)[1][0], 'RateLimit')
  // @ts-expect-error the drafts are 'draft-11', 'draft-8', 'draft-7' and 'draft-6'
  assert.throws(() => tb.headers(tb.peek('other'), { draft: 'draft-5' }), TypeError)
  const fw = new FixedWindow('5/s', { clock })
  assert.equal(fw.headers(fw.allow('k')).length, 2)
  assert.equal(fw.problem(fw.allow('k'), { name: 'fw' }), null)
  const sw = new SlidingWindow('5/s', { clock })
  assert.equal(sw.headers(sw.allow('k'), { legacy: true }).length, 5)
  assert.equal(sw.problem(sw.allow('k')), null)
  const l = new Limiter({ burst: '1/s' }, { clock })
  l.allow('k')
  const denied = l.allow('k')
  assert.equal(l.headers(denied, { legacy: false })[2][0], 'Retry-After')
  assert.equal(l.problem(denied) !== null, true)
  const q = new Quotas({ clock })
  assert.equal(q.headers(q.allow('a', '3/s'), '3/s', { name: 'plan' })[1][1], '"plan";r=2;t=1')
  assert.equal(q.problem(q.allow('a', '3/s'), '3/s'), null)
  const type: 'application/problem+json' = PROBLEM_CONTENT_TYPE
  assert.equal(type, 'application/problem+json')
})

test('typings: misuse does not compile, and throws', () => {
  const tb = new TokenBucket(1, 1)
  // @ts-expect-error a key is a string or a Buffer
  assert.throws(() => tb.allow(42), TypeError)
  // @ts-expect-error the clock is a function or a ManualClock
  assert.throws(() => new TokenBucket(1, 1, { clock: 5 }), TypeError)
  // @ts-expect-error eviction is 'fair' or 'strict'
  assert.throws(() => new TokenBucket(1, 1, { eviction: 'lru' }), RangeError)
  // @ts-expect-error BaseLimiter is not constructible
  assert.throws(() => new BaseLimiter(), TypeError)
  // @ts-expect-error a Decision has no `ok` field
  assert.equal(tb.allow('k').ok, undefined)
  // @ts-expect-error a shared limiter has no clock option
  assert.throws(() => TokenBucket.shared('typings-misuse', 1, 1, { clock: () => 0 }), TypeError)
})
