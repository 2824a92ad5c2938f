'use strict'
// PostgreSQL-backed limiters through the `pg` Pool you already have:
// `require('ratomic/postgres')`. Every process and host that uses the same
// database and `prefix` shares every key's state.
//
// This file only moves bytes through the user's Pool (or Client): the SQL,
// the parameters, the decoding of rows, the deny cache, the circuit breaker
// and the failure policy are ratomic's Rust engine (crate ratomic-postgres,
// src/postgres.rs), shared with the Rust, C and Python faces; decisions are
// read by the same decoder as the in-memory limiters'.

const ratomic = require('./ratomic.js')
const { NativePostgres } = require('./native.js')
const { inspect } = require('node:util')
const { clientErrorWatcher } = require('./client-errors.js')

const {
  typeError, describe, readOptions, tokenBucketRule, windowArgs, limitRules, decodeAll, single, multi, acquire, realSleep,
  backendHeaders, backendProblem,
} = ratomic[Symbol.for('ratomic.internals')]

const OPTIONS = [
  'client', 'prefix', 'onError', 'denyRetryAfterMs', 'denyCache', 'breakerThreshold', 'breakerCooldownMs', 'maxKeyLen',
  'lease', 'leaseKeys', 'maxInFlight',
]
// Options read here, not by the native driver.
const JS_ONLY = new Set(['client', 'maxInFlight'])
// The most calls one coalesced statement carries.
const MAX_BATCH = 256
const OP_ALLOW = 0
const OP_PEEK = 1
// The advisory lock the migration holds (the Rust client's too).
const MIGRATION_LOCK = '8241996814990533425'

// How a query failed, in the driver's terms: a server error has a severity
// and an SQLSTATE (57014: the statement timed out; 57P and 08: the session
// ended); anything else (ECONNREFUSED, a reset, a pool timeout) is the
// connection.
function failureOf(e) {
  const message = String(e && e.message !== undefined ? e.message : e)
  const code = e && typeof e.code === 'string' ? e.code : ''
  if (code === '57014') return { kind: 'timeout', message }
  if (e && e.severity !== undefined && !code.startsWith('57P') && !code.startsWith('08')) return { kind: 'server', message }
  if (/timeout/i.test(message)) return { kind: 'timeout', message }
  return { kind: 'connection', message }
}

// Statement names for pg: a named statement is parsed once per connection.
const NAMES = new Map()
const nameOf = (sql) => {
  let n = NAMES.get(sql)
  if (n === undefined) NAMES.set(sql, (n = 'ratomic_v1_' + NAMES.size))
  return n
}

// Every column as the server's text (a bigint[] as `{1,2,3}`), parsed
// natively rather than by pg's array parser.
const RAW = { getTypeParser: () => String }

// The one value of the statement's one row, as text; null when no row.
async function run(client, sql, params) {
  const res = await client.query({ name: nameOf(sql), text: sql, values: params, rowMode: 'array', types: RAW })
  return res.rows.length === 1 ? res.rows[0][0] : null
}

// The common call's upsert's $4: cost × T µs, as text. Exact: the product
// stays below 2^61 (the cost is at most the capacity), past a double's
// whole numbers, so a large one is made with BigInt.
function increment(cost, interval, intervalText) {
  const n = cost * interval
  return Number.isSafeInteger(n) ? String(n) : String(BigInt(cost) * BigInt(intervalText))
}

// Runs the statement: its value (`reply`), or how it failed (`failed`, for
// the driver) and the client's error (`cause`).
async function attempt(client, sql, params) {
  try {
    return { reply: await run(client, sql, params), failed: null, cause: undefined }
  } catch (e) {
    return { reply: null, failed: failureOf(e), cause: e }
  }
}

// A failure the driver's policy raised for one call of a coalesced batch,
// as the native calls throw it.
function backendError(message, cause) {
  const err = new Error(message)
  err.code = 'ERR_RATOMIC_BACKEND'
  if (cause !== undefined) err.cause = cause
  return err
}

// How many statements a limiter keeps out at once by default: half the
// pool's connections, rounded up (pg's Pool: options.max, 10 unless set) —
// at 64 in flight on a pool of 4, 2 out ran 5-10% ahead of 4 and of 1 here,
// as in the Rust client; one for a Client, which runs its queries one at a
// time anyway.
function defaultInFlight(client) {
  const max = client.options !== undefined && client.options !== null ? client.options.max : undefined
  if (typeof client.totalCount === 'number') return Math.ceil((Number.isInteger(max) && max > 0 ? max : 10) / 2)
  return 1
}

