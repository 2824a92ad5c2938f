'use strict'
// The public API of the `ratomic` package. The limiters live in Rust (see
// src/ and the generated index.js / index.d.ts); this file converts
// arguments, reads injected clocks, and builds the Decision objects in
// JavaScript, because V8 creates a plain object literal far faster than
// N-API can. Every decision, check and error is core's.
//
// Nothing native is reachable from here: the native handles live in private
// fields, the hot-path functions and their output buffer in this module's
// scope, and package.json's `exports` lets `require('ratomic')` reach only
// this file.

const { NativeKeyed, NativeLimiter, NativeStack, NativeQuotas, NativeDirect, NativeClock, hotPath, parseLimits } = require('./native.js')
const { inspect } = require('node:util')

// One allow and one op function per thread for each kind of limiter, each
// taking the limiter's id (a direct bucket's take no key): every call site
// below stays monomorphic (see src/hot.rs). Decisions are written into OUT
// (layout: src/decision.rs).
const {
  allowKeyed: ALLOW_KEYED,
  opKeyed: OP_KEYED,
  allowLimiter: ALLOW_LIMITER,
  opLimiter: OP_LIMITER,
  manyKeyed: MANY_KEYED,
  manyLimiter: MANY_LIMITER,
  allowDirect: ALLOW_DIRECT,
  opDirect: OP_DIRECT,
  out: OUT,
  entryCount: ENTRIES,
  firstEntry: FIRST_ENTRY,
  entryLen: ENTRY_LEN,
} = hotPath()
const OP_PEEK = 1
const OP_REFUND = 2
const OP_RESET = 3

// Lets this module, and only it, call the limiter constructors' internal form.
const INTERNAL = Symbol('ratomic internal')

function typeError(message, code = 'ERR_RATOMIC_INVALID_ARGUMENT') {
  const e = new TypeError(message)
  e.code = code
  return e
}

function rangeError(message, code = 'ERR_RATOMIC_INVALID_ARGUMENT') {
  const e = new RangeError(message)
  e.code = code
  return e
}

function describe(v) {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  const t = typeof v
  return t === 'object' ? 'an object' : t === 'undefined' ? 'undefined' : `a ${t}`
}

/**
 * A clock for tests: time stands still until you move it. Pass it as the
 * `clock` option of any limiter; `acquire` waits on it too, so a test can
 * drive waits with `advance` instead of sleeping.
 */
class ManualClock {
  #ms
  #sleepers = []

  constructor(startMs = 0) {
    this.#ms = ManualClock.#check(startMs, 'startMs')
  }

  static #check(ms, name) {
    if (typeof ms !== 'number') throw typeError(`${name} must be a number of milliseconds, got ${describe(ms)}`)
    if (!Number.isFinite(ms) || ms < 0) throw rangeError(`${name} must be a finite number of milliseconds >= 0, got ${ms}`)
    return ms
  }

  now() {
    return this.#ms
  }

  advance(ms) {
    ManualClock.#check(ms, 'ms')
    this.#ms += ms
    this.#wake()
    return this.#ms
  }

  set(ms) {
    this.#ms = ManualClock.#check(ms, 'ms')
    this.#wake()
    return this.#ms
  }

  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      const sleeper = { at: this.#ms + ms, resolve, reject, signal, onAbort: null }
      if (signal) {
        sleeper.onAbort = () => {
          this.#sleepers = this.#sleepers.filter((s) => s !== sleeper)
          reject(signal.reason)
        }
        signal.addEventListener('abort', sleeper.onAbort, { once: true })
      }
      this.#sleepers.push(sleeper)
      this.#wake()
    })
  }

  #wake() {
    const due = this.#sleepers.filter((s) => s.at <= this.#ms)
    if (due.length === 0) return
    this.#sleepers = this.#sleepers.filter((s) => s.at > this.#ms)
    for (const s of due) {
      if (s.signal) s.signal.removeEventListener('abort', s.onAbort)
      s.resolve()
    }
  }
}

/**
 * The opt-in coarse clock: the kernel's `CLOCK_MONOTONIC_COARSE`, the
 * default clock's timeline read several times more cheaply, in steps of one
 * kernel tick (`resolutionMs`, typically 4 ms). Pass it as the `clock`
 * option: limiters read it natively (no JavaScript call), and it works with
 * `sharedFile` and in a `Stack` beside limiters on the default clock. A
 * limiter on it never grants more than its limit over the clock's own time;
 * against real time, at most `rate × resolution` more over any span (4
 * tokens for 1000/s on a 4 ms tick). Where that matters, keep the default.
 */
class CoarseClock {
  /** The time, in milliseconds on the host's monotonic timeline. */
  now() {
    return NativeClock.coarseNowMs()
  }

  /** How far apart readings step, in milliseconds (the kernel's tick). */
  get resolutionMs() {
    return NativeClock.coarseResolutionMs()
  }
}

function realSleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    // setTimeout rounds down to whole ms; round up so we never wake early.
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort)
      resolve()
    }, Math.ceil(ms))
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
  })
}

