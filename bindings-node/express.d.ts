// Types of `ratomic/express`: Connect-style rate-limiting middleware with
// express-rate-limit 8's options. The module is the function, as
// express-rate-limit's is: `require('ratomic/express')(options)`,
// `import rateLimit from 'ratomic/express'`, `import { rateLimit } from 'ratomic/express'`.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { BaseLimiter, DirectTokenBucket, HeaderDraft, Key, NamedDecision, Quotas, QuotaSpec, Stack } from './ratomic'
import type { RedisBase, Source } from './redis'
import type { PostgresBase, PostgresSource } from './postgres'

declare namespace rateLimit {
  /** A value, or a function of the request giving it (a promise of it, too). */
  type ValueOf<T, Req, Res> = T | ((req: Req, res: Res) => T | Promise<T>)

  /**
   * The options of `rateLimit`: express-rate-limit 8's, with the same meaning, and ratomic's own
   * (`limiter`, `cost`, `quota`, `name`, `onLimiterError`). Where ratomic differs on purpose: the
   * standard fields are on by default (draft 11) and the legacy ones off; a denial's body is an RFC
   * 9457 problem document unless `message` or `handler` say otherwise; a denial is not counted.
   * express-rate-limit's `store`, `headers`, `onLimitReached`, `draft_polli_ratelimit_headers` and
   * `retryAfter` are TypeErrors naming what to use.
   */
  interface RateLimitOptions<Req = IncomingMessage, Res = ServerResponse> {
    /**
     * Any ratomic limiter, in memory, on Redis (`ratomic/redis`) or in PostgreSQL
     * (`ratomic/postgres`), the last two awaited (a backend failure under `onError: "raise"`:
     * see `passOnStoreError`); default: a `FixedWindow` of
     * `limit` per `windowMs`. A `Stack` gives every member the request's key (or `keyGenerator`'s
     * one key per member) and writes one header item per member; a stack with a `Limiter` member,
     * which has no single header policy, is a TypeError here. A `DirectTokenBucket` limits every
     * request together: no key is made (a `keyGenerator` with it is a TypeError). `Quotas` takes
     * each request's `quota`.
     */
    limiter?: BaseLimiter<any> | DirectTokenBucket | Stack | Quotas | RedisBase<any> | PostgresBase<any>
    /**
     * Requests per window per client when no `limiter` is given (default 5); a rate string that
     * names its window too (`'10/second'`, `'100 per 15 minutes'`; then no `windowMs`); or a function
     * of the request (a limit per plan: a `FixedWindow` for each limit it returns, at most 64).
     */
    limit?: number | string | ((req: Req, res: Res) => number | Promise<number>)
    /** `limit`'s older name. */
    max?: number | string | ((req: Req, res: Res) => number | Promise<number>)
    /** The window in milliseconds when no `limiter` is given and `limit` is a number (default 60000). */
    windowMs?: number
    /**
     * The client's key; default its address (`req.ip`, else the socket's peer), IPv6 grouped by
     * `ipv6Subnet`. For a `Stack`: one key for every member, or an array of one key per member
     * (another length is a request the stack cannot judge: a 400). No key (undefined or null) is a
     * 400 too. Not for a `DirectTokenBucket`, which has no key.
     */
    keyGenerator?: (req: Req, res: Res) => Key | Key[] | Promise<Key | Key[]>
    /** Requests for which this returns true are not limited, counted or given fields. */
    skip?: (req: Req, res: Res) => boolean | Promise<boolean>
    /** Answers a denied request instead of the default: given the options in force (`options.message`, `options.statusCode`). */
    handler?: (req: Req, res: Res, next: (err?: unknown) => void, options: Readonly<RateLimitOptions<Req, Res> & { statusCode: number; message: unknown }>) => unknown
    /** The denial's status (default 429). */
    statusCode?: number
    /**
     * The denial's body instead of the RFC 9457 problem document, sent with Express's `res.send`
     * as express-rate-limit sends it (a string as HTML, an object as JSON).
     */
    message?: ValueOf<unknown, Req, Res>
    /**
     * The IETF standard fields: draft 11's `RateLimit-Policy` / `RateLimit` by default;
     * express-rate-limit's `true` (draft 6), `'draft-6'`, `'draft-7'`, `'draft-8'` (draft 11's
     * fields), or `false` (none: a denial keeps `Retry-After`).
     */
    standardHeaders?: boolean | HeaderDraft
    /**
     * Also `X-RateLimit-Limit`, `-Remaining` and `-Reset` (default off; express-rate-limit 8 sends
     * them by default). `X-RateLimit-Reset` is seconds until full, not a Unix time.
     */
    legacyHeaders?: boolean
    /** The policy's name in the standard fields (default `"default"`), or a function of the request. */
    identifier?: ValueOf<string, Req, Res>
    /** `identifier`'s ratomic name (a string). */
    name?: string
    /** Gives a request's tokens back when its response is successful (`requestWasSuccessful`). */
    skipSuccessfulRequests?: boolean
    /** Gives a request's tokens back when its response failed, or its connection closed before it was sent. */
    skipFailedRequests?: boolean
    /** What a success is, for the two options above (default: a status below 400). */
    requestWasSuccessful?: (req: Req, res: Res) => boolean | Promise<boolean>
    /** Bits of an IPv6 address that name one client (default 64), false for the whole address, or a function of the request. */
    ipv6Subnet?: number | false | ((req: Req, res: Res) => number)
    /**
     * Where the decision is left on the request (default `rateLimit`). On an Express request it is
     * kept in `res.locals` under a symbol (no key a template or JSON sees); replacing `res.locals`
     * with a fresh object after the limiter hides it.
     */
    requestPropertyName?: string
    /** Tokens a request takes (default 1), or a function of the request. */
    cost?: number | ((req: Req) => number)
    /** A `Quotas` limiter's quota: one for every request, or a function of the request (a customer's plan). */
    quota?: QuotaSpec | ((req: Req, res: Res) => QuotaSpec | Promise<QuotaSpec>)
    /**
     * When the limiter's backend fails (a `ratomic/redis` limiter whose `onError` is `"raise"`), let
     * requests through unchecked (fail open) instead of the default 503 with `Retry-After: 1` (fail
     * closed). A request the limiter cannot judge (a key too long, a cost above the limit, a stack's
     * keys not one per member) is a 400 either way; a request with no client address for the default
     * key is a 500. Each is a generic RFC 9457 document: the reason goes to `onLimiterError`.
     */
    passOnStoreError?: boolean
    /**
     * Turns off set-up reports, as express-rate-limit's `validate` does: `false` all, or by
     * express-rate-limit's names (`trustProxy`, `xForwardedForHeader`, `forwardedHeader`, `ip`,
     * `keyGeneratorIpFallback`, `ipv6SubnetOrKeyGenerator`; `knownOptions: false` lets unknown options
     * pass; the rest are accepted and check nothing of ratomic's).
     */
    validate?: boolean | Partial<Record<ValidationName, boolean>>
    /** Where reports go, as express-rate-limit's `logger`: a backend failure to `error`, the rest to `warn`. */
    logger?: { warn(...args: unknown[]): unknown; error(...args: unknown[]): unknown }
    /**
     * Told what the client is not: every request the limiter could not decide, and once each, a
     * set-up mistake (see {@link LimiterError}). Default: `console.warn`, each code at once, then at
     * most once a minute with the count since. Route it to your logger:
     * `onLimiterError: (err, req) => req.log.warn({ err }, err.message)`.
     */
    onLimiterError?: (error: LimiterError, req: Req) => void
  }

