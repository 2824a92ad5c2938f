'use strict'
// Redis-backed limiters through the Redis client you already have:
// `require('ratomic/redis')`. Every process and host that uses the same
// Redis server and `prefix` shares every key's state.
//
// This file only moves bytes through the user's ioredis or node-redis
// client: the script, the key layout, the arguments, the decoding of
// replies, the deny cache, the circuit breaker and the failure policy are
// ratomic's Rust engine (crate ratomic-redis, src/redis.rs), shared with
// the Rust, C and Python faces; decisions are read by the same decoder as
// the in-memory limiters'.

const ratomic = require('./ratomic.js')
const { NativeRedis, hotPath } = require('./native.js')
// The hot path's functions and output buffer, for this thread (see src/hot.rs).
const HOT = hotPath()
const { inspect } = require('node:util')
const { clientErrorWatcher } = require('./client-errors.js')

const {
  typeError, rangeError, describe, readOptions, tokenBucketRule, windowArgs, limitRules, decodeAll, single, multi, acquire, realSleep,
  backendHeaders, backendProblem,
} = ratomic[Symbol.for('ratomic.internals')]

const OPTIONS = [
  'client', 'prefix', 'timeoutMs', 'onError', 'denyRetryAfterMs', 'denyCache', 'breakerThreshold', 'breakerCooldownMs',
  'breakerFailureTimeMs', 'maxKeyLen', 'lease', 'leaseKeys',
]
const OP_ALLOW = 0
const OP_PEEK = 1

// The most decisions one coalesced round trip carries.
const MAX_BATCH = 256
// How many round trips a waiting call is held back for a lease on its way
// to its key (then it goes to Redis itself): up to FREE_DEFERS whatever came
// of them, then up to MAX_DEFERS while its key's leases keep answering calls
// — a lease call granted in the last round trip, or a lease answering calls
// in this one (as in Rust's client). A lease call that keeps being denied
// holds no one long: the deny cache answers its waiters.
const FREE_DEFERS = 8
const MAX_DEFERS = 64

// A Redis key (a string, or a Buffer when it is not UTF-8) as a Map key.
const keyId = (rkey) => (typeof rkey === 'string' ? rkey : 'b:' + rkey.toString('hex'))

const TIMED_OUT = Symbol('timed out')

// How a client failed, in the driver's terms.
function kindOf(e) {
  if (e === TIMED_OUT) return 'timeout'
  const name = e && e.constructor && e.constructor.name
  if (name === 'ReplyError' || name === 'ErrorReply' || (e && e.name === 'ReplyError')) return 'server'
  return 'connection'
}

function messageOf(e) {
  if (e === TIMED_OUT) return 'timed out'
  return String(e && e.message !== undefined ? e.message : e)
}

// How sending failed, as the native driver reads it.
function failureOf(e) {
  return { kind: kindOf(e), message: messageOf(e) }
}

function isNoScript(e) {
  return e !== TIMED_OUT && messageOf(e).startsWith('NOSCRIPT')
}

// The script's reply as the driver reads it: an array of integers, else null.
function replyOf(r) {
  return Array.isArray(r) && r.every(Number.isInteger) ? r : null
}

// Copies the script's reply into `io` for the driver: its length, or -1 if
// it is not an array of integers (or too long to be one).
function replyInto(io, r) {
  if (!Array.isArray(r) || r.length > io.length) return -1
  for (let i = 0; i < r.length; i++) {
    if (!Number.isInteger(r[i])) return -1
    io[i] = r[i]
  }
  return r.length
}

// The EVAL form of an EVALSHA call (args: sha, numkeys, key, ...argv): a
// server that forgot the script (restarted, flushed; NOSCRIPT: nothing ran)
// runs it from source on the node that owns the key, and caches it.
function evalArgs(args, source) {
  return [source, ...args.slice(1)]
}

