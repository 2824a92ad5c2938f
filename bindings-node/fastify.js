'use strict'
// A Fastify plugin with @fastify/rate-limit's options:
//
//   await fastify.register(require('ratomic/fastify'), { max: 100, timeWindow: '1 minute' })
//   fastify.get('/login', { config: { rateLimit: { max: 5, timeWindow: '15 minutes' } } }, handler)
//
// As @fastify/rate-limit: not encapsulated, a hook on each route registered
// after it in the registering scope (`global: false`: only the routes whose
// `config.rateLimit` asks), a route's own `config.rateLimit` (or `false`),
// `fastify.rateLimit(options)` for a hook of your own and
// `fastify.createRateLimit(options)` to ask without answering. It takes
// ratomic's own options too (`limiter:` any ratomic limiter) and
// express-rate-limit's names (`limit`, `windowMs`, `skip`, `handler`,
// `skipSuccessfulRequests` …), as ratomic/express does.

const {
  gate,
  policyOf,
  dynamicLimiter,
  writeFields,
  problemBody,
  take,
  costOf,
  unjudged,
  keyMissing,
  checkSource,
  infoOf,
  decideInfo,
  arrangeRefund,
  timeBefore,
  defaultKey,
  checkForwarded,
  ipKeyGenerator,
  warnEvery,
  isThenable,
  typeError,
  PROBLEMS,
  PROBLEM_CONTENT_TYPE,
  KINDS,
} = require('./http.js')

// @fastify/rate-limit's options.
const PEER = [
  'global', 'max', 'timeWindow', 'hook', 'cache', 'allowList', 'keyGenerator', 'ipv6Subnet', 'groupId', 'errorResponseBuilder',
  'enableDraftSpec', 'addHeadersOnExceeding', 'addHeaders', 'onExceeding', 'onExceeded', 'skipOnError',
]
// ratomic's own and express-rate-limit's, as ratomic/express takes them.
const OWN = [
  'limiter', 'name', 'cost', 'quota', 'onLimiterError', 'passOnStoreError', 'standardHeaders', 'legacyHeaders', 'requestPropertyName',
  'limit', 'windowMs', 'skip', 'handler', 'message', 'statusCode', 'skipSuccessfulRequests', 'skipFailedRequests', 'requestWasSuccessful',
]
const OPTIONS = [...PEER, ...OWN]

// @fastify/rate-limit's options that ratomic does not take, and what to use.
const REFUSED = {
  store: "store is @fastify/rate-limit's: ratomic keeps the counts in its limiter. Pass limiter: a ratomic limiter (in memory, a sharedFile one, or one of 'ratomic/redis' or 'ratomic/postgres')",
  redis: "redis: pass limiter: new RedisFixedWindow(max, timeWindowMs, { client }) from 'ratomic/redis' (ioredis or node-redis)",
  nameSpace: "nameSpace: give the Redis limiter of 'ratomic/redis' its prefix option",
  ban:
    "ban: a denial charges nothing in ratomic, so there is no count of requests past the limit to ban on. For a stricter limit on clients that keep trying, add a longer one: limiter: new Limiter({ burst: '100/min', hourly: '1000/h' })",
  onBanReach: 'onBanReach: there is no ban (see ban); onExceeded is called on each denial',
  continueExceeding:
    "continueExceeding: a denial charges nothing in ratomic, so it cannot extend the window; a token bucket (limiter: new TokenBucket('100/min')) lets a client back in one request at a time instead of all at once",
  exponentialBackoff: 'exponentialBackoff: a denial charges nothing in ratomic, so it cannot lengthen the wait; see continueExceeding',
}

const HOOKS = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const DRAFTS = [false, 'draft-11', 'draft-8', 'draft-7', 'draft-6']

// @fastify/rate-limit's time strings ('1 minute', '5s', '2 hours'): milliseconds.
const UNITS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000, y: 31_557_600_000 }
function duration(v, what) {
  if (typeof v === 'number') return v
  const m = typeof v === 'string' ? /^\s*(\d*\.?\d+)\s*(ms|msecs?|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|weeks?|y|yrs?|years?)?\s*$/i.exec(v) : null
  if (m === null) throw typeError(`${what} must be milliseconds or a duration like '1 minute' or '15m', got ${JSON.stringify(v)}`)
  const u = (m[2] || 'ms').toLowerCase()
  const unit = u.startsWith('ms') || u.startsWith('milli') ? 'ms' : u[0]
  return Number(m[1]) * UNITS[unit]
}