  /** express-rate-limit's validation names, which `validate` takes. */
  type ValidationName =
    | 'ip' | 'trustProxy' | 'xForwardedForHeader' | 'forwardedHeader' | 'keyGeneratorIpFallback' | 'ipv6SubnetOrKeyGenerator'
    | 'knownOptions' | 'positiveHits' | 'unsharedStore' | 'singleCount' | 'limit' | 'draftPolliHeaders' | 'onLimitReached'
    | 'headersDraftVersion' | 'headersResetTime' | 'validationsConfig' | 'creationStack' | 'ipv6Subnet' | 'windowMs' | 'default'

  /** What `onLimiterError` is told. */
  interface LimiterError extends Error {
    code:
      | 'ERR_RATOMIC_BACKEND'
      | 'ERR_RATOMIC_BACKEND_POLICY'
      | 'ERR_RATOMIC_BAD_REQUEST'
      | 'ERR_RATOMIC_REFUND'
      | 'ERR_RATOMIC_TOO_MANY_LIMITS'
      | 'ERR_RATOMIC_NO_CLIENT_ADDRESS'
      | 'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR'
      | 'ERR_RATOMIC_UNTRUSTED_FORWARDED'
      | 'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY'
      | 'ERR_RATOMIC_KEY_GENERATOR_IP'
      | 'ERR_RATOMIC_IPV6_SUBNET_IGNORED'
    /** The status the client was answered (0: the request went through, or none was). */
    status: number
    cause?: unknown
  }

