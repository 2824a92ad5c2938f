'use strict'
// What ratomic's Express and Fastify middleware share: the limiter a
// middleware decides with, the client's key, the header fields and problem
// body of a decision, the decision left on the request, the refund of a
// response that is not to count, and what the client is told when the
// limiter cannot decide. express.js and fastify.js read their peer's option
// names into the settings `gate()` takes; the request flow is theirs.
//
// The header fields and the problem body are core's (the limiters'
// headers() / problem(), formatted in Rust): once per policy, core formats
// a decision of sentinel numbers, and the fields are kept as templates
// whose numbers a request fills in. A template is checked against core with
// a second set of numbers before it is used; a decision outside the range
// where JavaScript's arithmetic is core's (counts past 2^53, waits past
// 100 days) is formatted by core itself. middleware-templates.test.js pins the two paths
// to each other.

const http = require('node:http')
const net = require('node:net')
const ratomic = require('./ratomic.js')
const { BaseLimiter, DirectTokenBucket, FixedWindow, Limiter, Stack, Quotas, PROBLEM_CONTENT_TYPE } = ratomic
const { RedisBase, RedisLimiter, RedisTokenBucket, RedisFixedWindow } = require('./redis.js')
const { PostgresBase, PostgresLimiter, PostgresTokenBucket, PostgresFixedWindow } = require('./postgres.js')
const { membersOf, allowInto } = ratomic[Symbol.for('ratomic.internals')]
// KeyedLimiter's allow: a limiter whose allow is a subclass's own is asked through it.
const KEYED_ALLOW = Object.getPrototypeOf(FixedWindow.prototype).allow

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

// Distinct limits a `limit` (or `max`, `timeWindow`) function may return
// before a new one is refused: each is a limiter of its own.
const MAX_DYNAMIC_LIMITS = 64
// Quotas (of a `Quotas` limiter) and policy names whose templates are kept.
const MAX_TEMPLATES = 256

function typeError(message) {
  const e = new TypeError(message)
  e.code = 'ERR_RATOMIC_INVALID_ARGUMENT'
  return e
}

function isThenable(v) {
  return v !== null && typeof v === 'object' && typeof v.then === 'function'
}

// ---------------------------------------------------------------------------
// Reports: what onLimiterError is told.

/**
 * The default `onLimiterError`: `console.warn`, each kind of report (its
 * `code`) at once, then at most once per REPORT_INTERVAL_MS with how many
 * more there were since.
 */
function warnEvery(intervalMs = REPORT_INTERVAL_MS, write = (line) => console.warn(line)) {
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
    write(`${error.message}${cause}${more ? ` (${more} more since the last report)` : ''}`, error)
  }
}

// express-rate-limit's `logger` ({ warn, error }) as an onLimiterError:
// a backend failure to `error`, the rest to `warn`, each with the report.
function toLogger(logger) {
  return (error) => (error.code === 'ERR_RATOMIC_BACKEND' ? logger.error(error, error.message) : logger.warn(error, error.message))
}

// A report for onLimiterError: an Error with a code, the status the client
// got (0: let through), and the limiter's own error as its cause.
function report(code, status, message, cause) {
  const e = cause === undefined ? new Error(message) : new Error(message, { cause })
  e.code = code
  e.status = status
  return e
}

// Calls onLimiterError; an error it throws is not the request's.
function tell(g, req, e) {
  try {
    g.onLimiterError(e, req)
  } catch {
    // A broken logger must not break the request.
  }
}

// Tells onLimiterError of set-up mistake `code` the first time only, unless
// its check (`validate`) is off.
function tellOnce(g, req, code, message) {
  if (g.reported.has(code)) return
  g.reported.add(code)
  if (g.checks[code] === false) return
  tell(g, req, report(code, 0, message))
}

// ---------------------------------------------------------------------------
// Client keys.