function fn(o, k) {
  if (o[k] !== undefined && typeof o[k] !== 'function') throw typeError(`${k} must be a function`)
}

function headerSwitches(o, k) {
  const v = o[k]
  if (v === undefined) return []
  if (v === null || typeof v !== 'object') throw typeError(`${k} must be an object { 'header-name': boolean }`)
  for (const [n, on] of Object.entries(v)) if (typeof on !== 'boolean') throw typeError(`${k}[${JSON.stringify(n)}] must be true or false`)
  return Object.keys(v).filter((n) => v[n] === false).map((n) => n.toLowerCase())
}

/** The plugin's (or a route's) options, checked, as a gate's settings and the plugin's own. */
function read(options) {
  const o = options === undefined ? {} : options
  if (o === null || typeof o !== 'object') throw typeError(`options must be an object, got ${o === null ? 'null' : typeof o}`)
  for (const k of Object.keys(o)) {
    if (Object.hasOwn(REFUSED, k) && o[k] !== undefined) throw typeError(`ratomic/fastify: ${REFUSED[k]}`)
    if (!OPTIONS.includes(k)) throw typeError(`unknown option ${JSON.stringify(k)} (expected one of ${OPTIONS.join(', ')})`)
  }
  const pairs = [['max', 'limit'], ['timeWindow', 'windowMs'], ['skipOnError', 'passOnStoreError'], ['errorResponseBuilder', 'handler'], ['errorResponseBuilder', 'message']]
  for (const [a, b] of pairs) if (o[a] !== undefined && o[b] !== undefined) throw typeError(`give ${a} or ${b}, not both`)
  const max = o.max !== undefined ? o.max : o.limit
  const window = o.timeWindow !== undefined ? o.timeWindow : o.windowMs
  if (o.limiter !== undefined && (max !== undefined || window !== undefined)) throw typeError('give either limiter or max/timeWindow, not both')
  if (max !== undefined && !['number', 'string', 'function'].includes(typeof max)) throw typeError(`max must be a number or a function (request, key), got ${JSON.stringify(max)}`)
  if (typeof max === 'string' && window !== undefined) throw typeError(`limit ${JSON.stringify(max)} names its window: give it without timeWindow`)
  const windowMs = window === undefined ? 60_000 : typeof window === 'function' ? window : duration(window, 'timeWindow')
  for (const k of ['keyGenerator', 'skip', 'handler', 'errorResponseBuilder', 'onExceeding', 'onExceeded', 'requestWasSuccessful']) fn(o, k)
  if (o.allowList !== undefined && !Array.isArray(o.allowList) && typeof o.allowList !== 'function') throw typeError('allowList must be an array of keys or a function (request, key)')
  if (o.global !== undefined && typeof o.global !== 'boolean') throw typeError('global must be true or false')
  if (o.hook !== undefined && !HOOKS.includes(o.hook)) throw typeError(`hook must be one of ${HOOKS.join(', ')}, got ${JSON.stringify(o.hook)}`)
  if (o.cache !== undefined && (!Number.isInteger(o.cache) || o.cache < 1)) throw typeError(`cache must be a whole number of clients >= 1, got ${o.cache}`)
  if (o.cache !== undefined && o.limiter !== undefined) throw typeError('cache sizes the default limiter: give your limiter its maxKeys instead')
  if (o.groupId !== undefined && typeof o.groupId !== 'string') throw typeError('groupId must be a string')
  if (o.enableDraftSpec !== undefined && typeof o.enableDraftSpec !== 'boolean') throw typeError('enableDraftSpec must be true or false')
  if (o.enableDraftSpec !== undefined && o.standardHeaders !== undefined) throw typeError('give enableDraftSpec or standardHeaders, not both')
  // enableDraftSpec: @fastify/rate-limit's draft fields (draft 6's, without its RateLimit-Policy).
  const standard = o.enableDraftSpec === true ? 'draft-6' : o.standardHeaders === undefined || o.standardHeaders === true ? 'draft-11' : o.standardHeaders
  if (!DRAFTS.includes(standard)) throw typeError(`standardHeaders must be true, false, 'draft-6', 'draft-7', 'draft-8' or 'draft-11', got ${JSON.stringify(o.standardHeaders)}`)
  const draftDrop = o.enableDraftSpec === true ? ['ratelimit-policy'] : []
  const subnet = o.ipv6Subnet
  if (subnet !== undefined && subnet !== false && (!Number.isInteger(subnet) || subnet < 1 || subnet > 128)) throw typeError(`ipv6Subnet must be a whole number from 1 to 128 or false, got ${subnet}`)
  const statusCode = o.statusCode === undefined ? 429 : o.statusCode
  if (!Number.isInteger(statusCode) || statusCode < 400 || statusCode > 599) throw typeError(`statusCode must be an HTTP error status, got ${statusCode}`)
  if (o.cost !== undefined && typeof o.cost !== 'number' && typeof o.cost !== 'function') throw typeError('cost must be a number or a function')
  if (o.name !== undefined && typeof o.name !== 'string') throw typeError('name must be a string')
  if (o.onLimiterError !== undefined && typeof o.onLimiterError !== 'function') throw typeError('onLimiterError must be a function (error, request)')
  const bool = (k) => {
    if (o[k] !== undefined && typeof o[k] !== 'boolean') throw typeError(`${k} must be true or false`)
    return o[k] === true
  }
  const skipSuccessful = bool('skipSuccessfulRequests')
  const skipFailed = bool('skipFailedRequests')
  const settings = {
    face: 'ratomic/fastify',
    limiter: o.limiter,
    limit: max === undefined ? 1000 : max,
    windowMs,
    maxKeys: o.cache,
    name: o.name,
    draft: standard === 'draft-8' ? 'draft-11' : standard,
    legacy: bool('legacyHeaders'),
    drop: { allowed: [...draftDrop, ...headerSwitches(o, 'addHeadersOnExceeding')], denied: [...draftDrop, ...headerSwitches(o, 'addHeaders')] },
    keyGenerator: o.keyGenerator,
    ipv6Subnet: subnet,
    skip: o.skip,
    cost: o.cost,
    quota: o.quota,
    refund: skipSuccessful || skipFailed ? { successful: skipSuccessful, failed: skipFailed } : null,
    passOnStoreError: o.skipOnError === true || bool('passOnStoreError'),
    onLimiterError: o.onLimiterError === undefined ? warnEvery() : o.onLimiterError,
    requestPropertyName: o.requestPropertyName,
  }
  if (o.skipOnError !== undefined && typeof o.skipOnError !== 'boolean') throw typeError('skipOnError must be true or false')
  return {
    settings,
    global: o.global !== false,
    hook: o.hook === undefined ? 'onRequest' : o.hook,
    allowList: o.allowList === undefined ? null : o.allowList,
    groupId: o.groupId,
    statusCode,
    errorResponseBuilder: o.errorResponseBuilder === undefined ? null : o.errorResponseBuilder,
    handler: o.handler === undefined ? null : o.handler,
    message: o.message,
    onExceeding: o.onExceeding === undefined ? null : o.onExceeding,
    onExceeded: o.onExceeded === undefined ? null : o.onExceeded,
    wasSuccessful: o.requestWasSuccessful === undefined ? (req, reply) => reply.statusCode < 400 : o.requestWasSuccessful,
    options: o,
  }
}