// A limiter's time: its JavaScript clock (read, sleep) or, when `read` is
// null, the native monotonic clock.
function timeOf(clock) {
  if (clock === undefined || clock === null) return { clock: undefined, read: null, sleep: realSleep }
  // Read natively, as the default clock is (its identity says which).
  if (clock instanceof CoarseClock) return { clock, read: null, sleep: realSleep }
  if (typeof clock === 'function') return { clock, read: clock, sleep: realSleep }
  if (typeof clock === 'object' && typeof clock.now === 'function') {
    return {
      clock,
      read: () => clock.now(),
      sleep: typeof clock.sleep === 'function' ? (ms, signal) => clock.sleep(ms, signal) : realSleep,
    }
  }
  throw typeError(`clock must be a function returning milliseconds, a ManualClock or a CoarseClock, got ${describe(clock)}`)
}

// Each JavaScript clock's native identity: limiters built with the same clock
// share it, so core can refuse a Stack of members on different clocks.
const clockIds = new WeakMap()
function clockId(clock) {
  if (clock === undefined) return undefined
  let id = clockIds.get(clock)
  if (id === undefined) {
    id = clock instanceof CoarseClock ? NativeClock.coarse() : new NativeClock()
    clockIds.set(clock, id)
  }
  return id
}

// A clock's reading, checked for type and sign; its range is core's.
function readClock(read) {
  const ms = read()
  if (typeof ms !== 'number') throw typeError(`the clock must return a number of milliseconds, got ${describe(ms)}`, 'ERR_RATOMIC_INVALID_CLOCK')
  if (!(ms >= 0)) throw rangeError(`the clock must return a finite number of milliseconds >= 0, got ${ms}`, 'ERR_RATOMIC_INVALID_CLOCK')
  return ms
}

function number(v, name) {
  if (typeof v !== 'number') throw typeError(`${name} must be a number, got ${describe(v)}`)
  return v
}

const STORE_OPTIONS = ['maxKeys', 'maxKeyLen', 'maxKeyBytes', 'reserveKeys', 'eviction', 'sharedFile']

function readOptions(options, allowed) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(`options must be an object, got ${describe(options)}`)
  }
  for (const name of Object.keys(options)) {
    if (!allowed.includes(name)) throw typeError(`unknown option ${JSON.stringify(name)} (expected one of ${allowed.join(', ')})`)
  }
  for (const name of ['maxKeys', 'maxKeyLen', 'maxKeyBytes', 'reserveKeys', 'burst']) {
    if (options[name] !== undefined) number(options[name], name)
  }
  if (options.eviction !== undefined && typeof options.eviction !== 'string') {
    throw typeError(`eviction must be "fair" or "strict", got ${describe(options.eviction)}`)
  }
  if (options.sharedFile !== undefined && typeof options.sharedFile !== 'string') {
    throw typeError(`sharedFile must be a path string, got ${describe(options.sharedFile)}`)
  }
  return options
}

function storeOptions(o) {
  const spec = {}
  for (const name of STORE_OPTIONS) if (o[name] !== undefined) spec[name] = o[name]
  return spec
}

// A window given as milliseconds (windowMs) or a duration string ("1min", "250ms", "s").
function windowRule(algorithm, what, limit, window) {
  if (typeof limit === 'string' && window === undefined) return { algorithm, rate: limit }
  if (typeof limit !== 'number') throw typeError(`${what} limit must be a number or a rate string like "100/min", got ${describe(limit)}`)
  if (typeof window === 'number') return { algorithm, limit, windowMs: window }
  if (typeof window === 'string') return { algorithm, limit, window }
  throw typeError(`${what} windowMs must be a number of milliseconds or a duration string like "1min", got ${describe(window)}`)
}

// How a limiter prints (toString, util.inspect, console.log): its class and
// its rule with units, as core prints rules ("fixed window 5 per 60ms").
function printed(name, parts) {
  return `${name} { ${parts.join(', ')} }`
}

// The drafts headers() writes, by name: the code src/headers.rs reads.
const DRAFTS = { 'draft-11': 0, 'draft-8': 0, 'draft-7': 1, 'draft-6': 2 }

// The options of headers() / problem(): the limit's name (single-rule
// limiters), whether to add the legacy X-RateLimit-* fields and the draft
// the standard ones follow; `format` packs the last two for the native side.
function headerOptions(options, names) {
  if (options === undefined) return { name: 'default', legacy: false, format: 0 }
  const o = readOptions(options, names)
  if (o.name !== undefined && typeof o.name !== 'string') throw typeError(`name must be a string, got ${describe(o.name)}`)
  if (o.legacy !== undefined && typeof o.legacy !== 'boolean') throw typeError(`legacy must be a boolean, got ${describe(o.legacy)}`)
  const draft = o.draft === undefined ? 'draft-11' : o.draft
  if (!Object.hasOwn(DRAFTS, draft)) {
    throw typeError(`draft must be one of ${Object.keys(DRAFTS).map((d) => JSON.stringify(d)).join(', ')}, got ${describe(o.draft)}`)
  }
  const legacy = o.legacy === true
  return { name: o.name === undefined ? 'default' : o.name, legacy, format: (DRAFTS[draft] << 1) | (legacy ? 1 : 0) }
}

// Header lines from the native side as [name, value] pairs.
function pairs(lines) {
  const out = []
  let at = 0
  while (at < lines.length) {
    const end = lines.indexOf('\r\n', at)
    const colon = lines.indexOf(': ', at)
    out.push([lines.slice(at, colon), lines.slice(colon + 2, end)])
    at = end + 2
  }
  return out
}

