'use strict'
// What ratomic's Express and Fastify middleware share: the options (named
// as express-rate-limit names them), the client's key, and one decision
// with its header fields and problem body — formatted by ratomic's Rust
// core through the limiters' headers() / problem(). Any limiter will do, a
// Stack included: its members each get the client's key, or the keys
// keyGenerator returns (one key for all, or an array of one per member). A
// DirectTokenBucket is one bucket for every request: no key is made.

const net = require('node:net')
const { BaseLimiter, DirectTokenBucket, FixedWindow, Limiter, Stack, PROBLEM_CONTENT_TYPE } = require('./ratomic.js')
const { RedisBase, RedisLimiter } = require('./redis.js')

const OPTIONS = [
  'limiter', 'limit', 'windowMs', 'keyGenerator', 'skip', 'handler', 'statusCode', 'message',
  'standardHeaders', 'legacyHeaders', 'ipv6Subnet', 'requestPropertyName', 'cost', 'name', 'passOnStoreError',
  'onLimiterError',
]

// Milliseconds between two console.warn lines of one kind of failure by the
// default onLimiterError (the first is written at once): a dead Redis must
// not write a line per request.
const REPORT_INTERVAL_MS = 60_000

// The answers that are not a rate-limit denial: generic RFC 9457 documents,
// the same for every request. What went wrong (an address, an error's text,
// a key's length) goes to onLimiterError, never to the client.
const STATUS_TEXT = { 400: 'Bad Request', 500: 'Internal Server Error', 503: 'Service Unavailable' }
const DETAIL = {
  400: 'This request cannot be rate limited.',
  500: 'Rate limiting is misconfigured on this server.',
  503: 'Rate limiting is unavailable; try again later.',
}
const PROBLEMS = Object.fromEntries(
  Object.keys(STATUS_TEXT).map((s) => [s, JSON.stringify({ type: 'about:blank', title: STATUS_TEXT[s], status: Number(s), detail: DETAIL[s] })])
)

/**
 * The default `onLimiterError`: `console.warn`, each kind of report (its
 * `code`) at once, then at most once per REPORT_INTERVAL_MS with how many
 * more there were since.
 */
function warnEvery(intervalMs = REPORT_INTERVAL_MS) {
  const last = new Map()
  const since = new Map()
  return (error) => {
    const code = error.code
    const now = performance.now()
    const at = last.get(code)
    if (at !== undefined && now - at < intervalMs) {
      since.set(code, (since.get(code) || 0) + 1)
      return
    }
    last.set(code, now)
    const more = since.get(code) || 0
    since.delete(code)
    const cause = error.cause === undefined ? '' : `: ${error.cause && error.cause.message !== undefined ? error.cause.message : error.cause}`
    console.warn(`${error.message}${cause}${more ? ` (${more} more since the last report)` : ''}`)
  }
}

// A report for onLimiterError: an Error with a code, the status the client
// got (0: let through), and the limiter's own error as its cause.
function report(code, status, message, cause) {
  const e = cause === undefined ? new Error(message) : new Error(message, { cause })
  e.code = code
  e.status = status
  return e
}

function typeError(message) {
  const e = new TypeError(message)
  e.code = 'ERR_RATOMIC_INVALID_ARGUMENT'
  return e
}

// An IPv6 address as its 8 groups (null if it is not one).
function groups(ip) {
  if (!net.isIPv6(ip)) return null
  let [head, tail] = ip.split('::')
  const parse = (s) => (s ? s.split(':') : [])
  let h = parse(head)
  let t = tail === undefined ? [] : parse(tail)
  // An embedded IPv4 tail (::ffff:1.2.3.4) is two groups.
  const last = (tail === undefined ? h : t)
  if (last.length && net.isIPv4(last[last.length - 1])) {
    const [a, b, c, d] = last.pop().split('.').map(Number)
    last.push(((a << 8) | b).toString(16), ((c << 8) | d).toString(16))
  }
  const fill = tail === undefined ? [] : new Array(8 - h.length - t.length).fill('0')
  return [...h, ...fill, ...t].map((g) => parseInt(g, 16))
}

// An address without the port a proxy may have written after it into
// X-Forwarded-For, which Express's and Fastify's `ip` pass on as is
// ('203.0.113.7:41234', '[2001:db8::1]:41234'): one client is one key,
// whatever port its connection came from.
function withoutPort(ip) {
  if (ip.startsWith('[')) {
    const end = ip.indexOf(']')
    return end > 0 ? ip.slice(1, end) : ip
  }
  const colon = ip.lastIndexOf(':')
  // One colon: an IPv4 address (or a name) and a port; more is an IPv6 address.
  if (colon > 0 && ip.indexOf(':') === colon && /^[0-9]+$/.test(ip.slice(colon + 1))) return ip.slice(0, colon)
  return ip
}

