'use strict'
// The public API of the `ratomic` package. The limiters live in Rust (see
// src/ and the generated index.js / index.d.ts); this file checks arguments,
// reads injected clocks, and builds the Decision objects in JavaScript,
// because V8 creates a plain object literal far faster than N-API can.

const { NativeLimiter, NativeStack, OUT_LEN, noop } = require('./index.js')

// Slots of the output buffer (see src/engine.rs `slot`).
const REMAINING = 0
const LIMIT = 1
const RETRY = 2
const RESET = 3
const ENTRIES = 4
const FIRST_ENTRY = 5
const ENTRY_LEN = 6
const OP_PEEK = 1
const OP_REFUND = 2
const OP_RESET = 3

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

  /** The current time, in milliseconds. */
  now() {
    return this.#ms
  }

  /** Moves the clock forward by `ms` milliseconds (>= 0). */
  advance(ms) {
    ManualClock.#check(ms, 'ms')
    this.#ms += ms
    this.#wake()
    return this.#ms
  }

  /** Sets the clock to `ms`; it may go backwards (limiters never grant more for it). */
  set(ms) {
    this.#ms = ManualClock.#check(ms, 'ms')
    this.#wake()
    return this.#ms
  }

  /**
   * Resolves once the clock reaches now + `ms`, or rejects with the signal's
   * reason when `signal` aborts. Used by `acquire`.
   */
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

function readOptions(options, allowed) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(`options must be an object, got ${describe(options)}`)
  }
  for (const name of Object.keys(options)) {
    if (!allowed.includes(name)) throw typeError(`unknown option ${JSON.stringify(name)} (expected one of ${allowed.join(', ')})`)
  }
  for (const name of ['maxKeys', 'maxKeyLen', 'burst']) {
    if (options[name] !== undefined && typeof options[name] !== 'number') {
      throw typeError(`${name} must be a number, got ${describe(options[name])}`)
    }
  }
  return options
}

function clockOf(clock) {
  if (clock === undefined || clock === null) return null
  if (typeof clock === 'function') return { read: clock, sleep: null }
  if (typeof clock === 'object' && typeof clock.now === 'function') {
    return {
      read: () => clock.now(),
      sleep: typeof clock.sleep === 'function' ? (ms, signal) => clock.sleep(ms, signal) : null,
    }
  }
  throw typeError(`clock must be a function returning milliseconds or a ManualClock, got ${describe(clock)}`)
}

function readClock(read) {
  const ms = read()
  if (typeof ms !== 'number') throw typeError(`the clock must return a number of milliseconds, got ${describe(ms)}`, 'ERR_RATOMIC_INVALID_CLOCK')
  if (!(ms >= 0) || ms === Infinity) throw rangeError(`the clock must return a finite number of milliseconds >= 0, got ${ms}`, 'ERR_RATOMIC_INVALID_CLOCK')
  return ms
}

function checkCost(cost, name = 'cost') {
  if (cost === undefined) return 1
  if (typeof cost !== 'number') throw typeError(`${name} must be a number, got ${describe(cost)}`)
  return cost
}

function storeOptions(o) {
  const spec = {}
  if (o.maxKeys !== undefined) spec.maxKeys = o.maxKeys
  if (o.maxKeyLen !== undefined) spec.maxKeyLen = o.maxKeyLen
  return spec
}

// A window given as milliseconds or a duration string ("1min", "250ms", "s").
function windowRule(algorithm, what, limit, window) {
  if (typeof limit === 'string' && window === undefined) return { name: '', algorithm, rate: limit }
  if (typeof limit !== 'number') throw typeError(`${what} limit must be a number or a rate string like "100/min", got ${describe(limit)}`)
  if (typeof window === 'number') return { name: '', algorithm, limit, windowMs: window }
  if (typeof window === 'string') {
    if (!Number.isInteger(limit) || limit < 1) throw rangeError(`invalid limit: ${limit} (must be a whole number >= 1)`)
    return { name: '', algorithm, rate: `${limit}/${window.trim()}` }
  }
  throw typeError(`${what} window must be a number of milliseconds or a duration string like "1min", got ${describe(window)}`)
}

let outOf

/**
 * What every limiter shares: allow/peek/reset/refund/allowMany/acquire on
 * a native handle, with an optional injected clock.
 */
