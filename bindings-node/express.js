'use strict'
// Express (and plain `http`) middleware with express-rate-limit 8's options:
//
//   const rateLimit = require('ratomic/express')   // was: require('express-rate-limit')
//   app.use(rateLimit({ windowMs: 15 * 60 * 1000, limit: 100 }))
//
// The module is the function, as express-rate-limit's is (with `.rateLimit`,
// `.default` and `.ipKeyGenerator`); `limiter:` takes any ratomic limiter
// instead of limit/windowMs. Where ratomic differs from express-rate-limit
// (headers on by default, a problem document for a denial, a denial not
// counted) README.md's table says so; an option it cannot honour is a
// TypeError naming what to use instead.

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
  leave,
  arrangeRefund,
  timeBefore,
  resetKey,
  getKey,
  defaultKey,
  checkForwarded,
  ipKeyGenerator,
  warnEvery,
  toLogger,
  tellOnce,
  isThenable,
  typeError,
  PROBLEMS,
  PROBLEM_CONTENT_TYPE,
  KINDS,
} = require('./http.js')

// express-rate-limit 8's options, and ratomic's own.
const OPTIONS = [
  'windowMs', 'limit', 'max', 'message', 'statusCode', 'legacyHeaders', 'standardHeaders', 'identifier',
  'requestPropertyName', 'skipFailedRequests', 'skipSuccessfulRequests', 'keyGenerator', 'ipv6Subnet', 'handler',
  'skip', 'requestWasSuccessful', 'validate', 'passOnStoreError', 'logger',
  'limiter', 'cost', 'name', 'quota', 'onLimiterError',
]

// express-rate-limit's options that ratomic does not take, and what to use.
const REFUSED = {
  store:
    "store is express-rate-limit's: ratomic keeps the counts in its limiter. Pass limiter: a ratomic limiter (in memory, a sharedFile one for processes of one host, or RedisFixedWindow from 'ratomic/redis' in place of rate-limit-redis)",
  headers: 'headers is the old name of legacyHeaders: pass legacyHeaders',
  onLimitReached: 'onLimitReached was removed in express-rate-limit 7: pass handler, called for each request over the limit',
  draft_polli_ratelimit_headers: "draft_polli_ratelimit_headers was removed in express-rate-limit 7: pass standardHeaders: 'draft-6'",
  retryAfter:
    "retryAfter is not taken: Retry-After is the limiter's own wait (whole seconds, rounded up), right for every algorithm; to send another, set it in handler",
}

// express-rate-limit's validations, by the report of ratomic's each turns off
// (those with nothing of ratomic's to check are accepted and change nothing).
const VALIDATIONS = {
  ip: 'ERR_RATOMIC_NO_CLIENT_ADDRESS',
  trustProxy: 'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY',
  xForwardedForHeader: 'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR',
  forwardedHeader: 'ERR_RATOMIC_UNTRUSTED_FORWARDED',
  keyGeneratorIpFallback: 'ERR_RATOMIC_KEY_GENERATOR_IP',
  ipv6SubnetOrKeyGenerator: 'ERR_RATOMIC_IPV6_SUBNET_IGNORED',
  knownOptions: null,
  positiveHits: null,
  unsharedStore: null,
  singleCount: null,
  limit: null,
  draftPolliHeaders: null,
  onLimitReached: null,
  headersDraftVersion: null,
  headersResetTime: null,
  validationsConfig: null,
  creationStack: null,
  ipv6Subnet: null,
  windowMs: null,
  default: null,
}

// What express-rate-limit's default handler sends; a custom handler finds
// it as options.message when none is given (ratomic's own default is a
// problem document).
const DEFAULT_MESSAGE = 'Too many requests, please try again later.'

const DRAFTS = [false, 'draft-11', 'draft-8', 'draft-7', 'draft-6']