/**
 * The client's key from its address: an IPv4 address as is, an IPv4-mapped
 * IPv6 address as its IPv4 form, any other IPv6 address grouped by its
 * first `subnet` bits (one client commonly holds a /64); a port after the
 * address (`203.0.113.7:41234`, `[2001:db8::1]:41234`) is dropped.
 */
function clientKey(ip, subnet) {
  if (typeof ip !== 'string' || ip === '') return undefined
  if (!ip.includes(':')) return ip // IPv4 (every IPv6 form has a colon): as is, parsed for nothing
  ip = withoutPort(ip)
  if (!ip.includes(':')) return ip
  const g = groups(ip)
  if (g === null) return ip
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return `${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`
  }
  const masked = g.map((x, i) => {
    const bits = Math.max(0, Math.min(16, subnet - 16 * i))
    return bits === 0 ? 0 : x & ((0xffff << (16 - bits)) & 0xffff)
  })
  return `${masked.map((x) => x.toString(16)).join(':')}/${subnet}`
}

/** The options, checked once, with express-rate-limit's defaults. */
function resolve(options, face = 'ratomic/express') {
  const o = options === undefined ? {} : options
  if (o === null || typeof o !== 'object') throw typeError(`options must be an object, got ${o === null ? 'null' : typeof o}`)
  for (const k of Object.keys(o)) {
    if (!OPTIONS.includes(k)) throw typeError(`unknown option ${JSON.stringify(k)} (expected one of ${OPTIONS.join(', ')})`)
  }
  let limiter = o.limiter
  if (limiter === undefined) {
    // express-rate-limit counts in fixed windows; so does the default here.
    if (typeof o.limit === 'string') {
      // A rate string ('10/second', '100 per 15 minutes') names its own window.
      if (o.windowMs !== undefined) throw typeError(`limit ${JSON.stringify(o.limit)} names its window: give it without windowMs, or a number with windowMs`)
      limiter = new FixedWindow(o.limit)
    } else {
      limiter = new FixedWindow(o.limit === undefined ? 5 : o.limit, o.windowMs === undefined ? 60_000 : o.windowMs)
    }
  } else if (
    !(limiter instanceof BaseLimiter) && !(limiter instanceof DirectTokenBucket) && !(limiter instanceof Stack) && !(limiter instanceof RedisBase)
  ) {
    throw typeError(
      'limiter must be a ratomic TokenBucket, FixedWindow, SlidingWindow, Limiter, DirectTokenBucket or Stack, or one of ratomic/redis (RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow, RedisLimiter)'
    )
  } else if (o.limit !== undefined || o.windowMs !== undefined) {
    throw typeError('give either limiter or limit/windowMs, not both')
  }
  // true is draft 11 here (express-rate-limit's true is draft 6: name it).
  const standard = o.standardHeaders === undefined || o.standardHeaders === true ? 'draft-11' : o.standardHeaders
  if (![false, 'draft-11', 'draft-8', 'draft-7', 'draft-6'].includes(standard)) {
    throw typeError(
      `standardHeaders must be true (draft-11), false, 'draft-11', 'draft-8', 'draft-7' or 'draft-6', got ${JSON.stringify(standard)}`
    )
  }
  const subnet = o.ipv6Subnet === undefined ? 64 : o.ipv6Subnet
  if (!Number.isInteger(subnet) || subnet < 1 || subnet > 128) throw typeError(`ipv6Subnet must be a whole number from 1 to 128, got ${subnet}`)
  const statusCode = o.statusCode === undefined ? 429 : o.statusCode
  if (!Number.isInteger(statusCode) || statusCode < 400 || statusCode > 599) throw typeError(`statusCode must be an HTTP error status, got ${statusCode}`)
  for (const k of ['keyGenerator', 'skip', 'handler']) {
    if (o[k] !== undefined && typeof o[k] !== 'function') throw typeError(`${k} must be a function`)
  }
  if (o.cost !== undefined && typeof o.cost !== 'number' && typeof o.cost !== 'function') throw typeError('cost must be a number or a function')
  if (o.onLimiterError !== undefined && typeof o.onLimiterError !== 'function') throw typeError('onLimiterError must be a function (error, req)')
  const name = o.name === undefined ? 'default' : o.name
  // One bucket for every request: a key would be ignored, so asking for one is a mistake.
  const keyless = limiter instanceof DirectTokenBucket
  if (keyless && o.keyGenerator !== undefined) {
    throw typeError('keyGenerator has no use with a DirectTokenBucket, one bucket for every request (for per-client limits too, use a Stack)')
  }
  const stack = limiter instanceof Stack
  const multi = stack || limiter instanceof Limiter || limiter instanceof RedisLimiter
  // Check now, not on the first request, that the fields can be written:
  // the name; every limit's or stack member's name (one no header can carry
  // is a RangeError naming it, not a 500 on every request), and that a
  // stack has no Limiter member (which has no single policy: a TypeError).
  const allowed = { allowed: true, remaining: 0, limit: 1, retryAfterMs: 0, resetAfterMs: 0 }
  if (multi) limiter.headers({ ...allowed, entries: limiter.names.map((n) => ({ ...allowed, name: n })), deniedBy: [] })
  else limiter.headers(allowed, { name })
  return {
    face,
    limiter,
    multi,
    // No key: the request's key is not made, and allow() takes the cost only.
    keyless,
    // A stack's members: each gets the request's one key, unless it has one per member.
    members: stack ? limiter.names.length : 0,
    // A Redis limiter answers with a promise; an in-memory one at once.
    async: limiter instanceof RedisBase,
    name,
    keyGenerator: o.keyGenerator,
    skip: o.skip,
    handler: o.handler,
    statusCode,
    message: o.message,
    standardHeaders: standard !== false,
    legacyHeaders: o.legacyHeaders === true,
    ipv6Subnet: subnet,
    requestPropertyName: o.requestPropertyName === undefined ? 'rateLimit' : o.requestPropertyName,
    cost: o.cost === undefined ? 1 : o.cost,
    passOnStoreError: o.passOnStoreError === true,
    onLimiterError: o.onLimiterError === undefined ? warnEvery() : o.onLimiterError,
    // Set-up mistakes already reported (each once).
    reported: new Set(),
    // Whether a request with X-Forwarded-For was checked against the trust settings.
    forwardedChecked: false,
    // Built once: headers() is asked the same on every request.
    headerOptions: Object.freeze({
      ...(multi ? {} : { name }),
      legacy: o.legacyHeaders === true,
      ...(standard === false ? {} : { draft: standard }),
    }),
  }
}