// A route's config.rateLimit over the plugin's options: what it sets wins,
// and a limit of its own replaces the plugin's limiter (and the reverse).
function merge(base, route) {
  const m = { ...base }
  const limits = ['max', 'limit', 'timeWindow', 'windowMs', 'cache']
  if (route.limiter !== undefined) for (const k of limits) delete m[k]
  if (limits.some((k) => route[k] !== undefined)) delete m.limiter
  if (route.enableDraftSpec !== undefined) delete m.standardHeaders
  if (route.standardHeaders !== undefined) delete m.enableDraftSpec
  for (const [a, b] of [['max', 'limit'], ['timeWindow', 'windowMs'], ['skipOnError', 'passOnStoreError']]) {
    if (route[a] !== undefined) delete m[b]
    if (route[b] !== undefined) delete m[a]
  }
  if (route.errorResponseBuilder !== undefined) {
    delete m.handler
    delete m.message
  }
  if (route.handler !== undefined || route.message !== undefined) delete m.errorResponseBuilder
  return Object.assign(m, route)
}

// Fastify's `trustProxy`, as a request shows it: `request.ips` exists only
// when some proxy is trusted (false: none; undefined: some, how many unknown).
function trusted(request) {
  return request.ips === undefined ? false : undefined
}

function setHeader(reply, name, value) {
  reply.header(name, value)
}