// `validate` (true, false or { name: boolean }) as the checks it turns off.
function checksOf(validate) {
  if (validate === undefined || validate === true) return { known: true, codes: {} }
  if (validate === false) return { known: false, codes: Object.fromEntries(Object.values(VALIDATIONS).filter(Boolean).map((c) => [c, false])) }
  if (validate === null || typeof validate !== 'object') throw typeError(`validate must be true, false or an object { name: boolean }, got ${JSON.stringify(validate)}`)
  const codes = {}
  const on = (name) => (validate[name] !== undefined ? validate[name] !== false : validate.default !== false)
  for (const name of Object.keys(validate)) {
    if (!Object.hasOwn(VALIDATIONS, name)) throw typeError(`validate.${name} is not a check (expected one of ${Object.keys(VALIDATIONS).join(', ')})`)
  }
  for (const [name, code] of Object.entries(VALIDATIONS)) if (code !== null && !on(name)) codes[code] = false
  return { known: on('knownOptions'), codes }
}

function functionOrUndefined(o, k) {
  if (o[k] !== undefined && typeof o[k] !== 'function') throw typeError(`${k} must be a function`)
}

function booleanOption(o, k) {
  if (o[k] !== undefined && typeof o[k] !== 'boolean') throw typeError(`${k} must be true or false, got ${JSON.stringify(o[k])}`)
  return o[k] === true
}

