// Types of `ratomic/express`: Connect-style rate-limiting middleware with
// express-rate-limit's option names.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BaseLimiter, Decision, DirectTokenBucket, HeaderDraft, Key, MultiDecision, Stack } from './ratomic'
import type { RedisBase, RedisDecision, RedisMultiDecision } from './redis'

/** The options of `rateLimit` (and of the `ratomic/fastify` plugin), named as in express-rate-limit. */
export interface RateLimitOptions<Req = IncomingMessage, Res = ServerResponse> {
  /**
   * Any ratomic limiter, in memory or on Redis (`ratomic/redis`, awaited; a Redis failure under
   * `onError: "raise"` is a backend failure: see `passOnStoreError`); default: a
   * `FixedWindow` of `limit` per `windowMs`. A `Stack` gives every member the request's key
   * (or `keyGenerator`'s one key per member) and writes one header item per member; a stack
   * with a `Limiter` member, which has no single header policy, is a TypeError here. A
   * `DirectTokenBucket` limits every request together: no key is made (a `keyGenerator` with it
   * is a TypeError); its fields are named `name`.
   */
  limiter?: BaseLimiter<any> | DirectTokenBucket | Stack | RedisBase<any>
  /**
   * Requests per window per client when no `limiter` is given (default 5), or a rate string that
   * names its window too (`'10/second'`, `'100 per 15 minutes'`; then no `windowMs`).
   */
  limit?: number | string
  /** The window in milliseconds when no `limiter` is given and `limit` is a number (default 60000). */
  windowMs?: number
  /**
   * The client's key; default its address (`req.ip`, else the socket's peer), IPv6 grouped by
   * `ipv6Subnet`. For a `Stack`: one key for every member, or an array of one key per member
   * (another length is a request the stack cannot judge: a 400). No key (undefined or null) is a
   * 400 too. Not for a `DirectTokenBucket`, which has no key.
   */
  keyGenerator?: (req: Req, res: Res) => Key | Key[] | Promise<Key | Key[]>
  /** Requests for which this returns true are not limited. */
  skip?: (req: Req, res: Res) => boolean | Promise<boolean>
  /** Answers a denied request instead of the default 429 problem response. */
  handler?: (req: Req, res: Res, next: ((err?: unknown) => void) | undefined, options: RateLimitOptions<Req, Res>) => unknown
  /** The denial's status (default 429). */
  statusCode?: number
  /** The denial's body instead of the RFC 9457 problem document. */
  message?: string | object | ((req: Req, res: Res) => string | object | Promise<string | object>)
  /**
   * The IETF standard fields: on (default, and `true`: draft 11's `RateLimit-Policy` / `RateLimit`),
   * off, or an earlier draft's form by express-rate-limit's name (`'draft-6'`, `'draft-7'`; `'draft-8'`
   * is draft 11's). Unlike express-rate-limit, `true` means draft 11, not draft 6.
   */
  standardHeaders?: boolean | HeaderDraft
  /** Also the `X-RateLimit-Limit`, `-Remaining` and `-Reset` fields (default off). */
  legacyHeaders?: boolean
  /** Bits of an IPv6 address that name one client (default 64). */
  ipv6Subnet?: number
  /** Where the decision is left on the request (default `rateLimit`). */
  requestPropertyName?: string
  /** Tokens a request takes (default 1), or a function of the request. */
  cost?: number | ((req: Req) => number)
  /** The limit's name in the header fields (single-rule limiters; default `"default"`). */
  name?: string
  /**
   * When the limiter's backend fails (a `ratomic/redis` limiter whose `onError` is `"raise"`), let
   * requests through unchecked (fail open) instead of the default 503 with `Retry-After: 1` (fail
   * closed). A request the limiter cannot judge (a key too long, a cost above the limit, a stack's
   * keys not one per member) is a 400 either way; a request with no client address for the default
   * key is a 500. Each is a generic RFC 9457 document: the reason goes to `onLimiterError`.
   */
  passOnStoreError?: boolean
  /**
   * Told what the client is not: every request the limiter could not decide, and once each, a
   * set-up mistake. `error.code` is `ERR_RATOMIC_BACKEND` (the backend failed), `ERR_RATOMIC_BACKEND_POLICY`
   * (a Redis limiter's own `onError` answered), `ERR_RATOMIC_BAD_REQUEST` (a request the limiter
   * cannot judge), `ERR_RATOMIC_NO_CLIENT_ADDRESS`, `ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR` or
   * `ERR_RATOMIC_PERMISSIVE_TRUST_PROXY`; `error.status` is the status the client got (0: let
   * through); `error.cause` is the limiter's error. Default: `console.warn`, each code at once, then
   * at most once a minute with the count since. Route it to your logger:
   * `onLimiterError: (err, req) => req.log.warn({ err }, err.message)`.
   */
  onLimiterError?: (error: LimiterError, req: Req) => void
}

/** What `onLimiterError` is told. */
export interface LimiterError extends Error {
  code:
    | 'ERR_RATOMIC_BACKEND'
    | 'ERR_RATOMIC_BACKEND_POLICY'
    | 'ERR_RATOMIC_BAD_REQUEST'
    | 'ERR_RATOMIC_NO_CLIENT_ADDRESS'
    | 'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR'
    | 'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY'
  /** The status the client was answered (0: the request went through). */
  status: number
  cause?: unknown
}

/** The decision left on the request (`req.rateLimit` by default). */
export type RequestRateLimit = Decision | MultiDecision | RedisDecision | RedisMultiDecision

/** Middleware for Express and plain `http`: `app.use(rateLimit({ limit: 100, windowMs: 60_000 }))`. */
export declare function rateLimit<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  options?: RateLimitOptions<Req, Res>,
): (req: Req, res: Res, next: (err?: unknown) => void) => void | Promise<void>
export default rateLimit

/**
 * The key the middleware gives a client by default, from its address (IPv4 as is, IPv6 grouped
 * by its first `ipv6Subnet` bits, default 64; `false`: the whole address): for a `keyGenerator`
 * that combines it with others, say a Stack's per-IP member. express-rate-limit 8 has the same name.
 */
export declare function ipKeyGenerator(ip: string, ipv6Subnet?: number | false): string