// Limiters holding leases, given back (best effort) when the event loop
// empties, as ratomic/redis does. Weak: a limiter dropped is forgotten.
const leasing = new Set()
const forget = new FinalizationRegistry((ref) => leasing.delete(ref))
let hooked = false

function giveBackAtExit() {
  // The loop is empty: a limiter holding leases sends its give-backs; their
  // replies bring the loop back here once, with nothing held. A closed
  // client rejects at once: its leases come back when their time passes.
  for (const ref of leasing) {
    const l = ref.deref()
    if (l !== undefined && l.leasesHeld > 0) l.giveBack().catch(() => {})
  }
}

function watchAtExit(limiter) {
  const ref = new WeakRef(limiter)
  leasing.add(ref)
  forget.register(limiter, ref)
  if (!hooked) {
    hooked = true
    process.on('beforeExit', giveBackAtExit)
  }
}

// A pg Pool emits 'error' when one of its idle connections fails (the
// server restarted, pg_terminate_backend, a cut network), a Client when its
// connection fails between queries: a limiter built on one that has no
// 'error' listener adds one that warns (code RATOMIC_POSTGRES_CLIENT_ERROR)
// until the user adds theirs (see client-errors.js). The failed connection
// is the driver's to drop (a Pool opens another for the next statement; a
// Client stays closed); the calls go on by onError while the server cannot
// be reached. The kind is whether it is a Pool: a Pool's warning never hides
// a Client's within the minute.
const watchClientErrors = clientErrorWatcher('RATOMIC_POSTGRES_CLIENT_ERROR', (isPool, what, more) =>
  isPool
    ? `ratomic/postgres: an idle connection of the pg Pool failed (${what}); the Pool has dropped it and connects again for the next statement, and calls answer by onError while PostgreSQL cannot be reached. Add pool.on('error', …) to handle this yourself${more}`
    : `ratomic/postgres: the pg Client's connection failed (${what}); a Client does not reconnect, so this limiter's calls answer by onError from now on: give the limiter a pg Pool, which replaces failed connections, or add client.on('error', …) to handle this yourself${more}`
)

/** The SQL that creates ratomic's table (`UNLOGGED` if asked) and functions. Safe to run again. */
function schema(unlogged = false) {
  return NativePostgres.schema(unlogged === true)
}

/**
 * Runs `schema()` through `client` (a pg Pool or Client) in one transaction,
 * under the advisory lock the other faces take too.
 */