class BaseLimiter {
  #native
  #allow
  #op
  #out
  #read
  #sleep
  #clock

  constructor(nativeHandle, clock) {
    const c = clockOf(clock)
    this.#clock = clock
    this.#native = nativeHandle
    this.#out = new Float64Array(new ArrayBuffer(OUT_LEN * 8))
    this.#allow = nativeHandle.bindAllow(this.#out)
    this.#op = nativeHandle.bindOp(this.#out)
    this.#read = c === null ? null : c.read
    this.#sleep = c === null ? null : c.sleep
  }

  /** @internal the limiter's time in ms, or -1 for its native monotonic clock. */
  _now() {
    return this.#read === null ? -1 : readClock(this.#read)
  }

  /** @internal */
  _decision(allowed) {
    const o = this.#out
    return { allowed, remaining: o[REMAINING], limit: o[LIMIT], retryAfterMs: o[RETRY], resetAfterMs: o[RESET] }
  }

  /** @internal */
  get _native() {
    return this.#native
  }

  /** @internal the clock this limiter was given (undefined for its monotonic clock). */
  get _clock() {
    return this.#clock
  }

  static {
    // The output buffer never leaves this module: detaching its ArrayBuffer
    // (by transferring it) would leave the native side a dangling pointer.
    outOf = (limiter) => limiter.#out
  }

  allow(key, cost) {
    // Pass only the arguments there are: the native side then converts nothing
    // but the key (cost 1 and its own monotonic clock are its defaults).
    const allowed = this.#read !== null
      ? this.#allow(key, cost === undefined ? 1 : cost, readClock(this.#read))
      : cost === undefined ? this.#allow(key) : this.#allow(key, cost)
    const o = this.#out
    return { allowed, remaining: o[REMAINING], limit: o[LIMIT], retryAfterMs: o[RETRY], resetAfterMs: o[RESET] }
  }

  peek(key, cost) {
    const allowed = this.#op(OP_PEEK, key, cost === undefined ? 1 : cost, this._now())
    return this._decision(allowed)
  }

  refund(key, tokens) {
    this.#op(OP_REFUND, key, checkCost(tokens, 'tokens'), this._now())
  }

  reset(key) {
    this.#op(OP_RESET, key, 0, this._now())
  }

  allowMany(requests) {
    if (!Array.isArray(requests)) throw typeError(`allowMany takes an array of keys or [key, cost] pairs, got ${describe(requests)}`)
    // One clock reading for the whole batch, the native clock's included.
    const now = this.#read === null ? this.#native.nowMs() : readClock(this.#read)
    const pairs = requests.map((r) => (Array.isArray(r) ? [r[0], r[1] === undefined ? 1 : r[1]] : [r, 1]))
    // Check every pair first (a peek changes nothing), so a bad pair throws
    // before any key is charged.
    for (const [key, cost] of pairs) this.#op(OP_PEEK, key, cost, now)
    return pairs.map(([key, cost]) => this._decision(this.#allow(key, cost, now)))
  }

  get size() {
    return this.#native.size()
  }

  gc() {
    return this.#native.gc(this._now())
  }

  async acquire(key, cost, options) {
    const o = options === undefined ? {} : options
    if (typeof o !== 'object' || o === null) throw typeError(`acquire options must be an object, got ${describe(o)}`)
    const { signal, timeoutMs } = o
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))) {
      throw (typeof timeoutMs !== 'number' ? typeError : rangeError)(`timeoutMs must be a number >= 0, got ${timeoutMs}`)
    }
    const clockMs = () => (this.#read === null ? this.#native.nowMs() : readClock(this.#read))
    const sleep = this.#sleep === null ? realSleep : this.#sleep
    const deadline = timeoutMs === undefined ? Infinity : clockMs() + timeoutMs
    for (;;) {
      if (signal && signal.aborted) throw signal.reason
      const d = this.allow(key, cost)
      if (d.allowed) return d
      if (clockMs() + d.retryAfterMs > deadline) {
        const e = new Error(`acquire timed out: the key needs ${d.retryAfterMs} ms more, beyond timeoutMs ${timeoutMs}`)
        e.code = 'ERR_RATOMIC_TIMEOUT'
        e.decision = d
        throw e
      }
      await sleep(d.retryAfterMs, signal)
    }
  }
}

