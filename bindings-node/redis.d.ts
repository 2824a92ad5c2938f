// Types of `ratomic/redis`: the limiters of `ratomic`, with their state on a
// Redis server reached through your own ioredis or node-redis client.
import type { AcquireOptions, Decision, HeaderOptions, Key, Limiter, LimitsString, MultiDecision, FixedWindow, Rule, SlidingWindow, TokenBucket } from './ratomic'

/**
 * Who answered a call: `'redis'` (the server), `'deny_cache'` (a denial Redis gave
 * earlier whose wait has not ended), `'lease'` (tokens this process leased from Redis,
 * granted here), `'policy'` (`onError: 'allow'` or `'deny'`) or `'fallback'` (the local
 * limiter given as `onError`).
 */
export type Source = 'redis' | 'deny_cache' | 'lease' | 'policy' | 'fallback'

/**
 * Whether a limiter leases tokens: `'off'` (the default), `'auto'` (token buckets only:
 * at most an eighth of the smallest burst), or the most tokens a lease may take (a whole
 * number >= 1; refused with a window limit).
 */
export type Lease = 'off' | 'auto' | number

/** A {@link Decision}, plus who gave it. */
export interface RedisDecision extends Decision {
  /** Who answered. */
  source: Source
}

/** A {@link MultiDecision}, plus who gave it. */
export interface RedisMultiDecision extends MultiDecision {
  /** Who answered. */
  source: Source
}

/** What ratomic uses of an ioredis client (`new Redis()` or `new Redis.Cluster()`). */
export interface IoRedisLike {
  /** Sends one command (ioredis routes it by key in a cluster). */
  call(command: string, ...args: Array<string | Buffer | number>): Promise<unknown>
  /** A pipeline: the calls of a batch go out in one write. */
  pipeline(): unknown
}

/** What ratomic uses of a node-redis v4+ client (`createClient()`, connected; not a cluster). */
export interface NodeRedisLike {
  /** Sends one command. */
  sendCommand(args: Array<string | Buffer>): Promise<unknown>
}

/** The options of every Redis class; `Local` is what `onError` may fall back to. */
export interface RedisOptions<Local> {
  /** Your Redis client: ioredis (`Redis` or `Redis.Cluster`) or a connected node-redis v4+ client. Required. */
  client: IoRedisLike | NodeRedisLike
  /** Where the keys live: a key `k` is stored at `<prefix>{k}` (default `'ratomic:'`; no braces). */
  prefix?: string
  /** How long a call may wait for Redis, in milliseconds (default 50); then it failed as a timeout. */
  timeoutMs?: number
  /**
   * What a call answers when Redis fails or times out: `'raise'` (the default: the promise
   * rejects with an Error whose code is `ERR_RATOMIC_BACKEND`, the client's error as its
   * `cause`), `'allow'`, `'deny'` (a denial with `retryAfterMs` = `denyRetryAfterMs`), or an
   * in-memory limiter to decide instead.
   */
  onError?: 'raise' | 'allow' | 'deny' | Local
  /** The `retryAfterMs` of a denial by `onError: 'deny'` (default 1000). */
  denyRetryAfterMs?: number
  /** How many keys' Redis denials are answered locally until their wait ends (default 10,000; 0: off). */
  denyCache?: number
  /** Failures in a row that open the circuit breaker (default 5; 0: never). While open, `onError` answers without a round trip. */
  breakerThreshold?: number
  /** How long the breaker stays open before one call tries Redis again, in milliseconds (default 1000). */
  breakerCooldownMs?: number
  /**
   * Failures in a row that took this long in all, in milliseconds, open the breaker too, whatever
   * their count (default 1000; 0: no bound on time).
   */
  breakerFailureTimeMs?: number
  /** Longest key in bytes (default 1024); a longer key is a RangeError, before any round trip. */
  maxKeyLen?: number
  /**
   * Lease a hot key's tokens (default `'off'`): a call then also takes a slice of the key's
   * tokens from Redis, which this process grants in memory (`source: 'lease'`) until spent
   * or their time passes. Exact fleet-wide; the price is tokens idle in leases, at most
   * processes × the lease's size per key (see `close()`).
   */
  lease?: Lease
  /** Keys whose leases this process keeps (default 10,000). */
  leaseKeys?: number
}

/**
 * What every Redis limiter offers (exported for `instanceof` checks; not constructible).
 * Every call returns a Promise. Misuse (a key of the wrong type, a cost above the limit, a
 * key too long) rejects with the in-memory limiters' TypeError or RangeError before any
 * round trip. Calls without `At` use the server's clock (`TIME`); `*At` forms take yours.
 */