// The operations a limiter needs, over an ioredis or a node-redis client.
function transportOf(client) {
  if (client !== null && typeof client === 'object') {
    if (typeof client.call === 'function' && typeof client.pipeline === 'function') {
      // ioredis (Redis or Cluster): `call` routes by key in a cluster.
      const send = (command, args) => client.call(command, ...args)
      return {
        send,
        del: (key) => client.del(key),
        async many(command, argsList) {
          if (client.isCluster) return Promise.allSettled(argsList.map((a) => send(command, a)))
          const p = client.pipeline()
          for (const a of argsList) p.call(command, ...a)
          const results = await p.exec()
          return results.map(([err, value]) => (err ? { status: 'rejected', reason: err } : { status: 'fulfilled', value }))
        },
      }
    }
    if (typeof client.sendCommand === 'function' && !Array.isArray(client.masters)) {
      // node-redis v4+ (a standalone client): commands issued in one tick go out in one pipeline.
      const send = (command, args) => client.sendCommand([command, ...args])
      return {
        nodeRedis: true,
        send,
        del: (key) => client.sendCommand(['DEL', key]),
        many: (command, argsList) => Promise.allSettled(argsList.map((a) => send(command, a))),
      }
    }
  }
  throw typeError(
    `client must be an ioredis client (new Redis() or new Redis.Cluster()) or a connected node-redis v4+ client (createClient()), got ${describe(client)}`
  )
}

// A node-redis client emits 'error' when its connection fails (the server
// restarted or was killed, CLIENT KILL, a cut network) and again at each
// reconnect that fails; an EventEmitter's 'error' with no listener throws,
// and the process exits. So a limiter built on a node-redis client that has
// no 'error' listener adds one that warns (code RATOMIC_REDIS_CLIENT_ERROR)
// until the user adds theirs (see client-errors.js). The client reconnects
// by itself; the calls go on by onError while Redis cannot be reached.
// ioredis only logs an 'error' nobody listens to: left as it is.
const watchClientErrors = clientErrorWatcher(
  'RATOMIC_REDIS_CLIENT_ERROR',
  (_, what, more) =>
    `ratomic/redis: the node-redis client's connection failed (${what}); the client reconnects by itself, and calls answer by onError while Redis cannot be reached. Add client.on('error', …) to handle this yourself${more}`
)

// `promise`, or TIMED_OUT after `ms` (a timer of its own).
function within(promise, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(reject, ms, TIMED_OUT)
    promise.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (error) => {
        clearTimeout(timer)
        reject(error)
      }
    )
  })
}

// Throws the driver's backend error, with the client's error as its cause.
function rethrow(err, cause) {
  if (err && err.code === 'ERR_RATOMIC_BACKEND' && cause !== TIMED_OUT) err.cause = cause
  throw err
}

function readAt(atMs) {
  if (typeof atMs !== 'number') throw typeError(`atMs must be a number of milliseconds, got ${describe(atMs)}`)
  return atMs
}

// Limiters holding leases, given back (best effort) when the event loop
// empties: see RedisBase#close. Weak: a limiter dropped is forgotten.
const leasing = new Set()
const forget = new FinalizationRegistry((ref) => leasing.delete(ref))
let hooked = false

function giveBackAtExit() {
  // The loop is empty: nothing else will run. A limiter holding leases
  // sends its give-backs (within its timeoutMs); their replies bring the
  // loop back here once, with nothing held, and the process ends. A
  // closed client rejects at once: its leases expire instead.
  for (const ref of leasing) {
    const l = ref.deref()
    if (l !== undefined && l.leasesHeld > 0) l.close().catch(() => {})
  }
}

function watchAtExit(limiter) {
  const ref = new WeakRef(limiter)
  leasing.add(ref)
  forget.register(limiter, ref)
  if (!hooked) {
    hooked = true
    // A listener keeps nothing alive: it runs only when the loop is empty.
    process.on('beforeExit', giveBackAtExit)
  }
}

function readCost(cost, name) {
  if (cost === undefined) return 1
  if (typeof cost !== 'number') throw typeError(`${name} must be a number, got ${describe(cost)}`)
  return cost
}

/**
 * What the four classes share: the native driver, the client and the
 * failure policy. Every method returns a Promise. Exported for `instanceof`
 * checks; not constructible.
 */