/** express-rate-limit's options, checked, as the gate's settings and the denial's. */
function read(options) {
  const o = options === undefined ? {} : options
  if (o === null || typeof o !== 'object') throw typeError(`options must be an object, got ${o === null ? 'null' : typeof o}`)
  const checks = checksOf(o.validate)
  for (const k of Object.keys(o)) {
    if (Object.hasOwn(REFUSED, k) && o[k] !== undefined) throw typeError(REFUSED[k])
    if (!OPTIONS.includes(k) && checks.known) throw typeError(`unknown option ${JSON.stringify(k)} (expected one of ${OPTIONS.join(', ')})`)
  }
  if (o.limit !== undefined && o.max !== undefined) throw typeError('give limit or max (its older name), not both')
  const limit = o.limit !== undefined ? o.limit : o.max
  if (o.limiter !== undefined && (limit !== undefined || o.windowMs !== undefined)) throw typeError('give either limiter or limit/windowMs, not both')
  if (limit !== undefined && !['number', 'string', 'function'].includes(typeof limit)) {
    throw typeError(`limit must be a number, a rate string like '100/15min' or a function of the request, got ${JSON.stringify(limit)}`)
  }
  if (typeof limit === 'string' && o.windowMs !== undefined) {
    throw typeError(`limit ${JSON.stringify(limit)} names its window: give it without windowMs, or a number with windowMs`)
  }
  if (o.windowMs !== undefined && typeof o.windowMs !== 'number') throw typeError(`windowMs must be a number of milliseconds, got ${JSON.stringify(o.windowMs)}`)
  // express-rate-limit's true is draft 6; ratomic's default is draft 11 (draft 8's fields).
  const standard = o.standardHeaders === undefined ? 'draft-11' : o.standardHeaders === true ? 'draft-6' : o.standardHeaders
  if (!DRAFTS.includes(standard)) {
    throw typeError(`standardHeaders must be true (draft-6), false, 'draft-6', 'draft-7', 'draft-8' or 'draft-11' (the default), got ${JSON.stringify(o.standardHeaders)}`)
  }
  const legacy = booleanOption(o, 'legacyHeaders')
  const subnet = o.ipv6Subnet
  if (subnet !== undefined && subnet !== false && typeof subnet !== 'function' && (!Number.isInteger(subnet) || subnet < 1 || subnet > 128)) {
    throw typeError(`ipv6Subnet must be a whole number from 1 to 128, false (the whole address) or a function, got ${subnet}`)
  }
  const statusCode = o.statusCode === undefined ? 429 : o.statusCode
  if (!Number.isInteger(statusCode) || statusCode < 400 || statusCode > 599) throw typeError(`statusCode must be an HTTP error status, got ${statusCode}`)
  for (const k of ['keyGenerator', 'skip', 'handler', 'requestWasSuccessful']) functionOrUndefined(o, k)
  if (o.cost !== undefined && typeof o.cost !== 'number' && typeof o.cost !== 'function') throw typeError('cost must be a number or a function')
  if (o.identifier !== undefined && o.name !== undefined) throw typeError('give identifier or name (the same: the policy\'s name in the header fields), not both')
  const name = o.identifier !== undefined ? o.identifier : o.name
  if (name !== undefined && typeof name !== 'string' && typeof name !== 'function') throw typeError(`identifier must be a string or a function of the request, got ${JSON.stringify(name)}`)
  if (o.onLimiterError !== undefined && typeof o.onLimiterError !== 'function') throw typeError('onLimiterError must be a function (error, req)')
  if (o.logger !== undefined) {
    if (o.onLimiterError !== undefined) throw typeError('give logger or onLimiterError, not both')
    if (o.logger === null || typeof o.logger.warn !== 'function' || typeof o.logger.error !== 'function') throw typeError('logger must have warn and error methods (console, pino, winston)')
  }
  if (o.requestPropertyName !== undefined && typeof o.requestPropertyName !== 'string') throw typeError('requestPropertyName must be a string')
  const skipSuccessful = booleanOption(o, 'skipSuccessfulRequests')
  const skipFailed = booleanOption(o, 'skipFailedRequests')
  const passOnStoreError = booleanOption(o, 'passOnStoreError')
  const wasSuccessful = o.requestWasSuccessful === undefined ? (req, res) => res.statusCode < 400 : o.requestWasSuccessful
  const settings = {
    face: 'ratomic/express',
    limiter: o.limiter,
    limit: limit === undefined ? 5 : typeof limit === 'function' ? (req, res) => limit(req, res) : limit,
    windowMs: o.windowMs === undefined ? 60_000 : o.windowMs,
    name,
    draft: standard === 'draft-8' ? 'draft-11' : standard,
    legacy,
    keyGenerator: o.keyGenerator,
    ipv6Subnet: subnet,
    skip: o.skip,
    cost: o.cost,
    quota: o.quota,
    refund: skipSuccessful || skipFailed ? { successful: skipSuccessful, failed: skipFailed } : null,
    passOnStoreError,
    onLimiterError: o.onLimiterError !== undefined ? o.onLimiterError : o.logger !== undefined ? toLogger(o.logger) : warnEvery(),
    checks: checks.codes,
    requestPropertyName: o.requestPropertyName,
  }
  // What a handler is given, as express-rate-limit gives it: the options in force.
  const used = Object.freeze({
    ...o,
    limit: limit === undefined ? 5 : limit,
    windowMs: settings.windowMs,
    statusCode,
    message: o.message === undefined ? DEFAULT_MESSAGE : o.message,
    standardHeaders: standard,
    legacyHeaders: legacy,
    requestPropertyName: o.requestPropertyName === undefined ? 'rateLimit' : o.requestPropertyName,
    skipSuccessfulRequests: skipSuccessful,
    skipFailedRequests: skipFailed,
    passOnStoreError,
  })
  return { settings, statusCode, message: o.message, handler: o.handler === undefined ? null : o.handler, wasSuccessful, used, o }
}