export declare abstract class RedisBase<D extends RedisDecision = RedisDecision> {
  /** Use RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow or RedisLimiter. */
  protected constructor()
  /** Takes `cost` (default 1) from `key`, from every limit, all or nothing, at the server's time. */
  allow(key: Key, cost?: number): Promise<D>
  /** As `allow` at `atMs` (your clock, in milliseconds; rounded down to whole microseconds) instead of the server's time. */
  allowAt(key: Key, atMs: number, cost?: number): Promise<D>
  /** What `allow` would answer, changing nothing. */
  peek(key: Key, cost?: number): Promise<D>
  /** As `peek` at `atMs`. */
  peekAt(key: Key, atMs: number, cost?: number): Promise<D>
  /** Gives `tokens` (default 1) back to every limit on `key`, never above full. A Redis failure rejects (`ERR_RATOMIC_BACKEND`) whatever `onError` says. */
  refund(key: Key, tokens?: number): Promise<void>
  /** As `refund` at `atMs`. */
  refundAt(key: Key, atMs: number, tokens?: number): Promise<void>
  /**
   * Forgets `key` (one script call): it is full again, but for the tokens other processes'
   * leases hold. A Redis failure rejects (`ERR_RATOMIC_BACKEND`).
   */
  reset(key: Key): Promise<void>
  /**
   * Gives back the unused tokens of every lease this limiter holds (one pipeline), so other
   * processes can have them now; resolves with how many limits took tokens back. The client
   * stays open; later calls take new leases. Call it before closing the client: when the
   * event loop empties, a limiter still holding leases tries once more on its own.
   */
  close(): Promise<number>
  /** The most tokens a lease takes, or null when this limiter leases none. */
  readonly lease: number | null
  /** Keys this process holds a lease on now. */
  readonly leasesHeld: number
  /**
   * Decides every request (a key or `[key, cost]`) in one pipeline, in order. An invalid
   * request rejects the whole batch (`error.index` names it) before anything is sent.
   */
  allowMany(requests: Array<Key | [Key, number?]>): Promise<D[]>
  /** As `allowMany`, every request at `atMs`. */
  allowManyAt(requests: Array<Key | [Key, number?]>, atMs: number): Promise<D[]>
  /**
   * Waits out each denial's `retryAfterMs` until `key` grants `cost`. With `timeoutMs`,
   * resolves with the denial once the next wait would take the total past it; rejects with
   * `signal.reason` on abort.
   */
  acquire(key: Key, cost?: number, options?: AcquireOptions): Promise<D>
  /** The client the calls go through. */
  readonly client: IoRedisLike | NodeRedisLike
  /** Where the keys live: a key `k` is stored at `<prefix>{k}`. */
  readonly prefix: string
  /** The largest cost a call may ask (the smallest limit). */
  readonly limit: number
  /** Whether the circuit breaker is open: calls are answered by `onError` without reaching Redis. */
  readonly breakerOpen: boolean
  /**
   * The HTTP header fields for `decision` (one this limiter returned), as the in-memory
   * limiters format them: `RateLimit-Policy`, `RateLimit`, `Retry-After` on a denial, and the
   * legacy `X-RateLimit-*` fields with `legacy: true`.
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document for a 429 answering `decision`; null when it was allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /**
   * The class, the rule(s) with their units and the prefix: `RedisFixedWindow { fixed window 5
   * per 1m, prefix: "ratomic:" }`; `util.inspect` shows the same.
   */
  toString(): string
}

/** A token bucket (GCRA) per key, on Redis: the arguments of {@link TokenBucket}, plus the Redis options. */
export declare class RedisTokenBucket extends RedisBase {
  /**
   * @param capacity burst size, a whole number >= 1
   * @param refillPerSec tokens per second (finite, > 0), or a rate string (`'5/s'`)
   */
  constructor(capacity: number, refillPerSec: number | string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
  /** From a rate string: `'10/s'` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  constructor(rate: string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow> & { burst?: number })
}

/** A fixed window per key, on Redis: the arguments of {@link FixedWindow}, plus the Redis options. */
export declare class RedisFixedWindow extends RedisBase {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
  /** @param window the window's length as a duration such as `'1min'` */
  constructor(limit: number, window: string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
}

/** A sliding window per key, on Redis: the arguments of {@link SlidingWindow}, plus the Redis options. */
export declare class RedisSlidingWindow extends RedisBase {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
  /** @param window the window's length as a duration such as `'1min'` */
  constructor(limit: number, window: string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options: RedisOptions<TokenBucket | FixedWindow | SlidingWindow>)
}

/** Several named limits on each key, all or nothing, on Redis (one hash per key): the arguments of {@link Limiter}. */
export declare class RedisLimiter extends RedisBase<RedisMultiDecision> {
  /** @param limits `{ name: rule }`, `[{ name, ...rule }]`, or a string such as `'10/second;1000/day'` */
  constructor(limits: Record<string, Rule> | Array<Exclude<Rule, string> & { name: string }> | LimitsString, options: RedisOptions<Limiter>)
  /** The limits' names, in order. */
  readonly names: string[]
  /** The header fields for `decision`: one `RateLimit-Policy` and `RateLimit` item per limit the call was subject to. */
  headers(decision: MultiDecision, options?: Omit<HeaderOptions, 'name'>): Array<[string, string]>
  /** The problem document for a 429 answering `decision`, naming who denied; null when allowed. */
  problem(decision: MultiDecision): string | null
}
