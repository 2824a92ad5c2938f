// Types of `ratomic/postgres`: the limiters of `ratomic`, with their state
// in PostgreSQL, reached through your own `pg` Pool (or Client).
import type {
  AcquireOptions,
  Decision,
  FixedWindow,
  HeaderOptions,
  Key,
  Limiter,
  LimitsString,
  MultiDecision,
  Rule,
  SlidingWindow,
  TokenBucket,
} from './ratomic'

/**
 * Who answered a call: `'postgres'` (the server), `'deny_cache'` (a denial PostgreSQL gave
 * earlier whose wait has not ended), `'lease'` (tokens this process leased from PostgreSQL,
 * granted here), `'policy'` (`onError: 'allow'` or `'deny'`) or `'fallback'` (`onError:
 * 'fallback'`, or the in-memory limiter given as `onError`).
 */
export type PostgresSource = 'postgres' | 'deny_cache' | 'lease' | 'policy' | 'fallback'

/** A {@link Decision}, plus who gave it. */
export interface PostgresDecision extends Decision {
  /** Who answered. */
  source: PostgresSource
}

/** A {@link MultiDecision}, plus who gave it. */
export interface PostgresMultiDecision extends MultiDecision {
  /** Who answered. */
  source: PostgresSource
}

/** A pg Pool or Client: anything with `query`. A Client must not be inside a transaction. */
export interface PostgresClient {
  /** Runs one statement (pg's `query`, with a config object or text and values). */
  query(config: any, values?: unknown[]): Promise<{ rows: any[] }>
}

/** The options of every PostgreSQL class; `Local` is the in-memory limiter `onError` may fall back to. */
export interface PostgresOptions<Local = TokenBucket | FixedWindow | SlidingWindow> {
  /**
   * The pg Pool (or Client) the statements run through. Required. A Pool replaces a connection
   * that fails; a Client does not reconnect (every call answers by `onError` once its connection
   * has failed): use a Pool in production. If it has no `'error'` listener when the limiter is
   * built, ratomic adds one, so an idle connection failing (a server restart,
   * `pg_terminate_backend`) does not end the process: it warns (`process.emitWarning`, code
   * `RATOMIC_POSTGRES_CLIENT_ERROR`) unless a listener of yours is there by then.
   */
  client: PostgresClient
  /** Where the rows live (default `"ratomic"`). */
  prefix?: string
  /**
   * What a call answers when PostgreSQL fails: `'raise'` (the default: the promise rejects with
   * an Error whose code is `ERR_RATOMIC_BACKEND`, the client's error as its `cause`), `'allow'`,
   * `'deny'` (a denial with `retryAfterMs` = `denyRetryAfterMs`), `'fallback'` (a local
   * in-memory limiter of the same rules, made for you), or an in-memory limiter of yours to
   * decide instead (as `ratomic/redis`'s `onError`).
   */
  onError?: 'raise' | 'allow' | 'deny' | 'fallback' | Local
  /** The `retryAfterMs` of an `onError: "deny"` denial (default 1000). */
  denyRetryAfterMs?: number
  /** Keys whose denial is answered locally until its retryAfter (default 10,000; 0: off). */
  denyCache?: number
  /** Failures in a row that open the circuit breaker (default 5; 0: off). */
  breakerThreshold?: number
  /** How long the breaker stays open, ms (default 1000). */
  breakerCooldownMs?: number
  /** The longest key in bytes (default 1024). */
  maxKeyLen?: number
  /** Leased tokens: `"off"` (default), `"auto"` or the most tokens a lease takes (token buckets only). */
  lease?: 'off' | 'auto' | number
  /** Keys whose leases are kept (default 10,000). */
  leaseKeys?: number
  /**
   * The most statements this limiter has out at once (default: half a pg Pool's `max`, rounded
   * up — 5 for pg's default of 10; 1 for a Client). Past it, an `allow` at the server's clock waits, and the next
   * statement to end sends every waiting call (up to 256) as one batch statement, each decided
   * as it would have been alone at that statement's time: fewer statements for the same
   * decisions under load. Calls alone go one statement each; peeks, `*At` calls, refunds,
   * resets and lease asks always go on their own.
   */
  maxInFlight?: number
}

/**
 * What every PostgreSQL-backed limiter offers (exported for `instanceof` checks; not
 * constructible). Every call returns a Promise and is one statement, or shares one with the
 * allows in flight beside it (see `maxInFlight`); calls without `At` use the server's clock,
 * `*At` forms take yours.
 */