// Set-up advice express-rate-limit gives too, told with the first request
// (onLimiterError is told a request): a keyGenerator keying by req.ip as is,
// and an ipv6Subnet that keyGenerator makes moot.
function advice(o) {
  const out = []
  const src = typeof o.keyGenerator === 'function' ? o.keyGenerator.toString() : ''
  if (/\breq(uest)?\.ip\b/.test(src) && !src.includes('ipKeyGenerator')) {
    out.push([
      'ERR_RATOMIC_KEY_GENERATOR_IP',
      "ratomic/express: keyGenerator seems to key by req.ip as is: each IPv6 address of one client's /64 is then a client of its own. Key by ipKeyGenerator(req.ip) (require('ratomic/express').ipKeyGenerator)",
    ])
  }
  if (o.ipv6Subnet !== undefined && o.keyGenerator !== undefined) {
    out.push(['ERR_RATOMIC_IPV6_SUBNET_IGNORED', 'ratomic/express: ipv6Subnet groups the default key only, and keyGenerator replaces it: pass the subnet to ipKeyGenerator(req.ip, subnet) in keyGenerator'])
  }
  return out
}

// Express's `trust proxy` (false by default); with no app (plain `http`), nothing is trusted.
function trustProxy(req) {
  return req.app && typeof req.app.get === 'function' ? req.app.get('trust proxy') : false
}

// The client's address, as `req.ip` gives it. Express's own `ip` (a getter
// on its request prototype) is proxy-addr's answer, which, when a request
// has no X-Forwarded-For, is the socket's address whatever `trust proxy`
// says: read directly then, since `req.ip` costs more than the rest of the
// middleware's own work (~0.5–0.9 µs a request measured: Express gives each
// request a hidden class of its own, so every property it reads on the
// request is a lookup up the prototype chain; a cost of property reads, not
// of proxy-addr's arithmetic). An `ip` of anyone else's (an app's own getter
// on app.request or express.request, or one set on the request) is read as
// is, as is a request that carries X-Forwarded-For.
const IP_READ = 0 // read req.ip
const IP_EXPRESS = 1 // Express's own: the socket's address when there is no X-Forwarded-For
const IP_NONE = 2 // no `ip` at all (plain http): the socket's address
// Express 4's and 5's getter, as written in their lib/request.js.
const EXPRESS_IP = /^function ip\s*\(\)\s*\{\s*var trust = this\.app\.get\('trust proxy fn'\);\s*return proxyaddr\(this, trust\);\s*\}$/
const ipModes = new WeakMap()
let ipProto = null
let ipMode = IP_READ

// What `ip` is on requests of prototype `proto` (found once a prototype: an
// app defines its request prototype once, at start).
function ipModeOf(proto) {
  for (let o = proto; o !== null; o = Object.getPrototypeOf(o)) {
    const d = Object.getOwnPropertyDescriptor(o, 'ip')
    if (d === undefined) continue
    return typeof d.get === 'function' && d.set === undefined && EXPRESS_IP.test(Function.prototype.toString.call(d.get)) ? IP_EXPRESS : IP_READ
  }
  return IP_NONE
}

// The address `req.ip` would give (else the socket's), and the
// forwarding headers checked against the trust settings (once).
function clientAddress(g, req) {
  const headers = req.headers
  checkForwarded(g, req, trustProxy, headers)
  const proto = Object.getPrototypeOf(req)
  if (proto !== ipProto) {
    let m = proto === null ? IP_READ : ipModes.get(proto)
    if (m === undefined) {
      m = ipModeOf(proto)
      ipModes.set(proto, m)
    }
    ipProto = proto
    ipMode = m
  }
  if (ipMode === IP_READ || (ipMode === IP_EXPRESS && headers !== undefined && headers['x-forwarded-for'] !== undefined) || Object.hasOwn(req, 'ip')) {
    const ip = req.ip
    if (ip !== undefined) return ip
  }
  const socket = req.socket
  if (socket) return socket.remoteAddress
  // Without a socket, Express's getter reads the connection (forwarded's getSocketAddr).
  return ipMode === IP_EXPRESS && req.connection ? req.connection.remoteAddress : undefined
}

function setHeader(res, name, value) {
  res.setHeader(name, value)
}

function send(res, body, type, ascii) {
  res.setHeader('Content-Type', type)
  res.setHeader('Content-Length', ascii ? body.length : Buffer.byteLength(body))
  res.end(body)
}