class RedisBase {
  #native
  #client
  #transport
  #timeoutMs
  #local
  #decode
  #multi
  #sha
  #sources
  // Numbers in and out of the driver's single calls (see src/redis.rs).
  #io
  // ARGV of the calls at the server's time, by op and cost: the same for every key.
  #argv = [new Map(), new Map()]
  // Decisions in flight at the same time share round trips: while one is
  // outstanding (#busy), the calls that come meanwhile wait in #queue and
  // then go together, up to MAX_BATCH in one pipeline, each answered as it
  // would have been alone (the server runs a pipeline's calls in order).
  #busy = false
  #queue = []
  // Keys (keyId) whose lease call the last coalesced round trip granted.
  #granted = new Set()
  // This limiter's id in the hot path's table (-1: none): see #decide.
  #hotId = -1
  // One timer for the round trips in flight (#flights: each one's deadline
  // and how to fail it), re-armed only while round trips keep coming: no
  // timer per call.
  #flights = new Set()
  #timer = null

  constructor(rules, o, isLimiter) {
    if (new.target === RedisBase) throw typeError('RedisBase is not constructible: use RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow or RedisLimiter')
    if (o.client === undefined) throw typeError('options.client is required: an ioredis or node-redis client')
    this.#transport = transportOf(o.client)
    this.#client = o.client
    this.#timeoutMs = o.timeoutMs === undefined ? 50 : o.timeoutMs
    if (typeof this.#timeoutMs !== 'number' || !(this.#timeoutMs > 0)) {
      throw (typeof this.#timeoutMs !== 'number' ? typeError : rangeError)(`timeoutMs must be a number of milliseconds > 0, got ${o.timeoutMs}`)
    }
    let onError = o.onError
    if (onError !== undefined && typeof onError !== 'string') {
      const want = isLimiter ? ratomic.Limiter : ratomic.BaseLimiter
      if (!(onError instanceof want) || (!isLimiter && onError instanceof ratomic.Limiter)) {
        throw typeError(
          `onError must be "raise", "allow", "deny" or ${isLimiter ? 'a ratomic Limiter' : 'an in-memory TokenBucket, FixedWindow or SlidingWindow'} to fall back to, got ${describe(onError)}`
        )
      }
      this.#local = onError
      onError = 'raise'
    }
    const native = {}
    for (const k of ['prefix', 'denyRetryAfterMs', 'denyCache', 'breakerThreshold', 'breakerCooldownMs', 'breakerFailureTimeMs', 'maxKeyLen', 'lease', 'leaseKeys']) {
      if (o[k] !== undefined) native[k] = o[k]
    }
    if (native.lease !== undefined && typeof native.lease !== 'string' && typeof native.lease !== 'number') {
      throw typeError(`lease must be "off", "auto" or the most tokens a lease may take (a whole number >= 1), got ${describe(native.lease)}`)
    }
    if (onError !== undefined) native.onError = onError
    if (native.prefix !== undefined && typeof native.prefix !== 'string') throw typeError(`prefix must be a string, got ${describe(native.prefix)}`)
    for (const k of ['denyRetryAfterMs', 'denyCache', 'breakerThreshold', 'breakerCooldownMs', 'breakerFailureTimeMs', 'maxKeyLen', 'leaseKeys']) {
      if (native[k] !== undefined && typeof native[k] !== 'number') throw typeError(`${k} must be a number, got ${describe(native[k])}`)
    }
    this.#native = new NativeRedis(rules, native)
    this.#sha = this.#native.sha
    this.#sources = this.#native.sources
    this.#io = new Float64Array(this.#native.ioLen)
    this.#hotId = this.#native.hotId
    const names = this.#native.names
    this.#multi = isLimiter
    this.#decode = isLimiter ? (allowed, a, at) => multi(allowed, a, at, names) : single
    if (this.#native.leaseMax !== null) watchAtExit(this)
    // Last: a constructor that throws has changed nothing.
    if (this.#transport.nodeRedis === true) watchClientErrors(o.client, 'node-redis')
  }

  // An answer: [source code, ...decisions in decision.rs's layout].
  #answers(answer) {
    const source = this.#sources[answer[0]]
    const out = decodeAll(answer, this.#decode, 1)
    for (const d of out) d.source = source
    return out
  }

  // The one decision the driver wrote into #io: read at once, before
  // another call's answer overwrites it.
  #decision() {
    const io = this.#io
    const d = this.#decode(io[1] === 1, io, 2)
    d.source = this.#sources[io[0]]
    return d
  }

  // The EVALSHA arguments of an allow or peek on `rkey` (from begin).
  #args(op, rkey, cost, atMs) {
    let argv
    if (atMs === undefined) {
      const cache = this.#argv[op]
      argv = cache.get(cost)
      if (argv === undefined) {
        if (cache.size >= 64) cache.clear()
        argv = this.#native.argv(op, cost)
        cache.set(cost, argv)
      }
    } else {
      argv = this.#native.argv(op, cost, atMs)
    }
    return [this.#sha, '1', rkey, ...argv]
  }

  #fallback(op, key, cost) {
    const d = op === OP_PEEK ? this.#local.peek(key, cost) : this.#local.allow(key, cost)
    d.source = 'fallback'
    return d
  }

  // `promise`, or TIMED_OUT once timeoutMs has passed.
  #timed(promise) {
    return new Promise((resolve, reject) => {
      const f = { deadline: performance.now() + this.#timeoutMs, reject }
      this.#flights.add(f)
      if (this.#timer === null) this.#arm(this.#timeoutMs)
      const done = () => this.#flights.delete(f)
      promise.then(
        (v) => {
          done()
          resolve(v)
        },
        (e) => {
          done()
          reject(e)
        }
      )
    })
  }

  #arm(ms) {
    this.#timer = setTimeout(() => this.#watch(), ms)
    // While a call is in flight its client's socket keeps the process alive.
    this.#timer.unref()
  }

  #watch() {
    this.#timer = null
    const now = performance.now()
    let next = Infinity
    for (const f of this.#flights) {
      if (f.deadline <= now) {
        this.#flights.delete(f)
        f.reject(TIMED_OUT)
      } else if (f.deadline < next) {
        next = f.deadline
      }
    }
    // Nothing left in flight: no timer until the next round trip.
    if (next !== Infinity) this.#arm(next - now)
  }

