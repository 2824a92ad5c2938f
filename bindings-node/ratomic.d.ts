// Types of the public API in ratomic.js. The native layer's types are
// generated from the Rust doc comments into index.d.ts.

/** The answer to one call (SPEC §2). A denial is a value, never an exception. */
export interface Decision {
  /** The cost was granted and consumed. */
  allowed: boolean
  /** Whole tokens this key still has right after the call (rounded down). */
  remaining: number
  /** The most this key can ever hold (capacity, burst or window limit). */
  limit: number
  /** 0 when allowed; when denied, strictly positive: milliseconds (fractional) after which the same call would pass. */
  retryAfterMs: number
  /** Milliseconds (fractional) until the key is full again if nothing consumes. */
  resetAfterMs: number
}

/** One limit's part in a {@link MultiDecision}. */
export interface NamedDecision extends Decision {
  /** The limit's name. */
  name: string
}

/** The answer of a {@link Limiter}: the combined decision plus one entry per limit. */
export interface MultiDecision extends Decision {
  /** One entry per limit the call was subject to, in the limiter's order. On a denial each is what that limit alone would answer (nothing was consumed). */
  entries: NamedDecision[]
  /** The names of the limits that denied the call (empty when allowed). */
  deniedBy: string[]
}

/** A key: a string (counted as its UTF-8 bytes) or a Buffer / Uint8Array. */
export type Key = string | Uint8Array

/** A clock: any function returning milliseconds, or a {@link ManualClock}. */
export type ClockLike = (() => number) | ManualClock

/** Options every limiter accepts. */
export interface LimiterOptions {
  /** Where time comes from (default: a monotonic clock). A clock that throws propagates its error and changes nothing. */
  clock?: ClockLike
  /** Most keys held at once (default 4,194,304). */
  maxKeys?: number
  /** Longest key in bytes (default 1024); a longer key is a RangeError, never truncated. */
  maxKeyLen?: number
}

/** Options of a process-wide shared limiter: it always uses the process's monotonic clock. */
export interface SharedOptions {
  maxKeys?: number
  maxKeyLen?: number
}

/** Options of {@link BaseLimiter.acquire}. */
export interface AcquireOptions {
  /** Abort the wait; the promise rejects with `signal.reason`. */
  signal?: AbortSignal
  /** Give up (reject with code `ERR_RATOMIC_TIMEOUT`) rather than wait longer than this, in the limiter's clock's ms. */
  timeoutMs?: number
}