/**
 * Decides request `req` whose key is `key` (undefined for a keyless
 * limiter): the decision, the header fields
 * to set, and the problem body of a denial. A promise of them when the
 * limiter is a Redis one (`o.async`).
 */
function decide(o, req, key, byDefault = false) {
  if (!o.keyless && (key === undefined || key === null)) return keyless(o, req, byDefault)
  let d
  try {
    // A stack's keys: an array is one key per member (a wrong length is the
    // stack's RangeError, so the request is unjudged); one key is every member's.
    const cost = typeof o.cost === 'function' ? o.cost(req) : o.cost
    if (o.keyless) {
      d = o.limiter.allow(cost)
    } else {
      const k = o.members === 0 || Array.isArray(key) ? key : new Array(o.members).fill(key)
      d = o.limiter.allow(k, cost)
    }
  } catch (e) {
    return unjudged(o, req, e)
  }
  return o.async ? d.then((decision) => outcome(o, req, decision), (e) => unjudged(o, req, e)) : outcome(o, req, d)
}

// Calls onLimiterError; an error it throws is not the request's.
function tell(o, req, e) {
  try {
    o.onLimiterError(e, req)
  } catch {
    // A broken logger must not break the request.
  }
}

// Tells onLimiterError of set-up mistake `code` the first time only.
function tellOnce(o, req, code, message) {
  if (o.reported.has(code)) return
  o.reported.add(code)
  tell(o, req, report(code, 0, message))
}

// A request without a key. From the default key (no client address): a
// set-up mistake, a 500 for the server's own fault, reported once. From
// keyGenerator: that request's, a 400.
function keyless(o, req, byDefault) {
  if (byDefault) {
    tellOnce(
      o,
      req,
      'ERR_RATOMIC_NO_CLIENT_ADDRESS',
      `${o.face}: a request has no client address (req.ip and the socket's remoteAddress are both missing), so the default key cannot be made and such requests are refused with a 500: pass keyGenerator (a user id, an API key)`
    )
    return refused(500)
  }
  tell(o, req, report('ERR_RATOMIC_BAD_REQUEST', 400, `${o.face}: keyGenerator gave no key; the request is refused with a 400`))
  return refused(400)
}