// An IPv6 address as its 8 groups (null if it is not one).
function groups(ip) {
  if (!net.isIPv6(ip)) return null
  const [head, tail] = ip.split('::')
  const parse = (s) => (s ? s.split(':') : [])
  const h = parse(head)
  const t = tail === undefined ? [] : parse(tail)
  // An embedded IPv4 tail (::ffff:1.2.3.4) is two groups.
  const last = tail === undefined ? h : t
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
 * first `subnet` bits (one client commonly holds a /64; 128: the whole
 * address, written without a prefix length); a port after the address
 * (`203.0.113.7:41234`, `[2001:db8::1]:41234`) is dropped.
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

// The default key of a request whose address is `ip`, under the gate's ipv6Subnet.
function defaultKey(g, req, res, ip) {
  if (typeof ip !== 'string' || ip === '') return undefined
  if (!ip.includes(':')) return ip
  let subnet = g.ipv6Subnet
  if (typeof subnet === 'function') {
    subnet = subnet(req, res)
    if (!Number.isInteger(subnet) || subnet < 1 || subnet > 128) subnet = 64
  }
  return subnet === false ? ipKeyGenerator(ip, false) : clientKey(ip, subnet)
}

// Set-up mistakes in how the client's address is read, as express-rate-limit
// reports them: X-Forwarded-For (or Forwarded) present but not trusted
// (behind a proxy, every client would share the proxy's bucket), or every
// X-Forwarded-For hop trusted (any client picks its own key). Each reported
// once. `trustOf(req)` says what the framework trusts; asked only of the
// first request that carries the header (it is set-up, the same for all).
function checkForwarded(g, req, trustOf, headers = req.headers) {
  if (g.forwardedChecked || headers === undefined) return
  const xff = headers['x-forwarded-for'] !== undefined
  if (!xff && headers.forwarded === undefined) return
  g.forwardedChecked = true
  const trusted = trustOf(req)
  if (trusted === false) {
    tellOnce(
      g,
      req,
      xff ? 'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR' : 'ERR_RATOMIC_UNTRUSTED_FORWARDED',
      `${g.face}: requests carry ${xff ? 'X-Forwarded-For' : 'Forwarded'} but no proxy is trusted, so each client is keyed by the connection's address: behind a proxy, every client shares the proxy's one bucket. Behind N proxies you run, set Express's 'trust proxy' (Fastify's trustProxy) to N${xff ? '' : ' and have them write X-Forwarded-For, which the frameworks read (Forwarded they do not)'}; if clients reach the app directly, leave it (the header is then whatever they wrote)`
    )
  } else if (trusted === true) {
    tellOnce(
      g,
      req,
      'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY',
      `${g.face}: 'trust proxy' is true, so every X-Forwarded-For hop is trusted and any client picks its own key by writing the header: set it to the number of proxies you run`
    )
  }
}

// ---------------------------------------------------------------------------
// Header templates.

// Slots of a template: the combined decision's limit, remaining, seconds
// until full and Retry-After; then per entry of a multi-limit decision its
// remaining, seconds until full and limit.
const L = 0
const R = 1
const T = 2
const A = 3
const ENTRY = 4
const PER_ENTRY = 3

// Two sets of sentinel numbers: core formats a decision of the first into
// the templates, and the templates must give what core gives for the second.
// Seconds stay below 9e6 so that a wait is a whole number of nanoseconds in
// a double (exact in core's conversion from milliseconds).
const SENTINELS = [
  { L: 8100000000001, R: 8200000000001, T: 7100001, A: 7200001, r: 8300000000001, t: 7300001, l: 8400000000001 },
  { L: 6100000000003, R: 6200000000003, T: 5100003, A: 5200003, r: 6300000000003, t: 5300003, l: 6400000000003 },
]

// The largest Structured Field integer (core writes larger counts as it) and
// the longest wait, in milliseconds, a template formats itself.
const MAX_SF_INTEGER = 999_999_999_999_999
const MAX_FAST_MS = 9e9

// The slot values of a set of sentinels, for `n` entries.
function sentinelValues(s, n) {
  const v = [s.L, s.R, s.T, s.A]
  for (let i = 0; i < n; i++) v.push(s.r + 100 * i, s.t + 100 * i, s.l + 100 * i)
  return v
}

// A decision carrying slot values `v` (allowed or not), with `n` entries named `names`.
function sentinelDecision(v, allowed, names, deniedMask = 0) {
  const d = { allowed, remaining: v[R], limit: v[L], retryAfterMs: allowed ? 0 : v[A] * 1000, resetAfterMs: v[T] * 1000 }
  if (names === null) return d
  d.entries = names.map((name, i) => {
    const at = ENTRY + PER_ENTRY * i
    const ok = (deniedMask & (1 << i)) === 0
    return { name, allowed: ok, remaining: v[at], limit: v[at + 2], retryAfterMs: ok ? 0 : v[A] * 1000, resetAfterMs: v[at + 1] * 1000 }
  })
  d.deniedBy = names.filter((_, i) => (deniedMask & (1 << i)) !== 0)
  return d
}

// `text` cut at the sentinel numbers of `v`: [text, slot, text, slot, ..., text].
function cut(text, v) {
  const bySentinel = new Map(v.map((n, i) => [String(n), i]))
  const parts = []
  let last = 0
  for (const m of text.matchAll(/\d+/g)) {
    const slot = bySentinel.get(m[0])
    if (slot === undefined) continue
    parts.push(text.slice(last, m.index), slot)
    last = m.index + m[0].length
  }
  parts.push(text.slice(last))
  return parts
}

function render(parts, v) {
  let s = parts[0]
  for (let i = 1; i < parts.length; i += 2) s += v[parts[i]] + parts[i + 1]
  return s
}

// Fields as templates: [{ name, parts }], and whether they give `expected`
// for slot values `v`.
function fieldTemplates(fields, v) {
  return fields.map(([name, value]) => ({ name, lower: name.toLowerCase(), parts: cut(value, v) }))
}

function sameFields(templates, fields, v) {
  return templates.length === fields.length && templates.every((f, i) => f.name === fields[i][0] && render(f.parts, v) === fields[i][1])
}

/**
 * The templates of one policy: `headers(d)` and `problem(d)` are core's for
 * the limiter, `names` the entries of a multi-limit decision (null for a
 * single limit), `drop` the fields not to write ({ allowed, denied }: lower
 * case names). Null when a template cannot be trusted (core's output for
 * the second sentinels differs from the template's): core formats every
 * decision then.
 */
function templates(headers, problem, names, drop) {
  const n = names === null ? 0 : names.length
  const [v1, v2] = SENTINELS.map((s) => sentinelValues(s, n))
  const keep = (dropped) => (fields) => fields.filter(([name]) => !dropped.has(name.toLowerCase()))
  const allowedOf = (v) => keep(drop.allowed)(headers(sentinelDecision(v, true, names)))
  const deniedOf = (v) => keep(drop.denied)(headers(sentinelDecision(v, false, names, n === 0 ? 0 : 1)))
  const allowed = fieldTemplates(allowedOf(v1), v1)
  const denied = fieldTemplates(deniedOf(v1), v1)
  if (!sameFields(allowed, allowedOf(v2), v2) || !sameFields(denied, deniedOf(v2), v2)) return null
  const t = { allowed, denied, names, problems: new Map(), problem, v1, v2 }
  // A single limit's problem body is one template; a multi-limit one is one
  // per set of members that denied, made when first needed.
  if (problemTemplate(t, 0) === null) return null
  return t
}

// The problem body template of `t` when the entries in `mask` denied
// (a single limit: mask 0), or null if it cannot be trusted.
function problemTemplate(t, mask) {
  let p = t.problems.get(mask)
  if (p !== undefined) return p
  const single = t.names === null
  const of = (v) => t.problem(sentinelDecision(v, false, t.names, single ? 0 : mask))
  const parts = cut(of(t.v1), t.v1)
  p = render(parts, t.v2) === of(t.v2) ? { parts, ascii: parts.every((x) => typeof x !== 'string' || /^[\x20-\x7e]*$/.test(x)) } : null
  if (t.problems.size < MAX_TEMPLATES) t.problems.set(mask, p)
  return p
}

// Slot values of decision `d` into `v`; false when `d` is outside the range
// the templates format (core formats it then).
function fill(v, d, t) {
  const limit = d.limit
  const remaining = d.remaining
  const reset = d.resetAfterMs
  const retry = d.retryAfterMs
  if (!(limit <= MAX_SF_INTEGER && remaining <= MAX_SF_INTEGER && reset < MAX_FAST_MS && retry < MAX_FAST_MS)) return false
  v[L] = limit
  v[R] = remaining
  v[T] = Math.ceil(reset / 1000)
  v[A] = retry > 0 ? Math.ceil(retry / 1000) : 1
  if (t.names !== null) {
    const entries = d.entries
    if (entries === undefined || entries.length !== t.names.length) return false
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]
      if (e.name !== t.names[i] || !(e.remaining <= MAX_SF_INTEGER && e.limit <= MAX_SF_INTEGER && e.resetAfterMs < MAX_FAST_MS)) return false
      const at = ENTRY + PER_ENTRY * i
      v[at] = e.remaining
      v[at + 1] = Math.ceil(e.resetAfterMs / 1000)
      v[at + 2] = e.limit
    }
  }
  return true
}