/**
 * A token bucket per key (GCRA): bursts of `capacity`, refilled at
 * `refillPerSec` tokens per second.
 */
class TokenBucket extends BaseLimiter {
  constructor(capacity, refillPerSec, options) {
    let rule
    let o
    if (typeof capacity === 'string') {
      o = readOptions(refillPerSec, ['clock', 'maxKeys', 'maxKeyLen', 'burst'])
      rule = { name: '', algorithm: 'tokenBucket', rate: capacity, burst: o.burst }
    } else {
      if (typeof capacity !== 'number') throw typeError(`capacity must be a number, got ${describe(capacity)}`)
      o = readOptions(options, ['clock', 'maxKeys', 'maxKeyLen'])
      if (typeof refillPerSec === 'number') rule = { name: '', algorithm: 'tokenBucket', capacity, refillPerSec }
      else if (typeof refillPerSec === 'string') rule = { name: '', algorithm: 'tokenBucket', rate: refillPerSec, capacity }
      else throw typeError(`refillPerSec must be a number or a rate string like "10/s", got ${describe(refillPerSec)}`)
    }
    super(new NativeLimiter({ multi: false, rules: [rule], ...storeOptions(o) }), o.clock)
  }

  /** A token bucket from a rate string: `"10/s"` is a burst of 10 refilled over a second. */
  static fromRate(rate, options) {
    if (typeof rate !== 'string') throw typeError(`rate must be a string like "10/s", got ${describe(rate)}`)
    return new TokenBucket(rate, options)
  }

  /** The process-wide token bucket `name`, shared by every worker thread. */
  static shared(name, capacity, refillPerSec, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    let rule
    let o
    if (typeof capacity === 'string') {
      o = readOptions(refillPerSec, ['maxKeys', 'maxKeyLen', 'burst'])
      rule = { name: '', algorithm: 'tokenBucket', rate: capacity, burst: o.burst }
    } else {
      if (typeof capacity !== 'number') throw typeError(`capacity must be a number, got ${describe(capacity)}`)
      if (typeof refillPerSec !== 'number' && typeof refillPerSec !== 'string') {
        throw typeError(`refillPerSec must be a number or a rate string like "10/s", got ${describe(refillPerSec)}`)
      }
      o = readOptions(options, ['maxKeys', 'maxKeyLen'])
      rule = typeof refillPerSec === 'number'
        ? { name: '', algorithm: 'tokenBucket', capacity, refillPerSec }
        : { name: '', algorithm: 'tokenBucket', rate: refillPerSec, capacity }
    }
    return adopt(TokenBucket, NativeLimiter.shared(name, { multi: false, rules: [rule], ...storeOptions(o) }))
  }
}

// Builds an instance of a limiter class around an existing native handle.
function adopt(Cls, nativeHandle) {
  return Reflect.construct(Handle, [nativeHandle], Cls)
}

// The constructor `adopt` runs instead of the public one.
function Handle(nativeHandle) {
  return Reflect.construct(BaseLimiter, [nativeHandle, undefined], new.target)
}

/** At most `limit` calls per key in each fixed window of `window`. */
class FixedWindow extends BaseLimiter {
  constructor(limit, window, options) {
    const stringForm = typeof limit === 'string' && (window === undefined || (typeof window === 'object' && window !== null))
    const o = readOptions(stringForm ? window : options, ['clock', 'maxKeys', 'maxKeyLen'])
    const rule = windowRule('fixedWindow', 'FixedWindow', limit, stringForm ? undefined : window)
    super(new NativeLimiter({ multi: false, rules: [rule], ...storeOptions(o) }), o.clock)
  }

  /** The process-wide fixed window `name`, shared by every worker thread. */
  static shared(name, limit, window, options) {
    return sharedWindow(FixedWindow, 'fixedWindow', name, limit, window, options)
  }
}

/** At most `limit` calls per key in any sliding window of `window` (counter approximation). */
class SlidingWindow extends BaseLimiter {
  constructor(limit, window, options) {
    const stringForm = typeof limit === 'string' && (window === undefined || (typeof window === 'object' && window !== null))
    const o = readOptions(stringForm ? window : options, ['clock', 'maxKeys', 'maxKeyLen'])
    const rule = windowRule('slidingWindow', 'SlidingWindow', limit, stringForm ? undefined : window)
    super(new NativeLimiter({ multi: false, rules: [rule], ...storeOptions(o) }), o.clock)
  }