function refused(status) {
  return { decision: null, fields: status === 503 ? [['Retry-After', '1']] : [], problem: PROBLEMS[status], status, failed: true }
}

// A request the limiter could not decide. Its backend failing (Redis under
// onError "raise") is answered as passOnStoreError says: a 503 (fail closed,
// the default) or through (fail open). Anything else is about the request
// (a key too long, a cost above the limit, a stack's keys not one per
// member): a 400 either way, since letting it through would let any client
// skip the limit by sending, say, a long key. The client gets a generic
// problem document; onLimiterError gets the error.
function unjudged(o, req, e) {
  if (e && e.code === 'ERR_RATOMIC_BACKEND') {
    const status = o.passOnStoreError ? 0 : 503
    const what = status ? 'requests are refused with a 503' : 'requests are let through unchecked (passOnStoreError)'
    tell(o, req, report('ERR_RATOMIC_BACKEND', status, `${o.face}: the rate limiter's backend failed; ${what}`, e))
    return status ? refused(503) : { decision: null, fields: [], problem: null }
  }
  tell(o, req, report('ERR_RATOMIC_BAD_REQUEST', 400, `${o.face}: a request cannot be rate limited and is refused with a 400`, e))
  return refused(400)
}

function outcome(o, req, d) {
  const all = o.limiter.headers(d, o.headerOptions)
  // RateLimit-Policy and RateLimit are the standard ones; Retry-After goes
  // on every denial; X-RateLimit-* only when asked.
  const fields = o.standardHeaders ? all : all.filter(([n]) => !n.startsWith('RateLimit'))
  const problem = d.allowed ? null : o.multi ? o.limiter.problem(d) : o.limiter.problem(d, { name: o.name })
  if (o.async && (d.source === 'policy' || d.source === 'fallback')) {
    // The Redis limiter answered by its own onError: Redis is failing.
    tell(o, req, report('ERR_RATOMIC_BACKEND_POLICY', 0, `${o.face}: the limiter's backend is failing; its own onError answers (source '${d.source}')`))
  }
  return { decision: d, fields, problem, status: o.statusCode, failed: false }
}

// Set-up mistakes in how the client's address is read, as express-rate-limit
// reports them: X-Forwarded-For present but not trusted (behind a proxy,
// every client would share the proxy's bucket), or every X-Forwarded-For
// hop trusted (any client picks its own key). Each reported once.
// `trustOf(req)` says what the framework trusts; asked only of the first
// request that carries the header (it is set-up, the same for all).
function checkForwarded(o, req, trustOf) {
  if (o.forwardedChecked || req.headers === undefined || req.headers['x-forwarded-for'] === undefined) return
  o.forwardedChecked = true
  const trusted = trustOf(req)
  if (trusted === false) {
    tellOnce(
      o,
      req,
      'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR',
      `${o.face}: requests carry X-Forwarded-For but no proxy is trusted, so each client is keyed by the connection's address: behind a proxy, every client shares the proxy's one bucket. Behind N proxies you run, set Express's 'trust proxy' (Fastify's trustProxy) to N; if clients reach the app directly, leave it (the header is then whatever they wrote)`
    )
  } else if (trusted === true) {
    tellOnce(
      o,
      req,
      'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY',
      `${o.face}: 'trust proxy' is true, so every X-Forwarded-For hop is trusted and any client picks its own key by writing the header: set it to the number of proxies you run`
    )
  }
}

/**
 * The key the middleware gives a client by default, from its address: for a
 * `keyGenerator` that combines it with others (a Stack's per-IP member) and
 * keeps IPv6 grouped. express-rate-limit 8 exports the same name.
 * `ipv6Subnet`: bits of an IPv6 address that name one client (default 64),
 * or false for the whole address.
 */
function ipKeyGenerator(ip, ipv6Subnet = 64) {
  if (typeof ip !== 'string' || ip === '') throw typeError(`ip must be a non-empty string, got ${ip === '' ? "''" : typeof ip}`)
  if (ipv6Subnet === false) return clientKey(ip, 128).replace(/\/128$/, '')
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128) {
    throw typeError(`ipv6Subnet must be a whole number from 1 to 128 or false, got ${ipv6Subnet}`)
  }
  return clientKey(ip, ipv6Subnet)
}

module.exports = { resolve, decide, clientKey, checkForwarded, ipKeyGenerator, warnEvery, PROBLEM_CONTENT_TYPE }