// The slot values of the request being answered (one at a time: nothing
// awaits between filling and writing).
const V = []

// ---------------------------------------------------------------------------
// The gate: one middleware's limiter, policy and settings.

const KEYED = 1 // TokenBucket, FixedWindow, SlidingWindow: allow(key, cost)
const MULTI = 2 // Limiter: allow(key, cost), entries
const STACK = 3 // Stack: allow(keys, cost), entries
const DIRECT = 4 // DirectTokenBucket: allow(cost)
const QUOTAS = 5 // Quotas: allow(key, quota, cost)
const DYNAMIC = 6 // a FixedWindow per limit a function returns
// A limiter whose state is in a shared backend (ratomic/redis, ratomic/postgres):
// the same calls as an in-memory one, awaited, its decisions with a source.
const REMOTE = 7 // Redis/Postgres TokenBucket, FixedWindow, SlidingWindow: awaited
const REMOTE_MULTI = 8 // RedisLimiter, PostgresLimiter: awaited, entries

function kindOf(limiter) {
  if (limiter instanceof Limiter) return MULTI
  if (limiter instanceof BaseLimiter) return KEYED
  if (limiter instanceof Stack) return STACK
  if (limiter instanceof DirectTokenBucket) return DIRECT
  if (limiter instanceof Quotas) return QUOTAS
  if (limiter instanceof RedisLimiter || limiter instanceof PostgresLimiter) return REMOTE_MULTI
  if (limiter instanceof RedisBase || limiter instanceof PostgresBase) return REMOTE
  return 0
}

/**
 * A middleware's gate from settings `s` (express.js and fastify.js read
 * their options into these; every value checked there or here, at set-up):
 * - face: 'ratomic/express' | 'ratomic/fastify', for messages;
 * - limiter, or limit (number, rate string or function) and windowMs
 *   (number or function) for the default FixedWindow;
 * - name: the policy's name (string) or a function of the request;
 * - draft: false | 'draft-11' | 'draft-7' | 'draft-6'; legacy: boolean;
 *   drop: { allowed, denied }, sets of lower-case field names not to write;
 * - keyGenerator, ipv6Subnet, cost, quota, skip;
 * - refund: null or { successful, failed, wasSuccessful };
 * - passOnStoreError, onLimiterError, checks (validate), requestPropertyName.
 */