export declare abstract class PostgresBase<D extends PostgresDecision = PostgresDecision> {
  /** Use PostgresTokenBucket, PostgresFixedWindow, PostgresSlidingWindow or PostgresLimiter. */
  protected constructor()
  /** Consumes `cost` (default 1) if every limit allows it, at the server's clock. */
  allow(key: Key, cost?: number): Promise<D>
  /** As `allow` at `nowMs` (milliseconds on your clock). */
  allowAt(key: Key, nowMs: number, cost?: number): Promise<D>
  /** What `allow` would answer, changing nothing. */
  peek(key: Key, cost?: number): Promise<D>
  /** As `peek` at `nowMs`. */
  peekAt(key: Key, nowMs: number, cost?: number): Promise<D>
  /** Gives `tokens` back to every limit on `key` (never above full). A failure rejects (`ERR_RATOMIC_BACKEND`) whatever `onError` says. */
  refund(key: Key, tokens: number): Promise<void>
  /** As `refund` at `nowMs`. */
  refundAt(key: Key, nowMs: number, tokens: number): Promise<void>
  /** Forgets `key`: every limit is full again. */
  reset(key: Key): Promise<void>
  /** Decides every request (a key, or `[key, cost]`) in one statement, in order. */
  allowMany(requests: Array<Key | [Key, number?]>): Promise<D[]>
  /** As `allowMany`, every request at `nowMs`. */
  allowManyAt(requests: Array<Key | [Key, number?]>, nowMs: number): Promise<D[]>
  /** Waits until `key` grants `cost` (options: `timeoutMs`, `signal`), as the in-memory `acquire`. */
  acquire(key: Key, cost?: number, options?: AcquireOptions): Promise<D>
  /** Removes this prefix's rows that are full again (at the server's time, or `nowMs`); how many. */
  gc(nowMs?: number): Promise<number>
  /** The pg Pool (or Client) the statements run through. */
  readonly client: PostgresClient
  /** The row prefix. */
  readonly prefix: string
  /** The largest cost a call may ask (the smallest limit). */
  readonly limit: number
  /** Whether the circuit breaker is open: calls are answered by `onError` without a round trip. */
  readonly breakerOpen: boolean
  /** Gives back the unused tokens of every lease this limiter holds; how many limits took tokens back. */
  giveBack(): Promise<number>
  /** The most tokens a lease takes, or null when this limiter leases none. */
  readonly lease: number | null
  /** Keys this process holds a lease on now. */
  readonly leasesHeld: number
  /**
   * The HTTP header fields for `decision` (one this limiter returned), as the in-memory
   * limiters format them: `RateLimit-Policy`, `RateLimit`, `Retry-After` on a denial, and the
   * legacy `X-RateLimit-*` fields with `legacy: true`.
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document for a 429 answering `decision`; null when it was allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /**
   * The class, the rule(s) with their units and the prefix: `PostgresFixedWindow { fixed window
   * 5 per 1m, prefix: "ratomic" }`; `util.inspect` shows the same.
   */
  toString(): string
}

/** A token bucket (GCRA) per key, in PostgreSQL: the arguments of {@link TokenBucket}, plus the options. */
export declare class PostgresTokenBucket extends PostgresBase {
  /**
   * @param capacity burst size, a whole number >= 1
   * @param refillPerSec tokens per second (finite, > 0)
   */
  constructor(capacity: number, refillPerSec: number, options: PostgresOptions)
  /** From a rate string: `'10/s'` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  constructor(rate: string, options: PostgresOptions & { burst?: number })
}

/** A fixed window per key, in PostgreSQL: the arguments of {@link FixedWindow}, plus the options. */
export declare class PostgresFixedWindow extends PostgresBase {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options: PostgresOptions)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options: PostgresOptions)
}

/** A sliding window per key, in PostgreSQL: the arguments of {@link SlidingWindow}, plus the options. */
export declare class PostgresSlidingWindow extends PostgresBase {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options: PostgresOptions)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options: PostgresOptions)
}

/** Several named limits on each key, all or nothing, in PostgreSQL (one row per key): the arguments of {@link Limiter}. */
export declare class PostgresLimiter extends PostgresBase<PostgresMultiDecision> {
  /** @param limits `{ name: rule }`, `[{ name, ...rule }]`, or a string such as `'10/second;1000/day'` */
  constructor(limits: Record<string, Rule> | Array<Exclude<Rule, string> & { name: string }> | LimitsString, options: PostgresOptions<Limiter>)
  /** The limits' names, in order. */
  readonly names: string[]
  /** The header fields for `decision`: one `RateLimit-Policy` and `RateLimit` item per limit the call was subject to. */
  headers(decision: MultiDecision, options?: Omit<HeaderOptions, 'name'>): Array<[string, string]>
  /** The problem document for a 429 answering `decision`, naming who denied; null when allowed. */
  problem(decision: MultiDecision): string | null
}

/** The SQL that creates ratomic's table (`UNLOGGED` if asked) and functions. Safe to run again. */
export declare function schema(unlogged?: boolean): string
/** Runs `schema()` through `client` (a pg Pool or Client) in one transaction, under the advisory lock the other faces take too. */
export declare function migrate(client: PostgresClient, options?: { unlogged?: boolean }): Promise<void>