// headers() / problem() of a one-limit limiter (keyed or direct), over its
// native handle: the decision's fields, flattened, and the limit's name.
function singleHeaders(native, decision, options) {
  const o = headerOptions(options, ['name', 'legacy', 'draft'])
  const d = decisionArg(decision)
  return pairs(native.headers(d.allowed, d.remaining, d.limit, d.retryAfterMs, d.resetAfterMs, o.name, o.format))
}

function singleProblem(native, decision, options) {
  const d = decisionArg(decision)
  const name = headerOptions(options, ['name']).name
  return native.problem(d.allowed, d.remaining, d.limit, d.retryAfterMs, d.resetAfterMs, name)
}

// headers() / problem() of a Redis or PostgreSQL limiter, over its native
// driver: a multi-limit one passes the decision's entries (its limits are
// named already), a single-rule one takes `options.name`.
function backendHeaders(native, multi, decision, options) {
  const o = headerOptions(options, multi ? ['legacy', 'draft'] : ['name', 'legacy', 'draft'])
  const d = decisionArg(decision)
  return pairs(native.headers(d, multi ? entriesArg(d) : undefined, o.name, o.format))
}

function backendProblem(native, multi, decision, options) {
  const o = headerOptions(options, multi ? [] : ['name'])
  const d = decisionArg(decision)
  return native.problem(d, multi ? entriesArg(d) : undefined, o.name)
}

// A Limiter's or a Stack's decision's entries, passed back to headers() / problem().
function entriesArg(d) {
  if (!Array.isArray(d.entries)) throw typeError('decision must be a Limiter or Stack decision (with entries)')
  return d.entries
}

// A decision passed back to headers() / problem(): the object a limiter returned.
function decisionArg(d) {
  if (d === null || typeof d !== 'object') throw typeError(`decision must be a decision object, got ${describe(d)}`)
  return d
}

// The decision of a single-rule limiter, from `o` at `at`.
function single(allowed, o, at) {
  return { allowed, remaining: o[at], limit: o[at + 1], retryAfterMs: o[at + 2], resetAfterMs: o[at + 3] }
}

// The decision of a Limiter or a Stack, from `o` at `at`; entry `i` is
// `names[index]`, its index from core.
function multi(allowed, o, at, names) {
  const n = o[at + ENTRIES]
  const entries = new Array(n)
  const deniedBy = []
  for (let i = 0; i < n; i++) {
    const e = at + FIRST_ENTRY + ENTRY_LEN * i
    const name = names[o[e]]
    const ok = o[e + 1] === 1
    entries[i] = { name, allowed: ok, remaining: o[e + 2], limit: o[e + 3], retryAfterMs: o[e + 4], resetAfterMs: o[e + 5] }
    if (!ok) deniedBy.push(name)
  }
  return { allowed, remaining: o[at], limit: o[at + 1], retryAfterMs: o[at + 2], resetAfterMs: o[at + 3], entries, deniedBy }
}

// A batch's decisions, one after another, each led by `allowed`: in OUT
// (the native call returned how many numbers it wrote) or in the array it
// returned, from index `from`.
function decodeAll(r, decode, from = 0) {
  const [a, length] = typeof r === 'number' ? [OUT, r] : [r, r.length]
  const out = []
  for (let p = from; p < length; p += 1 + FIRST_ENTRY + ENTRY_LEN * a[p + 1 + ENTRIES]) {
    out.push(decode(a[p] === 1, a, p + 1))
  }
  return out
}

// Waits out denials, as core's acquire: returns the allowing decision, or
// the denial once the next wait would take the total past `timeoutMs`.
// `attempt` returns a decision, or a promise of one (ratomic/redis).
async function acquire(attempt, sleep, options) {
  const o = options === undefined ? {} : options
  if (typeof o !== 'object' || o === null) throw typeError(`acquire options must be an object, got ${describe(o)}`)
  const { signal, timeoutMs } = o
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))) {
    throw (typeof timeoutMs !== 'number' ? typeError : rangeError)(`timeoutMs must be a number >= 0, got ${timeoutMs}`)
  }
  let waited = 0
  for (;;) {
    if (signal && signal.aborted) throw signal.reason
    // A synchronous limiter's decision is used at once: awaiting it would let
    // the caller move a ManualClock before this loop's sleep is registered.
    let d = attempt()
    if (typeof d.then === 'function') d = await d
    if (d.allowed || (timeoutMs !== undefined && waited + d.retryAfterMs > timeoutMs)) return d
    await sleep(d.retryAfterMs, signal)
    waited += d.retryAfterMs
  }
}

// The native handle of a limiter (for Stack); set in BaseLimiter's static block.
let nativeOf
// A single-rule limiter's allow(key, cost) handed to `build(allowed,
// remaining, limit, retryAfterMs, resetAfterMs, key)` instead of made into a
// decision object (for the middleware, whose request record is the
// decision); set in KeyedLimiter's static block.
let allowInto
// A stack's members, in order (for the middleware); set in Stack's static block.
let membersOf
// The JavaScript clock a limiter was given (undefined: the monotonic clock).
let clockOf