  /** The process-wide sliding window `name`, shared by every worker thread. */
  static shared(name, limit, window, options) {
    return sharedWindow(SlidingWindow, 'slidingWindow', name, limit, window, options)
  }
}

function sharedWindow(Cls, algorithm, name, limit, window, options) {
  if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
  const stringForm = typeof limit === 'string' && (window === undefined || (typeof window === 'object' && window !== null))
  const o = readOptions(stringForm ? window : options, ['maxKeys', 'maxKeyLen'])
  const rule = windowRule(algorithm, Cls.name, limit, stringForm ? undefined : window)
  return adopt(Cls, NativeLimiter.shared(name, { multi: false, rules: [rule], ...storeOptions(o) }))
}

const RULE_KEYS = ['algorithm', 'capacity', 'refillPerSec', 'rate', 'burst', 'limit', 'window']
const ALGORITHMS = ['tokenBucket', 'fixedWindow', 'slidingWindow']

function limitRule(name, rule) {
  if (typeof name !== 'string' || name === '') throw typeError(`a limit's name must be a non-empty string, got ${describe(name)}`)
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
  for (const k of ['capacity', 'refillPerSec', 'burst', 'limit']) {
    if (rule[k] !== undefined && typeof rule[k] !== 'number') throw typeError(`limit ${JSON.stringify(name)}: ${k} must be a number, got ${describe(rule[k])}`)
  }
  if (rule.rate !== undefined && typeof rule.rate !== 'string') throw typeError(`limit ${JSON.stringify(name)}: rate must be a string, got ${describe(rule.rate)}`)
  if (algorithm === 'tokenBucket') {
    const out = { name, algorithm }
    for (const k of ['capacity', 'refillPerSec', 'rate', 'burst']) if (rule[k] !== undefined) out[k] = rule[k]
    return out
  }
  if (rule.rate !== undefined) return { name, algorithm, rate: rule.rate }
  return { ...windowRule(algorithm, `limit ${JSON.stringify(name)}:`, rule.limit, rule.window), name }
}

function limitRules(limits) {
  if (Array.isArray(limits)) {
    return limits.map((l) => {
      if (typeof l !== 'object' || l === null) throw typeError(`each limit must be an object with a name, got ${describe(l)}`)
      return limitRule(l.name, l)
    })
  }
  if (typeof limits === 'object' && limits !== null) return Object.entries(limits).map(([n, r]) => limitRule(n, r))
  throw typeError(`limits must be an object { name: rule } or an array of { name, ...rule }, got ${describe(limits)}`)
}

/**
 * Several named limits on the same key, all or nothing: a call is allowed
 * only if every limit allows it, and then every limit is charged.
 */
class Limiter extends BaseLimiter {
  #names
  #selections = new Map()
  #clock

  constructor(limits, options) {
    if (limits instanceof NativeLimiter) {
      // Internal: a selection of an existing limiter (see `select`).
      super(limits, options)
      this.#clock = options
    } else {
      const o = readOptions(options, ['clock', 'maxKeys', 'maxKeyLen'])
      super(new NativeLimiter({ multi: true, rules: limitRules(limits), ...storeOptions(o) }), o.clock)
      this.#clock = o.clock
    }
    this.#names = this._native.names
  }