async function migrate(client, options) {
  const unlogged = options !== undefined && options !== null && options.unlogged === true
  const conn = typeof client.connect === 'function' && typeof client.release !== 'function' && client.totalCount !== undefined
    ? await client.connect()
    : client
  try {
    await conn.query('BEGIN')
    try {
      await conn.query('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK])
      await conn.query(schema(unlogged))
      await conn.query('COMMIT')
    } catch (e) {
      await conn.query('ROLLBACK').catch(() => {})
      throw e
    }
  } finally {
    if (conn !== client) conn.release()
  }
}

class PostgresBase {
  #native
  #client
  #decode
  #sources
  #multi
  // The in-memory limiter onError falls back to (undefined: none).
  #local
  // Calls in flight at once share statements: while #maxInFlight
  // statements are out, an allow at the server's time waits in #queue, and
  // the next statement to end sends every waiting call (up to MAX_BATCH) as
  // one batch statement, each decided as it would have been alone.
  #inFlight = 0
  #maxInFlight
  #queue = []
  // Allows at the server's time are begun by beginAllow, their parameters
  // put together here from [prefix, ...callParams] (see the native
  // callParams; null: the limiter leases, every call goes by begin).
  #fastParams = null
  // One token bucket's T in µs (callParams' text, as a number).
  #fastInterval = 0
  // The common call's upsert (no row back: it did not grant).
  #allowStatement

  constructor(rules, o, isLimiter) {
    if (new.target === PostgresBase) throw typeError('PostgresBase is not constructible: use PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow or PostgresLimiter')
    if (o.client === undefined || o.client === null || typeof o.client.query !== 'function') {
      throw typeError(`options.client is required: a pg Pool (or Client), got ${describe(o.client)}`)
    }
    this.#client = o.client
    const native = {}
    for (const k of OPTIONS) {
      if (o[k] !== undefined && !JS_ONLY.has(k)) native[k] = o[k]
    }
    if (o.maxInFlight !== undefined && !(Number.isInteger(o.maxInFlight) && o.maxInFlight >= 1)) {
      throw typeError(`maxInFlight must be a whole number of statements >= 1, got ${describe(o.maxInFlight)}`)
    }
    this.#maxInFlight = o.maxInFlight === undefined ? defaultInFlight(o.client) : o.maxInFlight
    if (native.prefix !== undefined && typeof native.prefix !== 'string') throw typeError(`prefix must be a string, got ${describe(native.prefix)}`)
    if (native.onError !== undefined && typeof native.onError !== 'string') {
      // An in-memory limiter of the same shape to fall back to (as ratomic/redis's onError).
      const want = isLimiter ? ratomic.Limiter : ratomic.BaseLimiter
      if (!(native.onError instanceof want) || (!isLimiter && native.onError instanceof ratomic.Limiter)) {
        throw typeError(
          `onError must be "raise", "allow", "deny", "fallback" or ${isLimiter ? 'a ratomic Limiter' : 'an in-memory TokenBucket, FixedWindow or SlidingWindow'} to fall back to, got ${describe(native.onError)}`
        )
      }
      this.#local = native.onError
      native.onError = 'raise'
    }
    for (const k of ['denyRetryAfterMs', 'denyCache', 'breakerThreshold', 'breakerCooldownMs', 'maxKeyLen', 'leaseKeys']) {
      if (native[k] !== undefined && typeof native[k] !== 'number') throw typeError(`${k} must be a number, got ${describe(native[k])}`)
    }
    if (native.lease !== undefined && typeof native.lease !== 'string' && typeof native.lease !== 'number') {
      throw typeError(`lease must be "off", "auto" or the most tokens a lease may take, got ${describe(native.lease)}`)
    }
    this.#native = new NativePostgres(rules, native)
    this.#sources = this.#native.sources
    if (this.#native.leaseMax !== null) watchAtExit(this)
    else {
      this.#fastParams = [this.#native.prefix, ...this.#native.callParams]
      if (this.#fastParams.length > 5) this.#fastInterval = Number(this.#fastParams[6])
    }
    this.#allowStatement = this.#native.allowStatement
    const names = this.#native.names
    this.#multi = isLimiter
    this.#decode = isLimiter ? (allowed, a, at) => multi(allowed, a, at, names) : single
    // Last: a constructor that throws has changed nothing.
    watchClientErrors(o.client, typeof o.client.totalCount === 'number')
  }

  #answers(answer) {
    const source = this.#sources[answer[0]]
    const out = decodeAll(answer, this.#decode, 1)
    for (const d of out) d.source = source
    return out
  }

  async #decide(op, key, cost, atMs) {
    const fast = this.#fastParams
    // A call begun by beginAllow has an id; one begun by begin is an object.
    let id = -1
    let call
    let statement
    let params
    if (fast !== null && op === OP_ALLOW && atMs === undefined && (typeof key === 'string' || Buffer.isBuffer(key))) {
      // The common call: begun with no parameters made natively.
      const r = this.#native.beginAllow(key, cost)
      if (typeof r !== 'number') return this.#answers(r)[0]
      id = r
      if (this.#inFlight >= this.#maxInFlight) return this.#wait(id)
      const bytes = typeof key === 'string' ? Buffer.from(key, 'utf8') : key
      if (fast.length === 5) {
        statement = fast[1]
        params = ['a', fast[0], bytes, null, String(cost), fast[2], fast[3], fast[4]]
      } else {
        // One token bucket: the upsert (then ratomic_v1_call if it did not grant).
        statement = fast[5]
        params = [fast[0], bytes, null, increment(cost, this.#fastInterval, fast[6]), fast[7]]
      }
    } else {
      call = this.#native.begin(op, key, cost, atMs)
      const answer = call.answer
      if (answer !== null && answer !== undefined) return this.#answers(answer)[0]
      if (this.#inFlight >= this.#maxInFlight && call.coalescible) return this.#wait(this.#native.park(call))
      statement = call.statement
      params = call.params
    }
    let reply = null
    let failed = null
    this.#inFlight++
    try {
      reply = await run(this.#client, statement, params)
      if (reply === null && statement === this.#allowStatement) {
        // The common call's upsert did not grant (a denial: nothing was
        // written): ratomic_v1_call decides, and answers every field.
        if (id >= 0) {
          const f = this.#fastParams
          reply = await run(this.#client, f[1], ['a', f[0], params[1], null, String(cost), f[2], f[3], f[4]])
        } else {
          const general = this.#native.general(call)
          reply = await run(this.#client, general.statement, general.params)
        }
      }
    } catch (e) {
      failed = failureOf(e)
      try {
        return this.#answers(id >= 0 ? this.#native.finishAllow(id, null, failed) : this.#native.finish(call, null, failed))[0]
      } catch (err) {
        err.cause = e
        throw err
      }
    } finally {
      this.#inFlight--
      if (this.#queue.length > 0) this.#drain()
    }
    return this.#answers(id >= 0 ? this.#native.finishAllow(id, reply, null) : this.#native.finish(call, reply, null))[0]
  }

  // A call (its id) that waits for the next statement to end (see #queue).
  #wait(id) {
    return new Promise((resolve, reject) => {
      this.#queue.push({ id, resolve, reject })
    })
  }

  // Sends the waiting calls, a batch statement at a time, while there are
  // some and a statement may go out.
  async #drain() {
    while (this.#queue.length > 0 && this.#inFlight < this.#maxInFlight) {
      const waiting = this.#queue.splice(0, MAX_BATCH)
      this.#inFlight++
      try {
        const batch = this.#native.coalesce(waiting.map((w) => w.id))
        // An array: the breaker opened while they waited (a statement out
        // failed), and the policy answers them, not another wait on a dead
        // server.
        let out = batch
        let cause
        if (!Array.isArray(batch)) {
          const sent = await attempt(this.#client, this.#native.manyStatement, batch.params)
          cause = sent.cause
          out = this.#native.finishCoalesced(batch, sent.reply, sent.failed)
        }
        for (let i = 0; i < waiting.length; i++) {
          const r = out[i]
          if (typeof r === 'string') waiting[i].reject(backendError(r, cause))
          else waiting[i].resolve(this.#answers(r)[0])
        }
      } catch (err) {
        // Nothing above should throw; if it does, nobody waits for ever.
        for (const w of waiting) w.reject(err)
      } finally {
        this.#inFlight--
      }
    }
  }

  async #change(call, refund) {
    const { reply, failed, cause } = await attempt(this.#client, this.#native.statement, call.params)
    try {
      this.#native.finishChange(refund, reply, failed)
    } catch (err) {
      if (cause !== undefined) err.cause = cause
      throw err
    }
  }

  async #many(requests, atMs) {
    const step = this.#native.beginMany(requests, atMs)
    if (Array.isArray(step)) return this.#answers(step)
    const { reply, failed } = await attempt(this.#client, this.#native.manyStatement, step.params)
    return this.#answers(this.#native.finishMany(step, reply, failed))
  }

  // `promise`, or, when it rejects because PostgreSQL failed and onError is
  // an in-memory limiter, that limiter's answer (op null: a batch).
  #guard(promise, op, key, cost) {
    if (this.#local === undefined) return promise
    return promise.catch((err) => {
      if (err.code !== 'ERR_RATOMIC_BACKEND') throw err
      if (op === null) return this.#local.allowMany(key).map((d) => ({ ...d, source: 'fallback' }))
      const d = op === OP_PEEK ? this.#local.peek(key, cost) : this.#local.allow(key, cost)
      d.source = 'fallback'
      return d
    })
  }

  /** Consumes `cost` if every limit allows it, at the server's clock: a Promise of the decision. */
  allow(key, cost = 1) {
    return this.#guard(this.#decide(OP_ALLOW, key, cost, undefined), OP_ALLOW, key, cost)
  }

  /** As `allow` at `nowMs` (milliseconds on your clock). */
  allowAt(key, nowMs, cost = 1) {
    return this.#guard(this.#decide(OP_ALLOW, key, cost, nowMs), OP_ALLOW, key, cost)
  }

  /** What `allow` would answer, changing nothing. */
  peek(key, cost = 1) {
    return this.#guard(this.#decide(OP_PEEK, key, cost, undefined), OP_PEEK, key, cost)
  }

  /** As `peek` at `nowMs`. */
  peekAt(key, nowMs, cost = 1) {
    return this.#guard(this.#decide(OP_PEEK, key, cost, nowMs), OP_PEEK, key, cost)
  }

  /** Gives `tokens` back to every limit on `key` (never above full); into this process's own lease of `key` first, if it can take them. */
  async refund(key, tokens) {
    if (this.#native.refundLease(key, tokens)) return
    return this.#change(this.#native.beginRefund(key, tokens, undefined), true)
  }

  /** As `refund` at `nowMs`. */
  async refundAt(key, nowMs, tokens) {
    return this.#change(this.#native.beginRefund(key, tokens, nowMs), true)
  }

  /** Forgets `key`: every limit is full again. */
  async reset(key) {
    return this.#change(this.#native.beginReset(key), false)
  }

  /** Decides every request (a key, or `[key, cost]`) in one statement, in order. */
  allowMany(requests) {
    return this.#guard(this.#many(requests, undefined), null, requests)
  }

  /** As `allowMany`, every request at `nowMs`. */
  allowManyAt(requests, nowMs) {
    return this.#guard(this.#many(requests, nowMs), null, requests)
  }

  /** Waits until `key` grants `cost` (options: `timeoutMs`, `signal`), as the in-memory `acquire`. */
  acquire(key, cost = 1, options) {
    return acquire(() => this.allow(key, cost), realSleep, options)
  }

  /** Removes this prefix's rows that are full again at the server's time; how many. Nothing calls it unless you do. */
  async gc(nowMs) {
    const r = await run(this.#client, this.#native.gcStatement, [this.#native.prefix, this.#native.atUs(nowMs), 10000])
    return Number(r)
  }

  /** The pg Pool (or Client) the statements run through. */
  get client() {
    return this.#client
  }

  /** The row prefix. */
  get prefix() {
    return this.#native.prefix
  }

  /** The largest cost a call may ask (the smallest limit). */
  get limit() {
    return this.#native.limit
  }

  /** Whether the circuit breaker is open. */
  get breakerOpen() {
    return this.#native.breakerOpen
  }

  /**
   * Gives back the unused tokens of every lease this limiter holds, so other processes can have
   * them now rather than when their time passes; resolves with how many limits took tokens back.
   * Also tried when the event loop empties. Later calls take new leases.
   */
  async giveBack() {
    const native = this.#native
    let back = 0
    for (const params of native.beginGiveBacks()) {
      const { reply, failed, cause } = await attempt(this.#client, native.giveBackStatement, params)
      try {
        back += native.finishGiveBack(reply, failed)
      } catch (err) {
        if (cause !== undefined) err.cause = cause
        throw err
      }
    }
    return back
  }

  /** The most tokens a lease takes (`lease: 'auto'`: an eighth of the smallest burst), or null when this limiter leases none. */
  get lease() {
    return this.#native.leaseMax
  }

  /** Keys this process holds a lease on now. */
  get leasesHeld() {
    return this.#native.leasesHeld
  }

  /**
   * The HTTP header fields for one of this limiter's decisions, as
   * `[name, value]` pairs, formatted as the in-memory limiters' `headers()`
   * (`options.name` names a single rule's limit; a `PostgresLimiter`'s limits
   * are named already).
   */
  headers(decision, options) {
    return backendHeaders(this.#native, this.#multi, decision, options)
  }

  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`, or null when it was allowed. */
  problem(decision, options) {
    return backendProblem(this.#native, this.#multi, decision, options)
  }

  /** The class, the rule(s) with their units and the prefix: `PostgresFixedWindow { fixed window 5 per 1m, prefix: "ratomic" }`. */
  toString() {
    return `${this.constructor.name} { ${this.#native.description}, prefix: ${JSON.stringify(this.#native.prefix)} }`
  }

  [inspect.custom]() {
    return this.toString()
  }
}

/** A token bucket (GCRA) per key, in PostgreSQL: the arguments of `TokenBucket`, with `client` and the options. */
class PostgresTokenBucket extends PostgresBase {
  constructor(capacity, refillPerSec, options) {
    const [rule, o] = tokenBucketRule(capacity, refillPerSec, options, OPTIONS)
    super([rule], o, false)
  }
}

/** A fixed window per key, in PostgreSQL: the arguments of `FixedWindow`. */
class PostgresFixedWindow extends PostgresBase {
  constructor(limit, window, options) {
    const [rule, o] = windowArgs('fixedWindow', 'PostgresFixedWindow', limit, window, options, OPTIONS)
    super([rule], o, false)
  }
}

/** A sliding window per key, in PostgreSQL: the arguments of `SlidingWindow`. */
class PostgresSlidingWindow extends PostgresBase {
  constructor(limit, window, options) {
    const [rule, o] = windowArgs('slidingWindow', 'PostgresSlidingWindow', limit, window, options, OPTIONS)
    super([rule], o, false)
  }
}

/** Several named limits on each key, all or nothing, in PostgreSQL (one row per key): the arguments of `Limiter`. */
class PostgresLimiter extends PostgresBase {
  #names

  constructor(limits, options) {
    const rules = limitRules(limits)
    super(rules, readOptions(options, OPTIONS), true)
    this.#names = rules.map((r) => r.name)
  }

  /** The limits' names, in order. */
  get names() {
    return this.#names.slice()
  }
}

module.exports = { PostgresBase, PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow, PostgresLimiter, schema, migrate }