function gate(s) {
  const face = s.face
  let limiter = s.limiter
  let kind
  let dynamic = null
  if (limiter === undefined) {
    if (typeof s.limit === 'function' || typeof s.windowMs === 'function') {
      // A limit (or window) per request: a FixedWindow for each the function returns.
      kind = DYNAMIC
      dynamic = { maxKeys: s.maxKeys, byRule: new Map() }
      limiter = null
    } else {
      limiter = fixedWindow(s.limit, s.windowMs, s.maxKeys)
      kind = KEYED
    }
  } else {
    kind = kindOf(limiter)
    if (kind === 0) {
      throw typeError(
        'limiter must be a ratomic TokenBucket, FixedWindow, SlidingWindow, Limiter, DirectTokenBucket, Stack or Quotas, or one of ratomic/redis (RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow, RedisLimiter) or ratomic/postgres (PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow, PostgresLimiter)'
      )
    }
  }
  if (kind === QUOTAS && s.quota === undefined) {
    throw typeError("a Quotas limiter takes each request's quota: pass quota, a rate string like '100/min' or a function of the request returning one (a customer's plan)")
  }
  if (kind !== QUOTAS && s.quota !== undefined) throw typeError('quota is for a Quotas limiter, whose quota comes with each request')
  const keyless = kind === DIRECT
  if (keyless && s.keyGenerator !== undefined) {
    throw typeError('keyGenerator has no use with a DirectTokenBucket, one bucket for every request (for per-client limits too, use a Stack)')
  }
  const multi = kind === MULTI || kind === STACK || kind === REMOTE_MULTI
  const names = multi ? limiter.names : null
  if (kind === STACK) {
    // A Limiter member has no single header policy: refused now, not on every request.
    const members = membersOf(limiter)
    const i = members.findIndex((m) => m instanceof Limiter)
    if (i >= 0) throw typeError(`stack member ${JSON.stringify(names[i])} is a Limiter, which has no single policy to write in the header fields: make it members of the stack, one per limit`)
  }
  const name = typeof s.name === 'string' ? s.name : 'default'
  const draft = s.draft
  const g = {
    face,
    kind,
    limiter,
    dynamic,
    multi,
    keyless,
    // A stack's members: each gets the request's one key, unless it has one per member.
    members: kind === STACK ? names.length : 0,
    async: kind === REMOTE || kind === REMOTE_MULTI,
    name,
    nameFn: typeof s.name === 'function' ? s.name : null,
    keyGenerator: s.keyGenerator === undefined ? null : s.keyGenerator,
    ipv6Subnet: s.ipv6Subnet === undefined ? 64 : s.ipv6Subnet,
    skip: s.skip === undefined ? null : s.skip,
    cost: s.cost === undefined ? 1 : s.cost,
    quota: s.quota,
    refund: s.refund || null,
    passOnStoreError: s.passOnStoreError === true,
    onLimiterError: s.onLimiterError,
    checks: s.checks || {},
    requestPropertyName: s.requestPropertyName === undefined ? 'rateLimit' : s.requestPropertyName,
    // What headers() is asked, and the templates of each policy (by name, or quota).
    headerOptions: Object.freeze({ ...(multi ? {} : { name }), legacy: s.legacy === true, ...(draft === false ? {} : { draft }) }),
    draft,
    drop: {
      allowed: new Set([...(draft === false ? STANDARD : []), ...(s.drop ? s.drop.allowed : [])]),
      denied: new Set([...(draft === false ? STANDARD : []), ...(s.drop ? s.drop.denied : [])]),
    },
    // decideInfo's shortcut: a TokenBucket, FixedWindow or SlidingWindow answering with ratomic's own allow.
    into: kind === KEYED && limiter.allow === KEYED_ALLOW,
    template: null,
    templates: new Map(),
    // Set-up mistakes already reported (each once).
    reported: new Set(),
    // Whether a request with X-Forwarded-For was checked against the trust settings.
    forwardedChecked: false,
    // For a refund: how to read the limiter's time, and the windows that bound a refund.
    refundPlan: null,
  }
  if (kind === DYNAMIC || (kind === QUOTAS && typeof s.quota === 'function')) {
    // Templates per limit or quota, made when first needed; the name is checked now.
    new FixedWindow(1, 1000).headers({ allowed: true, remaining: 0, limit: 1, retryAfterMs: 0, resetAfterMs: 0 }, { name })
  } else {
    // Check now, not on the first request, that the fields can be written
    // (a name no header can carry is a RangeError naming it), and make the templates.
    g.template = templatesOf(g, limiter, name, s.quota)
  }
  if (g.refund !== null) g.refundPlan = refundPlan(g)
  return g
}

