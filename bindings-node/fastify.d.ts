// Types of `ratomic/fastify`: a plugin registered with `fastify.register`,
// with @fastify/rate-limit's options (and ratomic's, and express-rate-limit's
// names as ratomic/express takes them).
import type { Key, QuotaSpec } from './ratomic'
import type rateLimit = require('./express')

declare namespace ratomicFastify {
  /** What `errorResponseBuilder` is given, as @fastify/rate-limit gives it. */
  interface ErrorResponseContext {
    statusCode: number
    /** Always false: ratomic has no ban (a denial charges nothing). */
    ban: false
    /** The limit. */
    max: number
    /** Milliseconds until the request would pass. */
    ttl: number
    /** The same in words: `'1 minute'`, `'30 seconds'`. */
    after: string
  }

  /**
   * The plugin's options (and a route's `config.rateLimit`): @fastify/rate-limit's, with the same
   * meaning, and ratomic/express's (`limiter`, `limit`, `windowMs`, `skip`, `handler`, `message`,
   * `skipSuccessfulRequests` …). @fastify/rate-limit's `store`, `redis`, `nameSpace`, `ban`,
   * `onBanReach`, `continueExceeding` and `exponentialBackoff` are TypeErrors naming what to use.
   */
  interface FastifyRateLimitOptions extends Omit<rateLimit.RateLimitOptions<any, any>, 'keyGenerator' | 'limit' | 'max' | 'identifier' | 'validate' | 'logger' | 'ipv6Subnet' | 'quota'> {
    /** Limit every route registered after the plugin in its scope (default true); false: only routes whose `config.rateLimit` asks. */
    global?: boolean
    /** Requests per window (default 1000), or a function of the request and its key. */
    max?: number | string | ((request: any, key: Key) => number | Promise<number>)
    /** `max` by express-rate-limit's name. */
    limit?: number | string | ((request: any, key: Key) => number | Promise<number>)
    /** The window: milliseconds, a duration (`'1 minute'`, `'15m'`), or a function of the request and its key (default 60000). */
    timeWindow?: number | string | ((request: any, key: Key) => number | string | Promise<number | string>)
    /** The hook the limit runs in (default `'onRequest'`; `'preHandler'` to key by what authentication set). */
    hook?: 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
    /** Clients the default limiter keeps (its `maxKeys`). */
    cache?: number
    /** Keys never limited, or a function of the request and its key. */
    allowList?: Key[] | ((request: any, key: Key) => boolean | Promise<boolean>)
    /** The client's key (default its address, IPv6 grouped by `ipv6Subnet`). */
    keyGenerator?: (request: any, reply?: any) => Key | Key[] | Promise<Key | Key[]>
    /** Bits of an IPv6 address that name one client (default 64), or false for the whole address. */
    ipv6Subnet?: number | false
    /** Routes with the same `groupId` share one limit. */
    groupId?: string
    /** A denial's error, which Fastify answers with (its `statusCode`; through your `setErrorHandler`). */
    errorResponseBuilder?: (request: any, context: ErrorResponseContext) => object
    /** @fastify/rate-limit's draft fields: `RateLimit-Limit`, `-Remaining`, `-Reset` (draft 6's, without its policy). */
    enableDraftSpec?: boolean
    /** Fields to leave out of allowed responses: `{ 'x-ratelimit-reset': false }`. */
    addHeadersOnExceeding?: Record<string, boolean>
    /** Fields to leave out of denials: `{ 'retry-after': false }`. */
    addHeaders?: Record<string, boolean>
    /** Called for each allowed request, with its key. */
    onExceeding?: (request: any, key: Key) => void
    /** Called for each denied request, with its key. */
    onExceeded?: (request: any, key: Key) => void
    /** `passOnStoreError` by @fastify/rate-limit's name: let requests through when the backend fails. */
    skipOnError?: boolean
    /** A `Quotas` limiter's quota: one for every request, or a function of the request. */
    quota?: QuotaSpec | ((request: any, reply: any) => QuotaSpec | Promise<QuotaSpec>)
  }

  /** What `fastify.createRateLimit(options)(request)` resolves to, as @fastify/rate-limit's. */
  interface RateLimitResult {
    /** On the allow list: nothing else is set. */
    isAllowed: boolean
    key: Key
    max?: number
    timeWindow?: number
    remaining?: number
    /** Milliseconds: until full when allowed, until the request would pass when not. */
    ttl?: number
    ttlInSeconds?: number
    isExceeded?: boolean
    isBanned?: false
  }

  /** As `ratomic/express`'s: the default client key from an address, for a `keyGenerator`. */
  const ipKeyGenerator: rateLimit.RateLimit['ipKeyGenerator']
  /** The plugin itself. */
  const ratomicFastify: Plugin
  /** The plugin itself, by @fastify/rate-limit's named export. */
  const fastifyRateLimit: Plugin

  /** The plugin: `await fastify.register(ratomicFastify, { max: 100, timeWindow: '1 minute' })`. */
  type Plugin = (fastify: any, options?: FastifyRateLimitOptions) => Promise<void>
}

/**
 * The plugin. It decorates the instance with `rateLimit(options?)` (a hook for a route of your
 * own) and `createRateLimit(options?)` (`(request, { increment }?) => Promise<RateLimitResult>`).
 */
declare function ratomicFastify(fastify: any, options?: ratomicFastify.FastifyRateLimitOptions): Promise<void>
declare namespace ratomicFastify {
  /** The plugin itself (`import ratomicFastify from 'ratomic/fastify'`). */
  const _default: typeof ratomicFastify
  export { _default as default }
}
export = ratomicFastify