  /** The limit names, in order. */
  get names() {
    return [...this.#names]
  }

  /**
   * A view of this limiter (same keys, same state) whose calls are subject
   * only to the named limits: per-request limit selection.
   */
  select(names) {
    if (!Array.isArray(names) || names.some((n) => typeof n !== 'string')) {
      throw typeError(`select takes an array of limit names, got ${describe(names)}`)
    }
    const id = names.join('\u0000')
    let view = this.#selections.get(id)
    if (view === undefined) {
      view = new Limiter(this._native.select(names), this.#clock)
      this.#selections.set(id, view)
    }
    return view
  }

  _decision(allowed) {
    const o = outOf(this)
    const n = o[ENTRIES]
    const entries = new Array(n)
    const deniedBy = []
    for (let i = 0; i < n; i++) {
      const at = FIRST_ENTRY + ENTRY_LEN * i
      const name = this.#names[o[at]]
      const ok = o[at + 1] === 1
      entries[i] = { name, allowed: ok, remaining: o[at + 2], limit: o[at + 3], retryAfterMs: o[at + 4], resetAfterMs: o[at + 5] }
      if (!ok) deniedBy.push(name)
    }
    return { allowed, remaining: o[REMAINING], limit: o[LIMIT], retryAfterMs: o[RETRY], resetAfterMs: o[RESET], entries, deniedBy }
  }

  allow(key, cost) {
    return this._decision(super.allow(key, cost).allowed)
  }

  /** The process-wide Limiter `name`, shared by every worker thread. */
  static shared(name, limits, options) {
    if (typeof name !== 'string') throw typeError(`name must be a string, got ${describe(name)}`)
    const o = readOptions(options, ['maxKeys', 'maxKeyLen'])
    return new Limiter(NativeLimiter.shared(name, { multi: true, rules: limitRules(limits), ...storeOptions(o) }), undefined)
  }
}

function entriesDecision(v, names) {
  // v = [allowed, remaining, limit, retryAfterMs, resetAfterMs, entryCount, ...entries]
  const n = v[1 + ENTRIES]
  const entries = new Array(n)
  const deniedBy = []
  for (let i = 0; i < n; i++) {
    const at = 1 + FIRST_ENTRY + ENTRY_LEN * i
    const name = names[v[at]]
    const ok = v[at + 1] === 1
    entries[i] = { name, allowed: ok, remaining: v[at + 2], limit: v[at + 3], retryAfterMs: v[at + 4], resetAfterMs: v[at + 5] }
    if (!ok) deniedBy.push(name)
  }
  return { allowed: v[0] === 1, remaining: v[1 + REMAINING], limit: v[1 + LIMIT], retryAfterMs: v[1 + RETRY], resetAfterMs: v[1 + RESET], entries, deniedBy }
}

/**
 * Limiters on different keys (per IP, per user, global), all or nothing:
 * `stack.allow([ip, user])` passes only if every member allows its key, and
 * then every member is charged. Members stay usable on their own.
 */
class Stack {
  #native
  #names
  #read

  constructor(members, options) {
    const list = Array.isArray(members) ? members : members !== null && typeof members === 'object' ? Object.entries(members) : null
    if (list === null) throw typeError(`members must be an object { name: limiter } or an array of [name, limiter], got ${describe(members)}`)
    for (const m of list) {
      if (!Array.isArray(m) || typeof m[0] !== 'string' || !(m[1] instanceof BaseLimiter)) {
        throw typeError('each stack member must be a name and a TokenBucket, FixedWindow, SlidingWindow or Limiter')
      }
    }
    const o = readOptions(options, ['clock'])
    // The stack reads one clock for the whole call and passes it to every
    // member: by default the first member's, so members on one clock agree.
    const clock = 'clock' in o ? o.clock : list.length > 0 ? list[0][1]._clock : undefined
    const c = clockOf(clock)
    this.#native = new NativeStack(list.map((m) => m[0]), list.map((m) => m[1]._native))
    this.#names = this.#native.names
    this.#read = c === null ? null : c.read
  }

  /** The member names, in order. */
  get names() {
    return [...this.#names]
  }

  #keys(keys) {
    if (!Array.isArray(keys)) throw typeError(`keys must be an array with one key per member, got ${describe(keys)}`)
    for (const k of keys) {
      if (typeof k !== 'string' && !Buffer.isBuffer(k)) {
        throw typeError(`key must be a string or a Buffer, got ${describe(k)}`, 'ERR_RATOMIC_INVALID_KEY')
      }
    }
    return keys
  }

  /** Charges `cost` (default 1) to every member, member `i` on `keys[i]`, all or nothing. */
  allow(keys, cost) {
    const k = this.#keys(keys)
    const c = checkCost(cost)
    return entriesDecision(this.#native.allow(k, c, this.#read === null ? -1 : readClock(this.#read)), this.#names)
  }

  /** Answers like `allow` and changes nothing. */
  peek(keys, cost) {
    const k = this.#keys(keys)
    const c = checkCost(cost)
    return entriesDecision(this.#native.peek(k, c, this.#read === null ? -1 : readClock(this.#read)), this.#names)
  }
}

module.exports = { BaseLimiter, TokenBucket, FixedWindow, SlidingWindow, Limiter, Stack, ManualClock, OUT_LEN, noop }
