// Types of `ratomic/express`: Connect-style rate-limiting middleware with
// express-rate-limit's option names.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BaseLimiter, Decision, DirectTokenBucket, HeaderDraft, Key, MultiDecision, Stack } from './ratomic'
import type { RedisBase, RedisDecision, RedisMultiDecision } from './redis'

/** The options of `rateLimit` (and of the `ratomic/fastify` plugin), named as in express-rate-limit. */
export interface RateLimitOptions<Req = IncomingMessage, Res = ServerResponse> {
  /**
   * Any ratomic limiter, in memory or on Redis (`ratomic/redis`, awaited; a Redis failure under
   * `onError: "raise"` is a request it cannot judge: see `passOnStoreError`); default: a
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
   * (another length is a request the stack cannot judge: see `passOnStoreError`). Not for a
   * `DirectTokenBucket`, which has no key.
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
   * When the limiter cannot judge a request (a key too long, a stack's keys not one per member,
   * Redis failing), let it through instead of a 429.
   */
  passOnStoreError?: boolean
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