// @fastify/rate-limit's `after`: a wait as words ('1 minute', '30 seconds').
function after(ms) {
  const s = Math.ceil(ms / 1000)
  const [n, unit] = s >= 86_400 ? [Math.round(s / 86_400), 'day'] : s >= 3600 ? [Math.round(s / 3600), 'hour'] : s >= 60 ? [Math.round(s / 60), 'minute'] : [s, 'second']
  return `${n} ${unit}${n === 1 ? '' : 's'}`
}

/**
 * The hook of one set of options: `(request, reply, done)`, or, called
 * without `done`, a promise (as @fastify/rate-limit's `fastify.rateLimit()`
 * hook is awaited).
 */
function limiterHook(r) {
  const g = gate(r.settings)
  const { kind, keyless } = g
  const prop = g.requestPropertyName
  const s = r.settings
  const perRequest = kind === KINDS.DYNAMIC || (kind === KINDS.QUOTAS && typeof g.quota === 'function')
  const handlerOptions = Object.freeze({ ...r.options, statusCode: r.statusCode })

  // A reply is a thenable (Fastify makes it one): what answers a request
  // returns undefined, so that nothing here mistakes it for a promise.
  function refuse(reply, status, done) {
    if (status === 0) return done()
    if (status === 503) reply.header('Retry-After', '1')
    reply.code(status).type(PROBLEM_CONTENT_TYPE).send(PROBLEMS[status])
    return undefined
  }

  function failed(request, reply, done, e) {
    return refuse(reply, unjudged(g, request, e), done)
  }

  function deny(request, reply, done, p, d, key, limiter) {
    if (r.onExceeded !== null) r.onExceeded(request, key)
    if (r.errorResponseBuilder !== null) {
      // As @fastify/rate-limit: what the builder returns is the error Fastify answers with.
      const context = { statusCode: r.statusCode, ban: false, max: d.limit, ttl: Math.ceil(d.retryAfterMs), after: after(d.retryAfterMs) }
      done(r.errorResponseBuilder(request, context))
      return undefined
    }
    if (r.handler !== null) {
      const out = r.handler(request, reply, undefined, handlerOptions)
      if (out !== reply && isThenable(out)) out.then(undefined, done)
      return undefined
    }
    if (r.message !== undefined) {
      const m = typeof r.message === 'function' ? r.message(request, reply) : r.message
      if (isThenable(m)) {
        return m.then((v) => {
          reply.code(r.statusCode).send(v)
        })
      }
      reply.code(r.statusCode).send(m)
      return undefined
    }
    reply.code(r.statusCode).type(PROBLEM_CONTENT_TYPE).send(problemBody(p, d))
    return undefined
  }

  // The common set-up: in-memory, the default key, nothing per request.
  function fast(request, reply, done) {
    let key
    if (!keyless) {
      checkForwarded(g, request, trusted)
      key = defaultKey(g, request, reply, request.ip)
      if (key === undefined) return refuse(reply, keyMissing(g, request, true), done)
    }
    // The request's record is the decision the fields are written from.
    let d
    try {
      d = decideInfo(g, key)
    } catch (e) {
      return failed(request, reply, done, e)
    }
    const p = g.template
    writeFields(p, d, setHeader, reply, true)
    request[prop] = d
    if (d.allowed) {
      if (r.onExceeding !== null) r.onExceeding(request, key)
      return done()
    }
    return deny(request, reply, done, p, d, key, g.limiter)
  }

  function general(request, reply, done) {
    if (g.skip !== null) {
      const v = g.skip(request, reply)
      if (isThenable(v)) return v.then((s) => (s ? done() : keyed(request, reply, done)))
      if (v) return done()
    }
    return keyed(request, reply, done)
  }

  function keyed(request, reply, done) {
    if (keyless) return allowListed(request, reply, done, undefined, false)
    if (g.keyGenerator !== null) {
      const k = g.keyGenerator(request, reply)
      return isThenable(k) ? k.then((v) => allowListed(request, reply, done, v, false)) : allowListed(request, reply, done, k, false)
    }
    checkForwarded(g, request, trusted)
    return allowListed(request, reply, done, defaultKey(g, request, reply, request.ip), true)
  }

  function allowListed(request, reply, done, key, byDefault) {
    if (!keyless && (key === undefined || key === null)) return refuse(reply, keyMissing(g, request, byDefault), done)
    const list = r.allowList
    if (list !== null) {
      const ok = typeof list === 'function' ? list(request, key) : list.includes(key)
      if (isThenable(ok)) return ok.then((v) => (v ? done() : perRequestThen(request, reply, done, key)))
      if (ok) return done()
    }
    return perRequestThen(request, reply, done, key)
  }

  function perRequestThen(request, reply, done, key) {
    if (!perRequest) return decide(request, reply, done, key, g.limiter, g.quota)
    const limit = kind === KINDS.DYNAMIC && typeof s.limit === 'function' ? s.limit(request, key) : s.limit
    const window = kind === KINDS.DYNAMIC && typeof s.windowMs === 'function' ? s.windowMs(request, key) : s.windowMs
    const quota = kind === KINDS.QUOTAS && typeof g.quota === 'function' ? g.quota(request, reply) : g.quota
    if (isThenable(limit) || isThenable(window) || isThenable(quota)) {
      return Promise.all([limit, window, quota]).then(([l, w, q]) => withLimit(request, reply, done, key, l, w, q))
    }
    return withLimit(request, reply, done, key, limit, window, quota)
  }

  function withLimit(request, reply, done, key, limit, window, quota) {
    let limiter = g.limiter
    if (kind === KINDS.DYNAMIC) {
      if (typeof limit !== 'number' && typeof limit !== 'string') throw typeError(`max must return a number, got ${JSON.stringify(limit)}`)
      try {
        limiter = dynamicLimiter(g, limit, typeof limit === 'string' ? undefined : duration(window, 'timeWindow'))
      } catch (e) {
        if (e.code === 'ERR_RATOMIC_TOO_MANY_LIMITS') return failed(request, reply, done, e)
        throw e
      }
    }
    return decide(request, reply, done, key, limiter, quota)
  }

  function decide(request, reply, done, key, limiter, quota) {
    const cost = costOf(g, request)
    const before = g.refund !== null ? timeBefore(g, limiter) : undefined
    let d
    try {
      d = take(g, limiter, key, quota, cost)
    } catch (e) {
      return failed(request, reply, done, e)
    }
    if (!g.async) return answer(request, reply, done, key, limiter, quota, cost, before, d)
    return d.then(
      (v) => answer(request, reply, done, key, limiter, quota, cost, before, v),
      (e) => failed(request, reply, done, e)
    )
  }

  function answer(request, reply, done, key, limiter, quota, cost, before, d) {
    if (g.async) checkSource(g, request, d)
    const p = policyOf(g, limiter, g.name, quota)
    writeFields(p, d, setHeader, reply, true)
    request[prop] = infoOf(d, key, Date.now())
    if (!d.allowed) return deny(request, reply, done, p, d, key, limiter)
    if (g.refund !== null) arrangeRefund(g, request, reply.raw, limiter, key, quota, cost, d, before, (req) => r.wasSuccessful(req, reply))
    if (r.onExceeding !== null) r.onExceeding(request, key)
    return done()
  }

  const isFast = g.skip === null && g.keyGenerator === null && r.allowList === null && !perRequest && !g.async && g.refund === null && typeof g.cost === 'number'
  const run = isFast ? fast : general

  function ratomicRateLimit(request, reply, payloadOrDone, maybeDone) {
    // preParsing hooks are (request, reply, payload, done); called with no done, a promise.
    const cb = typeof maybeDone === 'function' ? maybeDone : typeof payloadOrDone === 'function' ? payloadOrDone : null
    if (cb === null) return new Promise((resolve, reject) => ratomicRateLimit(request, reply, (e) => (e ? reject(e) : resolve())))
    let pending
    try {
      pending = run(request, reply, cb)
    } catch (e) {
      return cb(e)
    }
    if (isThenable(pending)) pending.then(undefined, cb)
    return undefined
  }
  return { hook: ratomicRateLimit, gate: g, r }
}