/**
 * What every limiter offers: the cold operations, on a native handle, with
 * an optional injected clock. The hot ones (allow, peek, refund, reset)
 * live in the subclasses, each calling its own kind's native function.
 */
class BaseLimiter {
  #native
  #time
  #decode
  #many
  #id

  constructor(token, handle, time, decode, many) {
    if (token !== INTERNAL) throw typeError('BaseLimiter is not constructible: use TokenBucket, FixedWindow, SlidingWindow or Limiter')
    this.#native = handle
    this.#time = time
    this.#decode = decode
    this.#many = many
    this.#id = handle.id
  }

  static {
    nativeOf = (limiter) => limiter.#native
    clockOf = (limiter) => limiter.#time.clock
  }

  // The time to pass to a native call: the JavaScript clock's reading, or
  // undefined for the native clock.
  #at() {
    return this.#time.read === null ? undefined : readClock(this.#time.read)
  }

  allowMany(requests) {
    // One clock reading for the whole batch, the native clock's included.
    const at = this.#at()
    const r = at === undefined ? this.#many(this.#id, requests) : this.#many(this.#id, requests, at)
    return decodeAll(r, this.#decode)
  }

  get size() {
    return this.#native.size()
  }

  get memoryBytes() {
    return this.#native.memoryBytes()
  }

  get maxKeyLen() {
    return this.#native.maxKeyLen
  }

  get clock() {
    return this.#time.clock
  }

  now() {
    const t = this.#at()
    return t === undefined ? this.#native.nowMs() : t
  }

  gc(atMs) {
    return this.#native.gc(atMs === undefined ? this.#at() : number(atMs, 'atMs'))
  }

  acquire(key, cost, options) {
    return acquire(() => this.allow(key, cost), this.#time.sleep, options)
  }
}

// The single-rule limiters' hot path: ALLOW_KEYED / OP_KEYED on this id.
class KeyedLimiter extends BaseLimiter {
  #id
  #read
  #native

  constructor(handle, clock) {
    const time = timeOf(clock)
    super(INTERNAL, handle, time, single, MANY_KEYED)
    this.#native = handle
    this.#id = handle.id
    this.#read = time.read
  }

  allow(key, cost) {
    const allowed = this.#allow(key, cost)
    return { allowed, remaining: OUT[0], limit: OUT[1], retryAfterMs: OUT[2], resetAfterMs: OUT[3] }
  }

  // Whether allowed; the numbers in OUT.
  #allow(key, cost) {
    // Pass only the arguments there are: the native side then converts nothing
    // but the key (cost 1 and the native clock are its defaults).
    const read = this.#read
    return read !== null
      ? ALLOW_KEYED(this.#id, key, cost === undefined ? 1 : cost, readClock(read))
      : cost === undefined ? ALLOW_KEYED(this.#id, key) : ALLOW_KEYED(this.#id, key, cost)
  }

  static {
    allowInto = (limiter, key, cost, build) => build(limiter.#allow(key, cost === 1 ? undefined : cost), OUT[0], OUT[1], OUT[2], OUT[3], key)
  }

  #op(code, key, n) {
    const read = this.#read
    return read === null ? OP_KEYED(code, this.#id, key, n) : OP_KEYED(code, this.#id, key, n, readClock(read))
  }

  peek(key, cost) {
    return single(this.#op(OP_PEEK, key, cost === undefined ? 1 : cost), OUT, 0)
  }

  refund(key, tokens) {
    this.#op(OP_REFUND, key, tokens === undefined ? 1 : tokens)
  }

  reset(key) {
    this.#op(OP_RESET, key, 0)
  }

  get limit() {
    return this.#native.rule.limit
  }

  get rule() {
    return this.#native.rule
  }

  headers(decision, options) {
    return singleHeaders(this.#native, decision, options)
  }

  problem(decision, options) {
    return singleProblem(this.#native, decision, options)
  }

  toString() {
    return printed(this.constructor.name, [this.#native.description, `keys: ${this.size}`])
  }

  [inspect.custom]() {
    return this.toString()
  }
}

// The arguments of a token bucket: (capacity, refillPerSec | rate, options)
// or (rate, options with burst).
function tokenBucketRule(capacity, refillPerSec, options, optionNames) {
  if (typeof capacity === 'string') {
    const o = readOptions(refillPerSec, [...optionNames, 'burst'])
    return [{ algorithm: 'tokenBucket', rate: capacity, burst: o.burst }, o]
  }
  if (typeof capacity !== 'number') throw typeError(`capacity must be a number, got ${describe(capacity)}`)
  const o = readOptions(options, optionNames)
  if (typeof refillPerSec === 'number') return [{ algorithm: 'tokenBucket', capacity, refillPerSec }, o]
  if (typeof refillPerSec === 'string') return [{ algorithm: 'tokenBucket', rate: refillPerSec, capacity }, o]
  throw typeError(`refillPerSec must be a number or a rate string like "10/s", got ${describe(refillPerSec)}`)
}

const OPTIONS = ['clock', ...STORE_OPTIONS]

/**
 * A token bucket per key (GCRA): bursts of `capacity`, refilled at
 * `refillPerSec` tokens per second.
 */
class TokenBucket extends KeyedLimiter {
  constructor(capacity, refillPerSec, options) {
    if (capacity === INTERNAL) {
      super(refillPerSec, undefined)
      return
    }
    const [rule, o] = tokenBucketRule(capacity, refillPerSec, options, OPTIONS)
    const time = timeOf(o.clock)
    super(new NativeKeyed(rule, storeOptions(o), clockId(time.clock)), o.clock)
  }

  static fromRate(rate, options) {
    if (typeof rate !== 'string') throw typeError(`rate must be a string like "10/s", got ${describe(rate)}`)
    return new TokenBucket(rate, options)
  }

  static shared(name, capacity, refillPerSec, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const [rule, o] = tokenBucketRule(capacity, refillPerSec, options, STORE_OPTIONS)
    return new TokenBucket(INTERNAL, NativeKeyed.shared(name, rule, storeOptions(o)))
  }
}

// A direct bucket's native handle and JavaScript clock (for Stack); set in
// DirectTokenBucket's static block.
let directOf

/**
 * One token bucket for all traffic, no key (core's DirectTokenBucket): a
 * global limit — all calls to a backend, one outbound API quota — with no
 * key to convert or look up. Built as a TokenBucket is; `clock` is its only
 * option. Decisions, errors and headers are a TokenBucket's.
 */
class DirectTokenBucket {
  #native
  #id
  #time
  #read

  constructor(capacity, refillPerSec, options) {
    let handle
    let clock
    if (capacity === INTERNAL) {
      handle = refillPerSec // a shared bucket: the monotonic clock
    } else {
      const [rule, o] = tokenBucketRule(capacity, refillPerSec, options, ['clock'])
      clock = o.clock
      handle = new NativeDirect(rule, clockId(timeOf(clock).clock))
    }
    this.#native = handle
    this.#id = handle.id
    this.#time = timeOf(clock)
    this.#read = this.#time.read
  }

  static {
    directOf = (d) => ({ native: d.#native, clock: d.#time.clock })
  }

  allow(cost) {
    // As KeyedLimiter's: pass only the arguments there are.
    const read = this.#read
    const allowed = read !== null
      ? ALLOW_DIRECT(this.#id, cost === undefined ? 1 : cost, readClock(read))
      : cost === undefined ? ALLOW_DIRECT(this.#id) : ALLOW_DIRECT(this.#id, cost)
    return { allowed, remaining: OUT[0], limit: OUT[1], retryAfterMs: OUT[2], resetAfterMs: OUT[3] }
  }

  #op(code, n) {
    const read = this.#read
    return read === null ? OP_DIRECT(code, this.#id, n) : OP_DIRECT(code, this.#id, n, readClock(read))
  }

  peek(cost) {
    return single(this.#op(OP_PEEK, cost === undefined ? 1 : cost), OUT, 0)
  }

  refund(tokens) {
    this.#op(OP_REFUND, tokens === undefined ? 1 : tokens)
  }

  reset() {
    // Filling the bucket takes no time: no clock is read (core's reset).
    OP_DIRECT(OP_RESET, this.#id, 0)
  }

  acquire(cost, options) {
    return acquire(() => this.allow(cost), this.#time.sleep, options)
  }

  get limit() {
    return this.#native.rule.limit
  }

  get rule() {
    return this.#native.rule
  }

  get clock() {
    return this.#time.clock
  }

  now() {
    const t = this.#read === null ? undefined : readClock(this.#read)
    return t === undefined ? this.#native.nowMs() : t
  }

  headers(decision, options) {
    return singleHeaders(this.#native, decision, options)
  }

  problem(decision, options) {
    return singleProblem(this.#native, decision, options)
  }

  toString() {
    return printed('DirectTokenBucket', [this.#native.description])
  }

  [inspect.custom]() {
    return this.toString()
  }

  static fromRate(rate, options) {
    if (typeof rate !== 'string') throw typeError(`rate must be a string like "10/s", got ${describe(rate)}`)
    return new DirectTokenBucket(rate, options)
  }

  static shared(name, capacity, refillPerSec, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const [rule] = tokenBucketRule(capacity, refillPerSec, options, [])
    return new DirectTokenBucket(INTERNAL, NativeDirect.shared(name, rule))
  }
}

// The arguments of a window: (limit, window, options) or (rate, options).
function windowArgs(algorithm, what, limit, window, options, optionNames) {
  const stringForm = typeof limit === 'string' && (window === undefined || (typeof window === 'object' && window !== null))
  const o = readOptions(stringForm ? window : options, optionNames)
  return [windowRule(algorithm, what, limit, stringForm ? undefined : window), o]
}

/** At most `limit` calls per key in each fixed window of `window`. */
class FixedWindow extends KeyedLimiter {
  constructor(limit, window, options) {
    if (limit === INTERNAL) {
      super(window, undefined)
      return
    }
    const [rule, o] = windowArgs('fixedWindow', 'FixedWindow', limit, window, options, OPTIONS)
    super(new NativeKeyed(rule, storeOptions(o), clockId(timeOf(o.clock).clock)), o.clock)
  }

  static shared(name, limit, window, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const [rule, o] = windowArgs('fixedWindow', 'FixedWindow', limit, window, options, STORE_OPTIONS)
    return new FixedWindow(INTERNAL, NativeKeyed.shared(name, rule, storeOptions(o)))
  }
}

/** At most `limit` calls per key in any sliding window of `window` (counter approximation). */
class SlidingWindow extends KeyedLimiter {
  constructor(limit, window, options) {
    if (limit === INTERNAL) {
      super(window, undefined)
      return
    }
    const [rule, o] = windowArgs('slidingWindow', 'SlidingWindow', limit, window, options, OPTIONS)
    super(new NativeKeyed(rule, storeOptions(o), clockId(timeOf(o.clock).clock)), o.clock)
  }

  static shared(name, limit, window, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const [rule, o] = windowArgs('slidingWindow', 'SlidingWindow', limit, window, options, STORE_OPTIONS)
    return new SlidingWindow(INTERNAL, NativeKeyed.shared(name, rule, storeOptions(o)))
  }
}

const RULE_KEYS = ['algorithm', 'capacity', 'refillPerSec', 'rate', 'burst', 'limit', 'windowMs', 'window']
const ALGORITHMS = ['tokenBucket', 'fixedWindow', 'slidingWindow']

function limitRule(name, rule) {
  if (typeof name !== 'string') throw typeError(`a limit's name must be a string, got ${describe(name)}`)
  if (typeof rule === 'string') return { name, algorithm: 'tokenBucket', rate: rule }
  if (typeof rule !== 'object' || rule === null) {
    throw typeError(`limit ${JSON.stringify(name)} must be a rate string or a rule object, got ${describe(rule)}`)
  }
  for (const k of Object.keys(rule)) {
    if (k !== 'name' && !RULE_KEYS.includes(k)) throw typeError(`limit ${JSON.stringify(name)}: unknown field ${JSON.stringify(k)} (expected ${RULE_KEYS.join(', ')})`)
  }
  const algorithm = rule.algorithm === undefined ? 'tokenBucket' : rule.algorithm
  if (!ALGORITHMS.includes(algorithm)) {
    throw typeError(`limit ${JSON.stringify(name)}: algorithm must be one of ${ALGORITHMS.join(', ')}, got ${JSON.stringify(algorithm)}`)
  }
  for (const k of ['capacity', 'refillPerSec', 'burst', 'limit', 'windowMs']) {
    if (rule[k] !== undefined && typeof rule[k] !== 'number') throw typeError(`limit ${JSON.stringify(name)}: ${k} must be a number, got ${describe(rule[k])}`)
  }
  if (rule.rate !== undefined && typeof rule.rate !== 'string') throw typeError(`limit ${JSON.stringify(name)}: rate must be a string, got ${describe(rule.rate)}`)
  if (algorithm === 'tokenBucket') {
    const out = { name, algorithm }
    for (const k of ['capacity', 'refillPerSec', 'rate', 'burst']) if (rule[k] !== undefined) out[k] = rule[k]
    return out
  }
  if (rule.rate !== undefined) return { name, algorithm, rate: rule.rate }
  if (rule.window !== undefined && typeof rule.window !== 'string') {
    throw typeError(`limit ${JSON.stringify(name)}: window must be a duration string like "1min", got ${describe(rule.window)} (give milliseconds as windowMs)`)
  }
  if (rule.window !== undefined && rule.windowMs !== undefined) {
    throw typeError(`limit ${JSON.stringify(name)}: give windowMs or window, not both`)
  }
  const window = rule.windowMs !== undefined ? rule.windowMs : rule.window
  return { ...windowRule(algorithm, `limit ${JSON.stringify(name)}:`, rule.limit, window), name }
}

function limitRules(limits) {
  // "10/second;1000/day": token buckets named by their rate strings (core splits and checks them).
  if (typeof limits === 'string') return parseLimits(limits)
  if (Array.isArray(limits)) {
    return limits.map((l) => {
      if (typeof l !== 'object' || l === null) throw typeError(`each limit must be an object with a name, got ${describe(l)}`)
      return limitRule(l.name, l)
    })
  }
  if (typeof limits === 'object' && limits !== null) return Object.entries(limits).map(([n, r]) => limitRule(n, r))
  throw typeError(`limits must be a string like "10/second;1000/day", an object { name: rule } or an array of { name, ...rule }, got ${describe(limits)}`)
}

// Names-lists remembered by one Limiter's select (a bound: the lists are the caller's).
const MAX_REMEMBERED_SELECTIONS = 256

/**
 * Several named limits on the same key, all or nothing: a call is allowed
 * only if every limit allows it, and then every limit is charged.
 */
class Limiter extends BaseLimiter {
  #id
  #read
  #native
  #names
  #clock
  // Shared by a limiter and its selections: views by limit-set bitmask, and
  // by the exact list of names asked for (JSON: unambiguous for any strings).
  #views

  constructor(limits, options, view) {
    let handle
    let clock
    let family
    if (limits === INTERNAL) {
      // A shared limiter (`view` undefined) or a selection (see `select`).
      handle = options
      clock = view === undefined ? undefined : view.clock
      family = view === undefined ? undefined : view.views
    } else {
      const o = readOptions(options, OPTIONS)
      clock = o.clock
      handle = new NativeLimiter(limitRules(limits), storeOptions(o), clockId(timeOf(clock).clock))
    }
    const time = timeOf(clock)
    const names = handle.names
    super(INTERNAL, handle, time, (allowed, o, at) => multi(allowed, o, at, names), MANY_LIMITER)
    this.#native = handle
    this.#id = handle.id
    this.#read = time.read
    this.#names = names
    this.#clock = clock
    this.#views = family === undefined ? { byBits: new Map([[handle.bits, this]]), byNames: new Map() } : family
  }

  allow(key, cost) {
    const read = this.#read
    const allowed = read !== null
      ? ALLOW_LIMITER(this.#id, key, cost === undefined ? 1 : cost, readClock(read))
      : cost === undefined ? ALLOW_LIMITER(this.#id, key) : ALLOW_LIMITER(this.#id, key, cost)
    return multi(allowed, OUT, 0, this.#names)
  }

  #op(code, key, n) {
    const read = this.#read
    return read === null ? OP_LIMITER(code, this.#id, key, n) : OP_LIMITER(code, this.#id, key, n, readClock(read))
  }

  peek(key, cost) {
    return multi(this.#op(OP_PEEK, key, cost === undefined ? 1 : cost), OUT, 0, this.#names)
  }

  refund(key, tokens) {
    this.#op(OP_REFUND, key, tokens === undefined ? 1 : tokens)
  }

  reset(key) {
    this.#op(OP_RESET, key, 0)
  }

  get names() {
    return [...this.#names]
  }

  get rules() {
    const rules = this.#native.rules
    return Object.fromEntries(this.#names.map((n, i) => [n, rules[i]]))
  }

  headers(decision, options) {
    const o = headerOptions(options, ['legacy', 'draft'])
    const d = decisionArg(decision)
    return pairs(this.#native.headers(d, entriesArg(d), o.format))
  }

  problem(decision) {
    const d = decisionArg(decision)
    return this.#native.problem(d, entriesArg(d))
  }

  toString() {
    return printed('Limiter', [this.#native.description, `keys: ${this.size}`])
  }

  [inspect.custom]() {
    return this.toString()
  }

  select(names) {
    if (!Array.isArray(names) || names.some((n) => typeof n !== 'string')) {
      throw typeError(`select takes an array of limit names, got ${describe(names)}`)
    }
    const views = this.#views
    const asked = JSON.stringify(names)
    let view = views.byNames.get(asked)
    if (view === undefined) {
      const bits = this.#native.limitBits(names) // core resolves the names, or throws
      view = views.byBits.get(bits)
      if (view === undefined) {
        view = new Limiter(INTERNAL, this.#native.select(bits), { clock: this.#clock, views })
        views.byBits.set(bits, view)
      }
      if (views.byNames.size < MAX_REMEMBERED_SELECTIONS) views.byNames.set(asked, view)
    }
    return view
  }

  static shared(name, limits, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const o = readOptions(options, STORE_OPTIONS)
    return new Limiter(INTERNAL, NativeLimiter.shared(name, limitRules(limits), storeOptions(o)))
  }
}

// A stack member's native handle and JavaScript clock; null for anything
// that is not a limiter a stack takes.
function stackMember(limiter) {
  if (limiter instanceof BaseLimiter) return { native: nativeOf(limiter), clock: clockOf(limiter) }
  if (limiter instanceof DirectTokenBucket) return directOf(limiter)
  return null
}

/**
 * Limiters on different keys (per IP, per user, global), all or nothing:
 * `stack.allow([ip, user])` passes only if every member allows its key, and
 * then every member is charged. Members stay usable on their own. A
 * DirectTokenBucket member ignores its key (the stack still takes one).
 */
class Stack {
  #native
  #names
  #time
  #members

  constructor(members, options) {
    const list = Array.isArray(members) ? members : members !== null && typeof members === 'object' ? Object.entries(members) : null
    if (list === null) throw typeError(`members must be an object { name: limiter } or an array of [name, limiter], got ${describe(members)}`)
    const parts = list.map((m) => {
      const member = Array.isArray(m) && typeof m[0] === 'string' ? stackMember(m[1]) : null
      if (member === null) {
        throw typeError('each stack member must be a name and a TokenBucket, FixedWindow, SlidingWindow, Limiter or DirectTokenBucket')
      }
      return member
    })
    const o = readOptions(options, ['clock'])
    // One clock for the stack and every member: core refuses members on another.
    const clock = o.clock !== undefined ? o.clock : parts.length > 0 ? parts[0].clock : undefined
    this.#time = timeOf(clock)
    const handles = parts.map((p) => p.native.member())
    this.#native = new NativeStack(list.map((m) => m[0]), handles, clockId(this.#time.clock))
    this.#names = this.#native.names
    this.#members = list.map((m) => m[1])
  }

  static {
    membersOf = (stack) => stack.#members.slice()
  }

  toString() {
    return printed('Stack', this.#names.map((n, i) => `${JSON.stringify(n)}: ${this.#members[i]}`))
  }

  [inspect.custom]() {
    return this.toString()
  }

  #at() {
    return this.#time.read === null ? undefined : readClock(this.#time.read)
  }

  get names() {
    return [...this.#names]
  }

  get clock() {
    return this.#time.clock
  }

  allow(keys, cost) {
    const c = cost === undefined ? 1 : number(cost, 'cost')
    return multi(this.#native.allow(keys, c, this.#at()), OUT, 0, this.#names)
  }

  peek(keys, cost) {
    const c = cost === undefined ? 1 : number(cost, 'cost')
    return multi(this.#native.peek(keys, c, this.#at()), OUT, 0, this.#names)
  }

  refund(keys, tokens) {
    this.#native.refund(keys, tokens === undefined ? 1 : number(tokens, 'tokens'), this.#at())
  }

  reset(keys) {
    this.#native.reset(keys, this.#at())
  }

  acquire(keys, cost, options) {
    return acquire(() => this.allow(keys, cost), this.#time.sleep, options)
  }

  headers(decision, options) {
    const o = headerOptions(options, ['legacy', 'draft'])
    const d = decisionArg(decision)
    return pairs(this.#native.headers(d, entriesArg(d), o.format))
  }

  problem(decision) {
    const d = decisionArg(decision)
    return this.#native.problem(d, entriesArg(d))
  }
}

const QUOTA_FIELDS = ['capacity', 'refillPerSec', 'rate', 'burst']

// A call's quota as the native side reads it: a rate string ("100/min",
// burst = count) or { capacity, refillPerSec } / { rate, burst }.
function quotaSpec(quota) {
  if (typeof quota === 'string') return { algorithm: 'tokenBucket', rate: quota }
  if (quota === null || typeof quota !== 'object' || Array.isArray(quota)) {
    throw typeError(`a quota must be a rate string like "100/min" or { capacity, refillPerSec }, got ${describe(quota)}`)
  }
  const spec = { algorithm: 'tokenBucket' }
  for (const name of Object.keys(quota)) {
    if (!QUOTA_FIELDS.includes(name)) throw typeError(`unknown quota field ${JSON.stringify(name)} (expected one of ${QUOTA_FIELDS.join(', ')})`)
    const v = quota[name]
    if (v === undefined) continue
    if (name === 'rate' ? typeof v !== 'string' : typeof v !== 'number') {
      throw typeError(`quota.${name} must be a ${name === 'rate' ? 'rate string' : 'number'}, got ${describe(v)}`)
    }
    spec[name] = v
  }
  return spec
}

/**
 * Token buckets whose quota comes with each call, one bucket per
 * (quota, key), all in one bounded store: per-customer quotas read from a
 * database. `quotas.allow(key, '100/min')`.
 */
class Quotas {
  #native
  #time

  constructor(options) {
    const o = readOptions(options, OPTIONS)
    this.#time = timeOf(o.clock)
    this.#native = new NativeQuotas(storeOptions(o), clockId(this.#time.clock))
  }

  #at() {
    return this.#time.read === null ? undefined : readClock(this.#time.read)
  }

  allow(key, quota, cost) {
    const c = cost === undefined ? 1 : number(cost, 'cost')
    return single(this.#native.allow(key, quotaSpec(quota), c, this.#at()), OUT, 0)
  }

  peek(key, quota, cost) {
    const c = cost === undefined ? 1 : number(cost, 'cost')
    return single(this.#native.peek(key, quotaSpec(quota), c, this.#at()), OUT, 0)
  }

  refund(key, quota, tokens) {
    this.#native.refund(key, quotaSpec(quota), tokens === undefined ? 1 : number(tokens, 'tokens'), this.#at())
  }

  reset(key, quota) {
    this.#native.reset(key, quotaSpec(quota), this.#at())
  }

  acquire(key, quota, cost, options) {
    return acquire(() => this.allow(key, quota, cost), this.#time.sleep, options)
  }

  headers(decision, quota, options) {
    const o = headerOptions(options, ['name', 'legacy', 'draft'])
    return pairs(this.#native.headers(decisionArg(decision), quotaSpec(quota), o.name, o.format))
  }

  problem(decision, quota, options) {
    return this.#native.problem(decisionArg(decision), quotaSpec(quota), headerOptions(options, ['name']).name)
  }

  gc(atMs) {
    return this.#native.gc(atMs === undefined ? this.#at() : number(atMs, 'atMs'))
  }

  get size() {
    return this.#native.size()
  }

  get memoryBytes() {
    return this.#native.memoryBytes()
  }

  get maxKeyLen() {
    return this.#native.maxKeyLen
  }

  get clock() {
    return this.#time.clock
  }

  now() {
    const t = this.#at()
    return t === undefined ? this.#native.nowMs() : t
  }

  toString() {
    return printed('Quotas', [`buckets: ${this.size}`])
  }

  [inspect.custom]() {
    return this.toString()
  }
}

/** The media type of a `problem()` body, for a 429 response. */
const PROBLEM_CONTENT_TYPE = 'application/problem+json'

module.exports = {
  BaseLimiter, TokenBucket, FixedWindow, SlidingWindow, Limiter, Stack, Quotas, DirectTokenBucket, ManualClock, CoarseClock, PROBLEM_CONTENT_TYPE,
}

// What redis.js shares with this file (argument reading, decision decoding),
// under a symbol no user code names by accident; not part of the API.
Object.defineProperty(module.exports, Symbol.for('ratomic.internals'), {
  value: Object.freeze({
    typeError, rangeError, describe, readOptions, tokenBucketRule, windowArgs, limitRules, decodeAll, single, multi, acquire, realSleep,
    headerOptions, pairs, decisionArg, entriesArg, membersOf, allowInto, backendHeaders, backendProblem,
  }),
})