  async #send(args) {
    try {
      return await this.#timed(this.#transport.send('EVALSHA', args))
    } catch (e) {
      if (!isNoScript(e)) throw e
      return this.#timed(this.#transport.send('EVAL', evalArgs(args, this.#native.script)))
    }
  }

  // The arguments of a call begin() asked to send (io holds its lease and stamp).
  #call(op, key, cost, atMs, rkey) {
    const io = this.#io
    const w = { op, key, cost, atMs, rkey, lease: io[0], sent: io[1], args: this.#args(op, rkey, cost, atMs), deferred: 0, resolve: null, reject: null }
    if (w.lease > 0) w.args[3] = 'l' + w.lease
    return w
  }

  // Ends call `w` with its reply or how its round trip failed: its decision,
  // or throws the driver's error (the client's as its cause).
  #end(w, reply, failed) {
    const native = this.#native
    const io = this.#io
    if (failed !== undefined) {
      try {
        native.fail(w.op, w.key, w.cost, w.atMs, io, failureOf(failed), w.sent)
      } catch (err) {
        rethrow(err, failed)
      }
    } else {
      native.finish(w.op, w.key, w.cost, w.atMs, io, replyInto(io, reply), w.sent)
    }
    return this.#decision()
  }

  // begin() (demand >= 0) or beginLocal() (-1) of an allow at the server's
  // time through the hot path — a plain native function: no class method's
  // unwrapping, no typed array passed, about 1 µs less a call: a number
  // (answered: see #hotDecision), or the Redis key (a call to send, its
  // lease and stamp copied into #io as begin() writes them); undefined for
  // the other calls (or a limiter with no hot id).
  #hot(op, key, cost, atMs, demand) {
    if (op !== OP_ALLOW || atMs !== undefined || this.#hotId < 0) return undefined
    const r = HOT.redisAllow(this.#hotId, key, cost, demand)
    if (typeof r !== 'number') {
      this.#io[0] = HOT.out[0]
      this.#io[1] = HOT.out[1]
    }
    return r
  }

  // The decision #hot answered with (its code `r`), read from the hot path's buffer at once.
  #hotDecision(r) {
    const d = this.#decode((r & 1) === 1, HOT.out, 0)
    d.source = this.#sources[r >>> 1]
    return d
  }

  async #decide(op, key, cost, atMs) {
    try {
      if (this.#busy) {
        // A round trip is in flight: answered here (a lease, a cached
        // denial), or this call waits for the next one, asking for no lease
        // meanwhile: #plan begins it again, and the lease its key asks for
        // then covers every call waiting on the key.
        const hot = this.#hot(op, key, cost, atMs, -1)
        if (typeof hot === 'number') return this.#hotDecision(hot)
        const rkey = hot ?? this.#native.beginLocal(op, key, cost, atMs, this.#io)
        if (typeof rkey === 'number') return this.#decision()
        const w = { op, key, cost, atMs, rkey, lease: 0, sent: 0, args: null, deferred: 0, resolve: null, reject: null }
        return await new Promise((resolve, reject) => {
          w.resolve = resolve
          w.reject = reject
          this.#queue.push(w)
        })
      }
      const hot = this.#hot(op, key, cost, atMs, 0)
      if (typeof hot === 'number') return this.#hotDecision(hot)
      const rkey = hot ?? this.#native.begin(op, key, cost, atMs, this.#io)
      if (typeof rkey === 'number') return this.#decision()
      // Read before any await: other calls reuse #io.
      const w = this.#call(op, key, cost, atMs, rkey)
      this.#busy = true
      let reply, failed
      try {
        reply = await this.#send(w.args)
      } catch (e) {
        failed = e
      }
      try {
        return this.#end(w, reply, failed)
      } finally {
        // Those that came meanwhile go in the next round trip.
        if (this.#queue.length > 0) this.#drain()
        else this.#busy = false
      }
    } catch (err) {
      if (this.#local === undefined || err.code !== 'ERR_RATOMIC_BACKEND') throw err
      return this.#fallback(op, key, cost)
    }
  }

  // Which waiting calls go in this round trip. One asking for a lease goes
  // as it is (its key's one asker); the others begin again — a lease or a
  // denial that came meanwhile may answer them — asking, should they ask
  // for a lease, for one that covers the tokens behind them on their key;
  // those whose key this round trip brings a lease wait for it.
  #plan(batch) {
    const native = this.#native
    const demand = new Map()
    for (const w of batch) {
      const k = keyId(w.rkey)
      demand.set(k, (demand.get(k) || 0) + w.cost)
    }
    const send = []
    const later = []
    const leasing = new Set()
    const progressed = new Set(this.#granted)
    for (const w of batch) {
      const k = keyId(w.rkey)
      if (w.lease > 0) {
        leasing.add(k)
      } else if (leasing.has(k) && w.deferred < MAX_DEFERS && (w.deferred < FREE_DEFERS || progressed.has(k))) {
        w.deferred++
        later.push(w)
        continue
      } else {
        let rkey
        try {
          const wanted = demand.get(k) - w.cost
          const hot = this.#hot(w.op, w.key, w.cost, w.atMs, wanted)
          if (typeof hot === 'number') {
            const d = this.#hotDecision(hot)
            if (d.source === 'lease') progressed.add(k)
            w.resolve(d)
            continue
          }
          rkey = hot ?? native.begin(w.op, w.key, w.cost, w.atMs, this.#io, wanted)
        } catch (err) {
          w.reject(err)
          continue
        }
        if (typeof rkey === 'number') {
          const d = this.#decision()
          if (d.source === 'lease') progressed.add(k)
          w.resolve(d)
          continue
        }
        const again = this.#call(w.op, w.key, w.cost, w.atMs, rkey)
        w.lease = again.lease
        w.sent = again.sent
        w.args = again.args
        if (w.lease > 0) leasing.add(k)
      }
      send.push(w)
    }
    return [send, later]
  }

  // Sends the waiting calls, a round trip at a time, until none is left.
  async #drain() {
    let sent = []
    try {
      while (this.#queue.length > 0) {
        const [send, later] = this.#plan(this.#queue.splice(0, MAX_BATCH))
        this.#queue.unshift(...later)
        if (send.length === 0) continue
        sent = send
        let replies, failed
        try {
          replies = await this.#sendMany(send.map((w) => w.args))
        } catch (e) {
          failed = e
        }
        const granted = new Set()
        for (let i = 0; i < send.length; i++) {
          const w = send[i]
          try {
            const d = this.#end(w, failed === undefined ? replies[i] : undefined, failed)
            if (w.lease > 0 && d.allowed) granted.add(keyId(w.rkey))
            w.resolve(d)
          } catch (err) {
            w.reject(err)
          }
        }
        this.#granted = granted
        sent = []
      }
    } catch (err) {
      // Nothing here should throw; if it does, nobody waits for ever.
      for (const w of [...sent, ...this.#queue.splice(0)]) w.reject(err)
    } finally {
      this.#busy = false
    }
  }

  // Every call in one pipeline: their replies, or the first failure; `timed`
  // bounds each round trip (by default, timeoutMs on the shared timer).
  async #sendMany(argsList, timed = (p) => this.#timed(p)) {
    const replies = await timed(this.#transport.many('EVALSHA', argsList))
    // Calls a server answered NOSCRIPT did not run: only they go again, by EVAL.
    const again = replies.flatMap((r, i) => (r.status === 'rejected' && isNoScript(r.reason) ? [i] : []))
    if (again.length > 0) {
      const script = this.#native.script
      const retried = await timed(this.#transport.many('EVAL', again.map((i) => evalArgs(argsList[i], script))))
      again.forEach((i, j) => {
        replies[i] = retried[j]
      })
    }
    const failed = replies.find((r) => r.status === 'rejected')
    if (failed) throw failed.reason
    return replies.map((r) => r.value)
  }

  async #many(requests, atMs) {
    const native = this.#native
    try {
      const step = native.beginMany(requests, atMs)
      if (Array.isArray(step)) return this.#answers(step)
      const argsList = step.args
      let replies
      try {
        replies = await this.#sendMany(argsList)
      } catch (e) {
        try {
          return this.#answers(native.failMany(step, failureOf(e)))
        } catch (err) {
          rethrow(err, e)
        }
      }
      return this.#answers(native.finishMany(step, replies.map(replyOf)))
    } catch (err) {
      if (this.#local === undefined || err.code !== 'ERR_RATOMIC_BACKEND') throw err
      return this.#local.allowMany(requests).map((d) => ({ ...d, source: 'fallback' }))
    }
  }

  async #refund(key, tokens, atMs) {
    const native = this.#native
    tokens = readCost(tokens, 'tokens')
    // Back into this process's lease if it can: no round trip.
    if (atMs === undefined && native.refundLease(key, tokens)) return
    const args = native.beginRefund(key, tokens, atMs)
    let reply
    try {
      reply = await this.#send(args)
    } catch (e) {
      try {
        native.backendError(failureOf(e))
      } catch (err) {
        rethrow(err, e)
      }
    }
    native.finishRefund(replyOf(reply))
  }

  /** Takes `cost` (default 1) from `key`, from every limit, all or nothing, at the server's time. */
  async allow(key, cost) {
    return this.#decide(OP_ALLOW, key, readCost(cost, 'cost'))
  }

  /** As `allow` at `atMs` (your clock, ms; rounded down to whole µs) instead of the server's time. */
  async allowAt(key, atMs, cost) {
    return this.#decide(OP_ALLOW, key, readCost(cost, 'cost'), readAt(atMs))
  }

  /** What `allow` would answer, changing nothing. */
  async peek(key, cost) {
    return this.#decide(OP_PEEK, key, readCost(cost, 'cost'))
  }

  /** As `peek` at `atMs`. */
  async peekAt(key, atMs, cost) {
    return this.#decide(OP_PEEK, key, readCost(cost, 'cost'), readAt(atMs))
  }

  /** Gives back `tokens` (default 1) to every limit on `key`, never above full. A Redis failure rejects whatever `onError` says. */
  async refund(key, tokens) {
    return this.#refund(key, tokens)
  }

  /** As `refund` at `atMs`. */
  async refundAt(key, atMs, tokens) {
    return this.#refund(key, tokens, readAt(atMs))
  }

  /** Forgets `key` (one script call): it is full again, but for the tokens other processes' leases hold. */
  async reset(key) {
    const native = this.#native
    const args = native.beginResetCall(key)
    let reply
    try {
      reply = await this.#send(args)
    } catch (e) {
      try {
        native.backendError(failureOf(e))
      } catch (err) {
        rethrow(err, e)
      }
    }
    native.finishReset(replyOf(reply))
  }

  /**
   * Gives back the unused tokens of every lease this limiter holds (one pipeline), so other
   * processes can have them now rather than when their time passes; resolves with how many
   * limits took tokens back. The client stays open (it is yours); later calls take new leases.
   */
  async close() {
    const native = this.#native
    const batch = native.beginGiveBacks()
    if (batch === null) return 0
    let replies
    try {
      // A timer of its own, which keeps the event loop alive until the
      // give-back's reply (or timeoutMs): at exit, that is the point.
      replies = await this.#sendMany(batch.args, (p) => within(p, this.#timeoutMs))
    } catch (e) {
      try {
        native.backendError(failureOf(e))
      } catch (err) {
        rethrow(err, e)
      }
    }
    let back = 0
    for (const r of replies) back += native.finishGiveBack(replyOf(r))
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

  /** Decides every request (a key or `[key, cost]`) in one pipeline, in order; an invalid request rejects the whole batch with its `index`, before anything is sent. */
  async allowMany(requests) {
    return this.#many(requests)
  }

  /** As `allowMany`, every request at `atMs`. */
  async allowManyAt(requests, atMs) {
    return this.#many(requests, readAt(atMs))
  }

  /** Waits out `retryAfterMs` until `key` grants `cost`; with `timeoutMs`, resolves with the denial once the next wait would pass it. */
  async acquire(key, cost, options) {
    return acquire(() => this.allow(key, cost), realSleep, options)
  }

  /** The client the calls go through. */
  get client() {
    return this.#client
  }

  /** Where the keys live: a key `k` is stored at `<prefix>{k}`. */
  get prefix() {
    return this.#native.prefix
  }

  /** The largest cost a call may ask (the smallest limit). */
  get limit() {
    return this.#native.limit
  }

  /** Whether the circuit breaker is open: calls are answered by `onError` without reaching Redis. */
  get breakerOpen() {
    return this.#native.breakerOpen
  }

  /**
   * The HTTP header fields for one of this limiter's decisions, as
   * `[name, value]` pairs, formatted as the in-memory limiters' `headers()`
   * (`options.name` names a single rule's limit; a `RedisLimiter`'s limits
   * are named already).
   */
  headers(decision, options) {
    return backendHeaders(this.#native, this.#multi, decision, options)
  }

  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`, or null when it was allowed. */
  problem(decision, options) {
    return backendProblem(this.#native, this.#multi, decision, options)
  }

  /** The class, the rule(s) with their units and the prefix: `RedisFixedWindow { fixed window 5 per 1m, prefix: "ratomic:" }`. */
  toString() {
    return `${this.constructor.name} { ${this.#native.description}, prefix: ${JSON.stringify(this.#native.prefix)} }`
  }

  [inspect.custom]() {
    return this.toString()
  }
}

/** A token bucket (GCRA) per key, on Redis: the arguments of `TokenBucket`, with `client` and the Redis options. */
class RedisTokenBucket extends RedisBase {
  constructor(capacity, refillPerSec, options) {
    const [rule, o] = tokenBucketRule(capacity, refillPerSec, options, OPTIONS)
    super([rule], o, false)
  }
}

/** A fixed window per key, on Redis: the arguments of `FixedWindow`, with `client` and the Redis options. */
class RedisFixedWindow extends RedisBase {
  constructor(limit, window, options) {
    const [rule, o] = windowArgs('fixedWindow', 'RedisFixedWindow', limit, window, options, OPTIONS)
    super([rule], o, false)
  }
}

/** A sliding window per key, on Redis: the arguments of `SlidingWindow`, with `client` and the Redis options. */
class RedisSlidingWindow extends RedisBase {
  constructor(limit, window, options) {
    const [rule, o] = windowArgs('slidingWindow', 'RedisSlidingWindow', limit, window, options, OPTIONS)
    super([rule], o, false)
  }
}

/** Several named limits on each key, all or nothing, on Redis (one hash per key): the arguments of `Limiter`. */
class RedisLimiter extends RedisBase {
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

module.exports = { RedisBase, RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow, RedisLimiter }