/**
 * The plugin: a rate-limit hook on every route registered after it in its
 * scope (unless `global: false`), a route's `config.rateLimit` (an object
 * over these options, or `false`), and the decorators `rateLimit(options)`
 * and `createRateLimit(options)`.
 */
async function ratomicFastify(fastify, options) {
  const base = options === undefined ? {} : options
  const r = read(base)
  // The plugin's own hook, made now so a bad option throws at register.
  const global = limiterHook(r)
  // A property every request has from the start (Fastify's advice): set
  // per request, it changes no request's shape.
  const prop = global.gate.requestPropertyName
  if (!fastify.hasRequestDecorator(prop)) fastify.decorateRequest(prop, null)
  const groups = new Map()

  const hookOf = (routeOptions) => {
    if (routeOptions === undefined) return global
    const merged = merge(base, routeOptions)
    const group = merged.groupId
    if (group !== undefined) {
      let h = groups.get(group)
      if (h === undefined) {
        h = limiterHook(read(merged))
        groups.set(group, h)
      }
      return h
    }
    return limiterHook(read(merged))
  }

  if (!fastify.hasDecorator('rateLimit')) {
    fastify.decorate('rateLimit', (o) => hookOf(o).hook)
  }
  if (!fastify.hasDecorator('createRateLimit')) {
    fastify.decorate('createRateLimit', (o) => createRateLimit(hookOf(o)))
  }

  fastify.addHook('onRoute', (routeOptions) => {
    const config = routeOptions.config && routeOptions.config.rateLimit
    let h
    if (config === undefined || config === null) {
      if (!r.global) return
      h = global
    } else if (config === false) {
      return
    } else if (typeof config === 'object') {
      h = hookOf(config)
    } else {
      throw typeError(`config.rateLimit of ${routeOptions.method} ${routeOptions.url} must be an object of options or false, got ${JSON.stringify(config)}`)
    }
    const name = h.r.hook
    const existing = routeOptions[name]
    routeOptions[name] = Array.isArray(existing) ? [...existing, h.hook] : typeof existing === 'function' ? [existing, h.hook] : [h.hook]
  })
}