// A refusal that is not a denial: the generic problem document of `status`.
function refuse(res, status) {
  res.statusCode = status
  if (status === 503) res.setHeader('Retry-After', '1')
  send(res, PROBLEMS[status], PROBLEM_CONTENT_TYPE, true)
}

/**
 * Connect-style middleware limiting each client (by default its address:
 * `req.ip`, which honours Express's own `trust proxy` setting, else the
 * socket's peer address; IPv6 grouped by `ipv6Subnet` bits). Every response
 * carries the IETF `RateLimit-Policy` and `RateLimit` fields; a denial is
 * `statusCode` (429) with `Retry-After` and an RFC 9457 problem body, or what
 * `handler` / `message` make of it. A DirectTokenBucket limits every request
 * together, with no key.
 */
function rateLimit(options) {
  const { settings, statusCode, message, handler, wasSuccessful, used, o } = read(options)
  const g = gate(settings)
  let advise = advice(o)
  const { kind, keyless } = g
  const prop = g.requestPropertyName
  const perRequest = kind === KINDS.DYNAMIC || g.nameFn !== null || (kind === KINDS.QUOTAS && typeof g.quota === 'function')

  function deny(req, res, next, p, d) {
    if (handler !== null) return handler(req, res, next, used)
    if (message === undefined) {
      res.statusCode = statusCode
      const body = problemBody(p, d)
      return send(res, body, PROBLEM_CONTENT_TYPE, true)
    }
    const m = typeof message === 'function' ? message(req, res) : message
    return isThenable(m) ? m.then((v) => sendMessage(res, v)) : sendMessage(res, m)
  }

  function sendMessage(res, m) {
    if (res.writableEnded) return
    res.statusCode = statusCode
    // As express-rate-limit: Express's res.send (a string as HTML, an object as JSON).
    if (typeof res.send === 'function') return res.send(m)
    if (typeof m === 'string') return send(res, m, 'text/plain; charset=utf-8', false)
    return send(res, JSON.stringify(m), 'application/json', false)
  }

  function failed(req, res, next, e) {
    const status = unjudged(g, req, e)
    return status === 0 ? next() : refuse(res, status)
  }

  // The common set-up (an in-memory limiter, the default key, nothing per
  // request): decided in the request's own tick, one native call, no promise.
  function fast(req, res, next) {
    let key
    if (!keyless) {
      key = defaultKey(g, req, res, clientAddress(g, req))
      if (key === undefined) return refuse(res, keyMissing(g, req, true))
    }
    let d
    try {
      d = take(g, g.limiter, key, g.quota, g.cost)
    } catch (e) {
      return failed(req, res, next, e)
    }
    const p = g.template
    writeFields(p, d, setHeader, res)
    leave(req, prop, infoOf(d, key, Date.now()), res)
    if (d.allowed) return next()
    return deny(req, res, next, p, d)
  }

  // Everything else: each step runs at once and awaits only what returns a
  // promise (an async skip or keyGenerator, a Redis limiter, an async message).
  function general(req, res, next) {
    if (advise !== null) {
      for (const [code, message] of advise) tellOnce(g, req, code, message)
      advise = null
    }
    if (g.skip !== null) {
      const s = g.skip(req, res)
      if (isThenable(s)) return s.then((v) => (v ? next() : keyed(req, res, next)))
      if (s) return next()
    }
    return keyed(req, res, next)
  }

  function keyed(req, res, next) {
    if (keyless) return perRequestThen(req, res, next, undefined)
    if (g.keyGenerator !== null) {
      const k = g.keyGenerator(req, res)
      return isThenable(k) ? k.then((v) => withKey(req, res, next, v, false)) : withKey(req, res, next, k, false)
    }
    return withKey(req, res, next, defaultKey(g, req, res, clientAddress(g, req)), true)
  }

  function withKey(req, res, next, key, byDefault) {
    if (key === undefined || key === null) return refuse(res, keyMissing(g, req, byDefault))
    return perRequestThen(req, res, next, key)
  }

  // The limit, quota and policy name a request's functions give.
  function perRequestThen(req, res, next, key) {
    if (!perRequest) return decide(req, res, next, key, g.limiter, g.name, g.quota)
    const limit = kind === KINDS.DYNAMIC && typeof settings.limit === 'function' ? settings.limit(req, res, key) : settings.limit
    const quota = kind === KINDS.QUOTAS && typeof g.quota === 'function' ? g.quota(req, res) : g.quota
    const name = g.nameFn !== null ? g.nameFn(req, res) : g.name
    if (isThenable(limit) || isThenable(quota) || isThenable(name)) {
      return Promise.all([limit, quota, name]).then(([l, q, n]) => withLimit(req, res, next, key, l, q, n))
    }
    return withLimit(req, res, next, key, limit, quota, name)
  }

  function withLimit(req, res, next, key, limit, quota, name) {
    if (typeof name !== 'string') throw typeError(`identifier must return a string, got ${JSON.stringify(name)}`)
    let limiter = g.limiter
    if (kind === KINDS.DYNAMIC) {
      if (typeof limit !== 'number') throw typeError(`the limit function must return a number, got ${JSON.stringify(limit)}`)
      try {
        limiter = dynamicLimiter(g, limit, settings.windowMs)
      } catch (e) {
        if (e.code === 'ERR_RATOMIC_TOO_MANY_LIMITS') return failed(req, res, next, e)
        throw e
      }
    }
    return decide(req, res, next, key, limiter, name, quota)
  }

  function decide(req, res, next, key, limiter, name, quota) {
    const cost = costOf(g, req)
    const before = g.refund !== null ? timeBefore(g, limiter) : undefined
    let d
    try {
      d = take(g, limiter, key, quota, cost)
    } catch (e) {
      return failed(req, res, next, e)
    }
    if (!g.async) return answer(req, res, next, key, limiter, name, quota, cost, before, d)
    return d.then(
      (v) => answer(req, res, next, key, limiter, name, quota, cost, before, v),
      (e) => failed(req, res, next, e)
    )
  }

  function answer(req, res, next, key, limiter, name, quota, cost, before, d) {
    if (g.async) checkSource(g, req, d)
    const p = policyOf(g, limiter, name, quota)
    writeFields(p, d, setHeader, res)
    leave(req, prop, infoOf(d, key, Date.now()), res)
    if (!d.allowed) return deny(req, res, next, p, d)
    if (g.refund !== null) arrangeRefund(g, req, res, limiter, key, quota, cost, d, before, wasSuccessful)
    return next()
  }

  const isFast = g.skip === null && g.keyGenerator === null && !perRequest && !g.async && g.refund === null && typeof g.cost === 'number'
  const run = isFast ? fast : general

  function ratomicRateLimit(req, res, next) {
    let pending
    try {
      pending = run(req, res, next)
    } catch (e) {
      return next(e)
    }
    // An error in a step that was awaited goes to Express's error handling.
    if (isThenable(pending)) return pending.then(undefined, next)
    return pending
  }
  /** Forgets `key`: its next request starts from a full limit (express-rate-limit's resetKey). */
  ratomicRateLimit.resetKey = (key) => resetKey(g, key)
  /** `{ totalHits, resetTime }` of `key`, or undefined when it has used nothing (express-rate-limit's getKey). */
  ratomicRateLimit.getKey = (key) => getKey(g, key)
  return ratomicRateLimit
}

// The module is the function, as express-rate-limit's is: require('ratomic/express')(options),
// and its names for ES modules and TypeScript (default, named rateLimit).
module.exports = rateLimit
module.exports.rateLimit = rateLimit
module.exports.default = rateLimit
module.exports.ipKeyGenerator = ipKeyGenerator