// The standard fields of every draft: left out when standardHeaders is false.
const STANDARD = ['ratelimit-policy', 'ratelimit', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']

function fixedWindow(limit, windowMs, maxKeys) {
  const o = maxKeys === undefined ? undefined : { maxKeys }
  // A rate string ('10/second', '100 per 15 minutes') names its own window.
  return typeof limit === 'string' ? new FixedWindow(limit, o) : new FixedWindow(limit, windowMs, o)
}

// The FixedWindow of a limit and window a function returned, one per pair.
function dynamicLimiter(g, limit, windowMs) {
  const by = g.dynamic.byRule
  const rule = `${limit}/${windowMs}`
  let l = by.get(rule)
  if (l === undefined) {
    if (by.size >= MAX_DYNAMIC_LIMITS) {
      const e = new RangeError(`the limit function has returned more than ${MAX_DYNAMIC_LIMITS} different limits, each a limiter of its own; return one of a few (a plan's), or pass a Quotas limiter with quota`)
      e.code = 'ERR_RATOMIC_TOO_MANY_LIMITS'
      throw e
    }
    l = fixedWindow(limit, windowMs, g.dynamic.maxKeys)
    by.set(rule, l)
  }
  return l
}

// The templates of `limiter`'s policy named `name` (under `quota` for Quotas).
function templatesOf(g, limiter, name, quota) {
  const o = g.multi ? g.headerOptions : { ...g.headerOptions, name }
  const headers = g.kind === QUOTAS ? (d) => limiter.headers(d, quota, o) : (d) => limiter.headers(d, o)
  const problem = g.kind === QUOTAS ? (d) => limiter.problem(d, quota, { name }) : g.multi ? (d) => limiter.problem(d) : (d) => limiter.problem(d, { name })
  // Asked once with a real decision first: a bad name is core's error, as it is.
  headers({ allowed: true, remaining: 0, limit: 1, retryAfterMs: 0, resetAfterMs: 0, ...(g.multi ? multiSample(g, limiter) : {}) })
  const t = templates(headers, problem, g.multi ? limiter.names : null, g.drop)
  return { headers, problem, t, drop: g.drop }
}

function multiSample(g, limiter) {
  const allowed = { allowed: true, remaining: 0, limit: 1, retryAfterMs: 0, resetAfterMs: 0 }
  return { entries: limiter.names.map((n) => ({ ...allowed, name: n })), deniedBy: [] }
}

// The templates for a request whose policy name is `name` (a name function's),
// limiter `limiter` (a dynamic limit's) or quota `quota`.
function policyOf(g, limiter, name, quota) {
  if (g.template !== null && name === g.name) return g.template
  const id =
    g.kind === QUOTAS
      ? `${name}\u0000${typeof quota === 'string' ? quota : JSON.stringify(quota)}`
      : g.kind === DYNAMIC
        ? `${name}\u0000${limiter.rule.limit}/${limiter.rule.windowMs}`
        : name
  let p = g.templates.get(id)
  if (p === undefined) {
    p = templatesOf(g, limiter, name, quota)
    if (g.templates.size >= MAX_TEMPLATES) g.templates.clear()
    g.templates.set(id, p)
  }
  return p
}

/**
 * Writes the header fields of decision `d` under policy `p` with
 * `set(target, name, value)`; the names in lower case if `lower` (Fastify
 * lowers every name it is given: one it need not lower is not copied).
 */
function writeFields(p, d, set, target, lower) {
  const t = p.t
  if (t !== null && fill(V, d, t)) {
    const fields = d.allowed ? t.allowed : t.denied
    for (let i = 0; i < fields.length; i++) {
      const f = fields[i]
      set(target, lower ? f.lower : f.name, f.parts.length === 1 ? f.parts[0] : render(f.parts, V))
    }
    return
  }
  const dropped = d.allowed ? p.drop.allowed : p.drop.denied
  for (const [name, value] of p.headers(d)) {
    const l = name.toLowerCase()
    if (!dropped.has(l)) set(target, lower ? l : name, value)
  }
}

/** The problem body of denial `d` under policy `p`. */
function problemBody(p, d) {
  const t = p.t
  if (t !== null && fill(V, d, t)) {
    let mask = 0
    if (t.names !== null) for (let i = 0; i < d.entries.length; i++) if (!d.entries[i].allowed) mask |= 1 << i
    const pt = problemTemplate(t, mask)
    if (pt !== null) return render(pt.parts, V)
  }
  return p.problem(d)
}

// ---------------------------------------------------------------------------
// Deciding.

/**
 * The decision of charging `cost` to `key` under `limiter` (a dynamic
 * limit's, else the gate's; `quota` for a Quotas limiter), or a promise of
 * it (Redis). Throws what the limiter throws.
 */
function take(g, limiter, key, quota, cost) {
  const one = cost === 1
  switch (g.kind) {
    case KEYED:
    case MULTI:
    case DYNAMIC:
    case REMOTE:
    case REMOTE_MULTI:
      return one ? limiter.allow(key) : limiter.allow(key, cost)
    case STACK:
      // One key is every member's; an array is one per member (a wrong length is the stack's RangeError).
      return limiter.allow(Array.isArray(key) ? key : new Array(g.members).fill(key), cost)
    case DIRECT:
      return one ? limiter.allow() : limiter.allow(cost)
    case QUOTAS:
      return limiter.allow(key, quota, cost)
  }
  throw new Error('unreachable')
}

// The cost a request took, for its refund.
function costOf(g, req) {
  return typeof g.cost === 'function' ? g.cost(req) : g.cost
}

// A request the limiter could not decide. Its backend failing (Redis under
// onError "raise") is answered as passOnStoreError says: a 503 (fail closed,
// the default) or through (fail open: status 0). Anything else is about the
// request (a key too long, a cost above the limit, a stack's keys not one
// per member): a 400 either way, since letting it through would let any
// client skip the limit by sending, say, a long key. The client gets a
// generic problem document; onLimiterError gets the error.
function unjudged(g, req, e) {
  if (e && e.code === 'ERR_RATOMIC_BACKEND') {
    const status = g.passOnStoreError ? 0 : 503
    const what = status ? 'requests are refused with a 503' : 'requests are let through unchecked (passOnStoreError)'
    tell(g, req, report('ERR_RATOMIC_BACKEND', status, `${g.face}: the rate limiter's backend failed; ${what}`, e))
    return status
  }
  if (e && e.code === 'ERR_RATOMIC_TOO_MANY_LIMITS') {
    tellOnce(g, req, e.code, `${g.face}: ${e.message}; such requests are refused with a 500`)
    return 500
  }
  tell(g, req, report('ERR_RATOMIC_BAD_REQUEST', 400, `${g.face}: a request cannot be rate limited and is refused with a 400`, e))
  return 400
}

// A request without a key. From the default key (no client address): a
// set-up mistake, a 500 for the server's own fault, reported once. From
// keyGenerator: that request's, a 400.
function keyMissing(g, req, byDefault) {
  if (byDefault) {
    tellOnce(
      g,
      req,
      'ERR_RATOMIC_NO_CLIENT_ADDRESS',
      `${g.face}: a request has no client address (req.ip and the socket's remoteAddress are both missing), so the default key cannot be made and such requests are refused with a 500: pass keyGenerator (a user id, an API key)`
    )
    return 500
  }
  tell(g, req, report('ERR_RATOMIC_BAD_REQUEST', 400, `${g.face}: keyGenerator gave no key; the request is refused with a 400`))
  return 400
}

// The Redis limiter answered by its own onError: Redis is failing.
function checkSource(g, req, d) {
  if (d.source === 'policy' || d.source === 'fallback') {
    tell(g, req, report('ERR_RATOMIC_BACKEND_POLICY', 0, `${g.face}: the limiter's backend is failing; its own onError answers (source '${d.source}')`))
  }
}

/**
 * What the request is left (`req.rateLimit` by default): express-rate-limit's
 * fields (`limit`, `used`, `remaining`, `resetTime`, `key`) and the
 * decision's own (`allowed`, `retryAfterMs`, `resetAfterMs`; a multi-limit
 * decision's `entries` and `deniedBy`; a Redis or PostgreSQL decision's `source`).
 * `resetTime` is made when first read (a Date a request is garbage most
 * requests never look at), and JSON has it as a field.
 */
class RateLimitInfo {
  #resetAt
  #resetTime
  constructor(allowed, remaining, limit, retryAfterMs, resetAfterMs, entries, deniedBy, source, key, now) {
    this.limit = limit
    this.used = limit - remaining
    this.remaining = remaining
    this.key = key
    this.allowed = allowed
    this.retryAfterMs = retryAfterMs
    this.resetAfterMs = resetAfterMs
    this.entries = entries
    this.deniedBy = deniedBy
    this.source = source
    this.#resetAt = now + resetAfterMs
    this.#resetTime = undefined
  }

  /** When the key is full again, on the wall clock. */
  get resetTime() {
    if (this.#resetTime === undefined) this.#resetTime = new Date(this.#resetAt)
    return this.#resetTime
  }

  toJSON() {
    const { limit, used, remaining, resetTime, key, allowed, retryAfterMs, resetAfterMs, entries, deniedBy, source } = this
    return { limit, used, remaining, resetTime, key, allowed, retryAfterMs, resetAfterMs, entries, deniedBy, source }
  }

  [Symbol.for('nodejs.util.inspect.custom')](depth, options, inspect) {
    return `RateLimitInfo ${inspect(this.toJSON(), options)}`
  }
}

/** What the request is left of decision `d` on `key`, made at `now` (Date.now()). */
function infoOf(d, key, now) {
  return new RateLimitInfo(d.allowed, d.remaining, d.limit, d.retryAfterMs, d.resetAfterMs, d.entries, d.deniedBy, d.source, key, now)
}

function singleInfo(allowed, remaining, limit, retryAfterMs, resetAfterMs, key) {
  return new RateLimitInfo(allowed, remaining, limit, retryAfterMs, resetAfterMs, undefined, undefined, undefined, key, Date.now())
}

/**
 * The common set-up's decision (an in-memory limiter, nothing per request)
 * as the request's record at once: a TokenBucket's, FixedWindow's or
 * SlidingWindow's numbers go straight into it, with no decision object
 * besides (writeFields and problemBody read the record as the decision).
 * Throws what the limiter throws.
 */
function decideInfo(g, key) {
  if (g.into) return allowInto(g.limiter, key, g.cost, singleInfo)
  return infoOf(take(g, g.limiter, key, g.quota, g.cost), key, Date.now())
}

// Leaves `info` on `req` as `req[prop]`. Express gives every request object
// a hidden class of its own (it swaps the prototype to the app's), so a
// property added to it costs V8 a new map each time — measured at about
// 1 µs a request in the middleware benchmark, as much as the rest of the
// middleware — and a WeakMap keyed by the request costs nearly as much
// (the request's identity hash made, an ephemeron for the collector). So
// `req[prop]` is an accessor that reads the decision from `res.locals`,
// Express's object for what is scoped to one request (a dictionary: a
// symbol added to it changes no hidden class), under a symbol of ratomic's
// (template engines and JSON see only string keys; `{ ...res.locals }`
// copies it along). Assigning to `req[prop]` stores there too. Where there
// is no `res.locals` (a response Express did not set up, or `res.locals`
// replaced by one without the symbol) the accessor falls back to a WeakMap.
//
// The accessor goes on Express's own request prototype, the last before
// Node's IncomingMessage.prototype, which every app's request prototype
// inherits — a mounted sub-app's too, so the decision stays readable after
// the request leaves a sub-app that limited it (Express then puts back the
// parent's prototype). An app whose request has nothing to read gets
// `undefined`, as without the accessor. A request whose prototype chain
// does not reach Node's (a plain `http` request: Node's prototype is not
// ours to change), or where some prototype on the way has `prop` of its
// own, gets the property itself; so does a request that had `prop` of its
// own when its prototype was first seen (another middleware that set it
// before the accessor was made).
const slots = new Map()

function slotOf(prop) {
  const values = new WeakMap()
  const sym = Symbol(`ratomic ${prop}`)
  const localsOf = (res) => {
    const l = res === undefined || res === null ? undefined : res.locals
    return l !== null && typeof l === 'object' ? l : undefined
  }
  // Stores `v` as `req`'s, `res` being the request's response.
  const put = (req, res, v) => {
    const l = localsOf(res)
    if (l !== undefined) l[sym] = v
    else values.set(req, v)
  }
  const accessor = {
    get() {
      const l = localsOf(this.res)
      const v = l === undefined ? undefined : l[sym]
      return v !== undefined ? v : values.get(this)
    },
    set(v) {
      put(this, this.res, v)
    },
    configurable: true,
  }
  // protos: prototypes the accessor serves; bare: prototypes whose requests
  // keep the property themselves (no home for the accessor), so that their
  // chain is walked once, not on every request (an HTTP/2 compatibility
  // request's goes four prototypes deep).
  return { put, accessor, proto: undefined, protos: new WeakSet(), bare: new WeakSet() }
}

// Where `req[prop]`'s accessor goes for requests of prototype `proto`: the
// last prototype before Node's IncomingMessage.prototype, or null (the
// request keeps the property itself) when the chain does not reach Node's,
// something on the way has `prop` of its own (but this accessor), or the
// prototype cannot take it.
function accessorHome(proto, prop, accessor) {
  let home = null
  for (let o = proto; o !== null && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    if (o === http.IncomingMessage.prototype) return home !== null && Object.isExtensible(home) ? home : null
    const own = Object.getOwnPropertyDescriptor(o, prop)
    if (own !== undefined && own.get !== accessor.get) return null
    home = o
  }
  return null
}

function leave(req, prop, info, res) {
  let slot = slots.get(prop)
  if (slot === undefined) {
    slot = slotOf(prop)
    slots.set(prop, slot)
  }
  const proto = Object.getPrototypeOf(req)
  if (proto !== slot.proto) {
    if (!slot.protos.has(proto)) {
      const home = slot.bare.has(proto) ? null : accessorHome(proto, prop, slot.accessor)
      if (home === null) {
        slot.bare.add(proto)
        req[prop] = info
        return
      }
      if (!Object.hasOwn(home, prop)) Object.defineProperty(home, prop, slot.accessor)
      slot.protos.add(proto)
    }
    slot.proto = proto
    if (Object.hasOwn(req, prop)) {
      req[prop] = info
      return
    }
  }
  // The accessor reads `req.res`, which Express sets to `res`.
  slot.put(req, res, info)
}

// ---------------------------------------------------------------------------
// Refunds: skipSuccessfulRequests / skipFailedRequests.

// How a gate's refunds are bounded. A token bucket takes a refund at any
// time: the state it leaves is never more generous than had the request not
// been made. A window does not: given back after its window ended, a count
// would be taken off the next window's (one call more than the limit there),
// so a refund is made only while the window the request was counted in is
// still the current one: `windowMs` of each windowed limit, read on the
// limiter's own clock (`now`).
function refundPlan(g) {
  const l = g.limiter
  const windowsOf = (rules) => rules.filter((r) => r.algorithm !== 'tokenBucket').map((r) => r.windowMs)
  switch (g.kind) {
    case KEYED:
      return { now: () => l.now(), windows: windowsOf([l.rule]) }
    case MULTI:
      return { now: () => l.now(), windows: windowsOf(Object.values(l.rules)) }
    case STACK: {
      const members = membersOf(l)
      const rules = members.flatMap((m) => (m instanceof DirectTokenBucket ? [] : m instanceof Limiter ? Object.values(m.rules) : [m.rule]))
      return { now: () => members[0].now(), windows: windowsOf(rules) }
    }
    case DIRECT:
    case QUOTAS:
      return { now: null, windows: [] }
    case DYNAMIC:
      return { now: 'limiter', windows: 'limiter' }
    case REMOTE:
      if (l instanceof RedisTokenBucket || l instanceof PostgresTokenBucket) return { now: null, windows: [] }
      if (l instanceof RedisFixedWindow || l instanceof PostgresFixedWindow) return { now: 'local', windows: 'decision' }
      break
  }
  throw typeError(
    `${g.face}: skipSuccessfulRequests and skipFailedRequests give a request's tokens back when its response is in, which a ${l.constructor.name} cannot do exactly (it does not say when the window the request was counted in ends): use a RedisTokenBucket, RedisFixedWindow, PostgresTokenBucket or PostgresFixedWindow, or an in-memory limiter`
  )
}

// What a refund needs to know of the decision: when the windows the request
// was counted in end (Infinity: no window), in the time `now` reads.
function refundDeadline(g, limiter, d, before) {
  const plan = g.refundPlan
  if (plan.windows === 'decision') return before + d.resetAfterMs // a Redis or Postgres FixedWindow: until the window's end, from before the call
  const windows = plan.windows === 'limiter' ? [limiter.rule.windowMs] : plan.windows
  let end = Infinity
  // Windows are aligned to the limiter's clock: the one holding `before`
  // (read before the call, so never later than the one counted in) ends at
  // the next multiple of its length.
  for (const w of windows) end = Math.min(end, (Math.floor(before / w) + 1) * w)
  return end
}

/**
 * Arranges the refund of an allowed request, `limiter` charged `cost` on
 * `key` at `before` (the limiter's time read before the call): when the
 * response is in, if `refund.successful` and the response was successful,
 * or `refund.failed` and it was not (or the connection closed before it was
 * sent, or failed), the cost is given back — once, and only while the
 * window it was counted in lasts.
 */
function arrangeRefund(g, req, res, limiter, key, quota, cost, d, before, wasSuccessful) {
  const r = g.refund
  const deadline = before === undefined ? Infinity : refundDeadline(g, limiter, d, before)
  let done = false
  const give = () => {
    if (done) return
    done = true
    refundNow(g, req, limiter, key, quota, cost, deadline)
  }
  res.once('finish', () => {
    let ok
    try {
      ok = wasSuccessful(req, res)
    } catch (e) {
      tell(g, req, report('ERR_RATOMIC_REFUND', 0, `${g.face}: requestWasSuccessful threw; the request stays counted`, e))
      done = true
      return
    }
    const decide = (success) => {
      if (success ? r.successful : r.failed) give()
      else done = true
    }
    if (isThenable(ok)) ok.then(decide, (e) => tell(g, req, report('ERR_RATOMIC_REFUND', 0, `${g.face}: requestWasSuccessful failed; the request stays counted`, e)))
    else decide(ok)
  })
  if (r.failed) {
    // The connection closed before the response was sent, or the response failed.
    res.once('close', () => {
      if (!res.writableEnded) give()
    })
    res.once('error', give)
  }
}

function refundNow(g, req, limiter, key, quota, cost, deadline) {
  const plan = g.refundPlan
  const local = plan.now === 'local'
  const now = deadline === Infinity ? undefined : local ? () => performance.now() : plan.now === 'limiter' ? () => limiter.now() : plan.now
  try {
    if (now !== undefined && now() >= deadline) return // the window has ended: nothing to give back to
    let p
    switch (g.kind) {
      case STACK:
        p = limiter.refund(Array.isArray(key) ? key : new Array(g.members).fill(key), cost)
        break
      case DIRECT:
        p = limiter.refund(cost)
        break
      case QUOTAS:
        p = limiter.refund(key, quota, cost)
        break
      default:
        p = limiter.refund(key, cost)
    }
    const after = () => {
      // Made after the window ended (the time moved on during the call): the
      // tokens may have gone to the next window, so they are taken again.
      if (now !== undefined && now() >= deadline) return take(g, limiter, key, quota, cost)
    }
    if (isThenable(p)) {
      p.then(after).then(undefined, (e) => tell(g, req, report('ERR_RATOMIC_REFUND', 0, `${g.face}: a refund failed; the request stays counted`, e)))
    } else {
      after()
    }
  } catch (e) {
    tell(g, req, report('ERR_RATOMIC_REFUND', 0, `${g.face}: a refund failed; the request stays counted`, e))
  }
}

/** The time a refund's deadline is read in, before the call; undefined if no refund needs one. */
function timeBefore(g, limiter) {
  const plan = g.refundPlan
  if (plan === null || plan.now === null) return undefined
  if (plan.now === 'local') return performance.now()
  if (plan.now === 'limiter') return limiter.now()
  return plan.now()
}

// ---------------------------------------------------------------------------
// Middleware helpers: resetKey / getKey.

// The key (or keys, for a stack) of `key` as the limiter takes it.
function keysOf(g, key) {
  return g.kind === STACK && !Array.isArray(key) ? new Array(g.members).fill(key) : key
}

/** Forgets `key` (a Quotas limiter: under `quota`): it is full again. */
function resetKey(g, key, quota) {
  if (g.kind === DIRECT) return g.limiter.reset()
  if (g.kind === QUOTAS) return g.limiter.reset(key, quota === undefined ? g.quota : quota)
  if (g.kind === DYNAMIC) {
    for (const l of g.dynamic.byRule.values()) l.reset(key)
    return undefined
  }
  return g.limiter.reset(keysOf(g, key))
}

/**
 * express-rate-limit's getKey: `{ totalHits, resetTime }` of `key` (a
 * promise), from a peek that charges nothing; undefined if the key is full.
 */
async function getKey(g, key) {
  if (g.kind === DYNAMIC) return undefined
  const d = await (g.kind === DIRECT ? g.limiter.peek(0) : g.kind === QUOTAS ? g.limiter.peek(key, g.quota, 0) : g.limiter.peek(keysOf(g, key), 0))
  const used = d.limit - d.remaining
  return used === 0 ? undefined : { totalHits: used, resetTime: new Date(Date.now() + d.resetAfterMs) }
}

module.exports = {
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
  RateLimitInfo,
  infoOf,
  decideInfo,
  leave,
  arrangeRefund,
  timeBefore,
  resetKey,
  getKey,
  defaultKey,
  clientKey,
  checkForwarded,
  ipKeyGenerator,
  warnEvery,
  toLogger,
  tell,
  tellOnce,
  report,
  isThenable,
  typeError,
  PROBLEMS,
  PROBLEM_CONTENT_TYPE,
  KINDS: { KEYED, MULTI, STACK, DIRECT, QUOTAS, DYNAMIC, REMOTE, REMOTE_MULTI },
}
