// PostgreSQL-backed limiters through your own `pg` Pool: `require('ratomic/postgres')`.
import type { Decision, MultiDecision, AcquireOptions } from './ratomic'

/** Who answered a call on PostgreSQL. */
export type PostgresSource = 'postgres' | 'deny_cache' | 'policy' | 'fallback' | 'lease'

/** A pg Pool or Client: anything with `query(text, values)`. A Client must not be inside a transaction. */
export interface PostgresClient {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>
}

/** Options every class takes. */
export interface PostgresOptions {
  /** The pg Pool (or Client) the statements run through. Required. */
  client: PostgresClient
  /** Where the rows live (default `"ratomic"`). */
  prefix?: string
  /** What a failure answers: `"raise"` (default), `"allow"`, `"deny"` or `"fallback"` (a local in-memory limiter). */
  onError?: 'raise' | 'allow' | 'deny' | 'fallback'
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
}

/** What every PostgreSQL-backed limiter offers; every call is one statement (a Promise). */
export declare class PostgresBase<D = Decision> {
  allow(key: string | Buffer, cost?: number): Promise<D & { source: PostgresSource }>
  allowAt(key: string | Buffer, nowMs: number, cost?: number): Promise<D & { source: PostgresSource }>
  peek(key: string | Buffer, cost?: number): Promise<D & { source: PostgresSource }>
  peekAt(key: string | Buffer, nowMs: number, cost?: number): Promise<D & { source: PostgresSource }>
  refund(key: string | Buffer, tokens: number): Promise<void>
  refundAt(key: string | Buffer, nowMs: number, tokens: number): Promise<void>
  reset(key: string | Buffer): Promise<void>
  allowMany(requests: Array<string | Buffer | [string | Buffer, number]>): Promise<Array<D & { source: PostgresSource }>>
  allowManyAt(requests: Array<string | Buffer | [string | Buffer, number]>, nowMs: number): Promise<Array<D & { source: PostgresSource }>>
  acquire(key: string | Buffer, cost?: number, options?: AcquireOptions): Promise<D & { source: PostgresSource }>
  /** Removes this prefix's rows that are full again (at the server's time, or `nowMs`); how many. */
  gc(nowMs?: number): Promise<number>
  readonly prefix: string
  readonly limit: number
  readonly breakerOpen: boolean
  /** Gives back the unused tokens of every lease this limiter holds; how many limits took tokens back. */
  giveBack(): Promise<number>
  /** The most tokens a lease takes, or null when this limiter leases none. */
  readonly lease: number | null
  /** Keys this process holds a lease on now. */
  readonly leasesHeld: number
}

export declare class PostgresTokenBucket extends PostgresBase<Decision> {
  constructor(capacity: number, refillPerSec: number, options: PostgresOptions)
  constructor(rate: string, options: PostgresOptions & { burst?: number })
}

export declare class PostgresFixedWindow extends PostgresBase<Decision> {
  constructor(limit: number, windowMs: number, options: PostgresOptions)
  constructor(rate: string, options: PostgresOptions)
}

export declare class PostgresSlidingWindow extends PostgresBase<Decision> {
  constructor(limit: number, windowMs: number, options: PostgresOptions)
  constructor(rate: string, options: PostgresOptions)
}

export declare class PostgresLimiter extends PostgresBase<MultiDecision> {
  constructor(limits: string | Record<string, unknown> | Array<[string, unknown]>, options: PostgresOptions)
  readonly names: string[]
}

/** The SQL that creates ratomic's table (`UNLOGGED` if asked) and functions. */
export declare function schema(unlogged?: boolean): string
/** Runs `schema()` through the pool in one transaction, under an advisory lock. */
export declare function migrate(client: PostgresClient, options?: { unlogged?: boolean }): Promise<void>