/** A clock for tests: time stands still until you move it. `acquire` waits on it too. */
export declare class ManualClock {
  /** @param startMs the initial time in milliseconds (default 0). */
  constructor(startMs?: number)
  /** The current time, in milliseconds. */
  now(): number
  /** Moves the clock forward by `ms` (>= 0); returns the new time. */
  advance(ms: number): number
  /** Sets the clock to `ms` (it may go backwards); returns it. */
  set(ms: number): number
  /** Resolves once the clock reaches now + `ms`; rejects with `signal.reason` on abort. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>
}

/** What every limiter offers (exported for `instanceof` checks; not constructible by users). All calls but `acquire` are synchronous. */
export declare abstract class BaseLimiter<D extends Decision = Decision> {
  /**
   * Takes `cost` (default 1, a whole number; 0 answers like peek) from `key`.
   * Throws a RangeError if `cost` exceeds the limit or the key is too long,
   * a TypeError for a key that is neither a string nor a Buffer.
   */
  allow(key: Key, cost?: number): D
  /** Answers like `allow` and changes nothing. */
  peek(key: Key, cost?: number): D
  /** Gives `tokens` (default 1) back to `key`, never above full. */
  refund(key: Key, tokens?: number): void
  /** Forgets `key`: it is full again. */
  reset(key: Key): void
  /**
   * Many calls at one clock reading, in order: a key or a `[key, cost]` pair each.
   * Every pair is checked first, so a bad one throws before any key is charged.
   */
  allowMany(requests: Array<Key | [Key, number?]>): D[]
  /** Live keys (keys that are not full). */
  readonly size: number
  /** Drops keys that are full again (memory only: decisions do not change); returns how many. */
  gc(): number
  /**
   * Waits (on the limiter's clock) until `cost` can be taken from `key`, then takes it.
   * Rejects with `signal.reason` on abort, or an Error with code `ERR_RATOMIC_TIMEOUT`
   * (and the last `decision`) when the wait would pass `timeoutMs`.
   */
  acquire(key: Key, cost?: number, options?: AcquireOptions): Promise<D>
}

/** A token bucket per key (GCRA): bursts of `capacity`, refilled at `refillPerSec` tokens a second. */
export declare class TokenBucket extends BaseLimiter {
  /**
   * @param capacity burst size, a whole number >= 1
   * @param refillPerSec tokens per second (finite, > 0), or a rate string (`"5/s"`: 5 tokens a second)
   */
  constructor(capacity: number, refillPerSec: number | string, options?: LimiterOptions)
  /** From a rate string: `"10/s"` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  constructor(rate: string, options?: LimiterOptions & { burst?: number })
  /** From a rate string: `"10/s"` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  static fromRate(rate: string, options?: LimiterOptions & { burst?: number }): TokenBucket
  /**
   * The process-wide token bucket `name`: every worker thread asking for it gets a handle
   * to the same native limiter. A different configuration under the same name throws
   * an Error with code `ERR_RATOMIC_SHARED_CONFLICT`.
   */
  static shared(name: string, capacity: number, refillPerSec: number | string, options?: SharedOptions): TokenBucket
  static shared(name: string, rate: string, options?: SharedOptions & { burst?: number }): TokenBucket
}

/** At most `limit` calls per key in each window (aligned to the clock's epoch). */
export declare class FixedWindow extends BaseLimiter {
  /** @param window milliseconds, or a duration such as `"1min"`, `"250ms"`, `"h"` */
  constructor(limit: number, window: number | string, options?: LimiterOptions)
  /** From a rate string such as `"100/min"`. */
  constructor(rate: string, options?: LimiterOptions)
  /** The process-wide fixed window `name`, shared by every worker thread. */
  static shared(name: string, limit: number, window: number | string, options?: SharedOptions): FixedWindow
  static shared(name: string, rate: string, options?: SharedOptions): FixedWindow
}

/** At most `limit` calls per key in any sliding window (the counter approximation, exact integer arithmetic). */
export declare class SlidingWindow extends BaseLimiter {
  /** @param window milliseconds, or a duration such as `"1min"`, `"250ms"`, `"h"` */
  constructor(limit: number, window: number | string, options?: LimiterOptions)
  /** From a rate string such as `"100/min"`. */
  constructor(rate: string, options?: LimiterOptions)
  /** The process-wide sliding window `name`, shared by every worker thread. */
  static shared(name: string, limit: number, window: number | string, options?: SharedOptions): SlidingWindow
  static shared(name: string, rate: string, options?: SharedOptions): SlidingWindow
}

/** One limit of a {@link Limiter}: a rate string is a token bucket; an object picks the algorithm. */
export type Rule =
  | string
  | { algorithm?: 'tokenBucket'; capacity: number; refillPerSec: number; burst?: number }
  | { algorithm?: 'tokenBucket'; rate: string; burst?: number }
  | { algorithm: 'fixedWindow' | 'slidingWindow'; rate: string }
  | { algorithm: 'fixedWindow' | 'slidingWindow'; limit: number; window: number | string }

/** Several named limits on one key, all or nothing (at most 16). */
export declare class Limiter extends BaseLimiter<MultiDecision> {
  /** @param limits `{ name: rule }`, or `[{ name, ...rule }]` */
  constructor(limits: Record<string, Rule> | Array<Rule & { name: string }>, options?: LimiterOptions)
  /** The limit names, in order. */
  readonly names: string[]
  /** A view of this limiter (same keys and state) whose calls are subject only to the named limits. Unknown names throw a RangeError. */
  select(names: string[]): Limiter
  /** The process-wide Limiter `name`, shared by every worker thread. */
  static shared(name: string, limits: Record<string, Rule> | Array<Rule & { name: string }>, options?: SharedOptions): Limiter
}

/**
 * Limiters on different keys (per IP, per user, global), all or nothing: a call passes
 * only if every member allows its key; then every member is charged, otherwise none is.
 * Members stay usable on their own. The stack reads one clock per call (by default the
 * first member's) and passes it to every member.
 */
export declare class Stack {
  constructor(members: Record<string, BaseLimiter<any>> | Array<[string, BaseLimiter<any>]>, options?: { clock?: ClockLike })
  /** The member names, in order. */
  readonly names: string[]
  /** Charges `cost` (default 1) to every member, member `i` on `keys[i]`, all or nothing. */
  allow(keys: Key[], cost?: number): MultiDecision
  /** Answers like `allow` and changes nothing. */
  peek(keys: Key[], cost?: number): MultiDecision
}

/** Length of the native output buffer (internal). */
export declare const OUT_LEN: number
/** An empty native call: the benchmark's floor. */
export declare function noop(): void