/**
 * @fastify/rate-limit's `createRateLimit`: `(request, { increment }) =>`
 * a promise of `{ isAllowed, key, max, timeWindow, remaining, ttl,
 * ttlInSeconds, isExceeded, isBanned }`, answering nothing (`isAllowed`:
 * on the allow list). `increment: false` asks without charging.
 */
function createRateLimit(h) {
  const { gate: g, r } = h
  return async (request, callOptions) => {
    const key = g.keyless ? undefined : g.keyGenerator !== null ? await g.keyGenerator(request) : defaultKey(g, request, undefined, request.ip)
    if (r.allowList !== null && (typeof r.allowList === 'function' ? await r.allowList(request, key) : r.allowList.includes(key))) {
      return { isAllowed: true, key }
    }
    let limiter = g.limiter
    if (g.kind === KINDS.DYNAMIC) {
      const s = r.settings
      const l = typeof s.limit === 'function' ? await s.limit(request, key) : s.limit
      const w = typeof s.windowMs === 'function' ? await s.windowMs(request, key) : s.windowMs
      limiter = dynamicLimiter(g, l, typeof l === 'string' ? undefined : duration(w, 'timeWindow'))
    }
    const quota = typeof g.quota === 'function' ? await g.quota(request) : g.quota
    const keys = g.kind === KINDS.STACK && !Array.isArray(key) ? new Array(g.members).fill(key) : key
    const peek = callOptions !== undefined && callOptions.increment === false
    const cost = peek ? 0 : costOf(g, request)
    const d = await (g.kind === KINDS.DIRECT
      ? limiter[peek ? 'peek' : 'allow'](cost)
      : g.kind === KINDS.QUOTAS
        ? limiter[peek ? 'peek' : 'allow'](key, quota, cost)
        : limiter[peek ? 'peek' : 'allow'](keys, cost))
    const ttl = Math.ceil(d.allowed ? d.resetAfterMs : d.retryAfterMs)
    return {
      isAllowed: false,
      key,
      max: d.limit,
      timeWindow: limiter.rule && limiter.rule.windowMs !== undefined ? limiter.rule.windowMs : undefined,
      remaining: d.remaining,
      ttl,
      ttlInSeconds: Math.ceil(ttl / 1000),
      isExceeded: !d.allowed,
      isBanned: false,
    }
  }
}

// Not encapsulated (what fastify-plugin does): the hook reaches the
// routes of the scope that registers the plugin.
ratomicFastify[Symbol.for('skip-override')] = true
ratomicFastify[Symbol.for('fastify.display-name')] = 'ratomic'
ratomicFastify[Symbol.for('plugin-meta')] = { name: 'ratomic', fastify: '>=4' }

module.exports = ratomicFastify
module.exports.default = ratomicFastify
module.exports.ratomicFastify = ratomicFastify
module.exports.fastifyRateLimit = ratomicFastify
module.exports.ipKeyGenerator = ipKeyGenerator