  /**
   * The decision left on the request (`req.rateLimit` by default): express-rate-limit's fields and
   * the decision's own.
   */
  interface RateLimitInfo {
    /** The limit (of the limit with the least left, for several). */
    limit: number
    /** What the key has used of it: `limit - remaining` (a denial is not counted). */
    used: number
    /** Whole tokens left. */
    remaining: number
    /** When the key is full again, on the wall clock. */
    resetTime: Date
    /** The key (undefined for a `DirectTokenBucket`; an array for a stack's keys per member). */
    key: Key | Key[] | undefined
    allowed: boolean
    retryAfterMs: number
    resetAfterMs: number
    /** A multi-limit decision's entries (a `Limiter`, a `Stack`, a `RedisLimiter`, a `PostgresLimiter`). */
    entries?: NamedDecision[]
    /** The limits that denied. */
    deniedBy?: string[]
    /** A Redis or PostgreSQL decision's source. */
    source?: Source | PostgresSource
  }

  /** @deprecated the name of {@link RateLimitInfo} before express-rate-limit's fields. */
  type RequestRateLimit = RateLimitInfo

  /** The middleware, with express-rate-limit's `resetKey` and `getKey`. */
  interface RateLimitMiddleware<Req = IncomingMessage, Res = ServerResponse> {
    (req: Req, res: Res, next: (err?: unknown) => void): void | Promise<void>
    /** Forgets `key`: its next request starts from a full limit. */
    resetKey(key: Key | Key[]): void | Promise<void>
    /** `{ totalHits, resetTime }` of `key`, from a look that charges nothing; undefined when it has used nothing. */
    getKey(key: Key | Key[]): Promise<{ totalHits: number; resetTime: Date } | undefined>
  }

  /** The module: the middleware factory, with its other names. */
  interface RateLimit {
    <Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(options?: RateLimitOptions<Req, Res>): RateLimitMiddleware<Req, Res>
    /** The factory itself (`import { rateLimit } from 'ratomic/express'`). */
    readonly rateLimit: RateLimit
    /** The factory itself (`import rateLimit from 'ratomic/express'`). */
    readonly default: RateLimit
    /**
     * The key the middleware gives a client by default, from its address (IPv4 as is, IPv6 grouped
     * by its first `ipv6Subnet` bits, default 64; `false`: the whole address): for a `keyGenerator`
     * that combines it with others, say a Stack's per-IP member. express-rate-limit 8 has the same name.
     */
    ipKeyGenerator(ip: string, ipv6Subnet?: number | false): string
  }
}

/** Middleware for Express and plain `http`: `app.use(rateLimit({ limit: 100, windowMs: 60_000 }))`. */
declare const rateLimit: rateLimit.RateLimit
export = rateLimit
