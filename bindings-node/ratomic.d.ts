// Types of the public API in ratomic.js, written by hand. They are checked
// against the implementation: __test__/typings.test.ts uses every declaration
// below (compiled by tsc, then run), and __test__/typings-match.test.js
// checks that the exports and members declared here are exactly those of
// ratomic.js, each with a doc comment. The native layer's own types are
// generated into index.d.ts, which is not part of the public API.

/**
 * The answer to one call, the same shape in every ratomic face (see the
 * [contract](https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#2-decision--the-same-shape-everywhere)).
 * A denial is a value, never an exception. Times are in milliseconds.
 */
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

/** One limit's (or stack member's) part in a {@link MultiDecision}. */
export interface NamedDecision extends Decision {
  /** The limit's (or member's) name. */
  name: string
}

/** The answer of a {@link Limiter} or a {@link Stack}: the combined decision plus one entry per limit. */
export interface MultiDecision extends Decision {
  /**
   * One entry per limit the call was subject to, in the limiter's order. On a
   * denial each is what that limit alone would answer (nothing was consumed).
   */
  entries: NamedDecision[]
  /** The names of the limits that denied the call (empty when allowed). */
  deniedBy: string[]
}

/** A key: a string (counted as its UTF-8 bytes; a lone surrogate is a TypeError) or a Buffer / Uint8Array. */
export type Key = string | Uint8Array

/** A clock: any function returning milliseconds, a {@link ManualClock}, or a {@link CoarseClock}. */
export type ClockLike = (() => number) | ManualClock | CoarseClock

/** How a limiter stores its keys. */
export interface StoreOptions {
  /** Most keys held at once (default 4,194,304; with `sharedFile`, 131,072). */
  maxKeys?: number
  /** Longest key in bytes (default 1024); a longer key is a RangeError, never truncated. */
  maxKeyLen?: number
  /** Most bytes of keys longer than 23 bytes held at once (default 64 MiB). */
  maxKeyBytes?: number
  /**
   * Keys to make room for when the limiter is built (default 0; at most `maxKeys`): no
   * table grows while they come, at the price of allocating their slots at once.
   */
  reserveKeys?: number
  /**
   * What happens to keys evicted to stay within `maxKeys`: `'fair'` (the default: another
   * key's churn never denies a call that would be allowed by itself; a bounded over-grant
   * is possible) or `'strict'` (never grants more than remembering every key would; under
   * heavy churn, new keys may be denied).
   */
  eviction?: 'fair' | 'strict'
  /**
   * A file through which every process of this host that builds the same limiter on it
   * (same rule(s), `maxKeys` and `eviction`) shares its keys: `cluster` or pm2 workers,
   * `child_process` children (Linux). Put it in a runtime directory the service owns
   * (`$XDG_RUNTIME_DIR`, `/run/<service>/`), not a world-writable `/tmp` path. The file
   * is created `0600`; a symbolic link, a file owned by another user or readable by
   * others, a foreign file, or one in use by another process with a different rule is a
   * RangeError (`ERR_RATOMIC_INVALID_ARGUMENT`) saying what to do; a file made for another
   * limiter that no process uses any more is made anew. Only with the default clock: a
   * `clock` option is a RangeError (every process must read the host's monotonic clock).
   * The file is sparse (pages get space as keys land): on a full file system a call that
   * needs a new page throws an Error with code `ERR_RATOMIC_SHARED_FILE`, changing
   * nothing. Not to be confused with `shared(name)`, which shares one limiter between the
   * worker threads of a single process.
   */
  sharedFile?: string
}

/** Options every limiter accepts. */
export interface LimiterOptions extends StoreOptions {
  /** Where time comes from (default: a monotonic clock). A clock that throws propagates its error and changes nothing. */
  clock?: ClockLike
}

/** Options of a process-wide shared limiter: it always uses the process's monotonic clock. */
export type SharedOptions = StoreOptions

/** Options of `headers()`. */
export interface HeaderOptions {
  /** The limit's name in the `RateLimit-Policy` and `RateLimit` fields (default `"default"`). */
  name?: string
  /** Also the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` fields. */
  legacy?: boolean
  /**
   * The IETF draft the standard fields follow (default `'draft-11'`; `'draft-8'` writes the same
   * fields): `'draft-7'` is `RateLimit-Policy: 100;w=60` and `RateLimit: limit=100, remaining=99,
   * reset=42`; `'draft-6'` is `RateLimit-Policy` and `RateLimit-Limit`, `-Remaining`, `-Reset`.
   */
  draft?: HeaderDraft
}

/** The revisions of the IETF RateLimit header fields draft `headers()` writes. */
export type HeaderDraft = 'draft-11' | 'draft-8' | 'draft-7' | 'draft-6'

/** The media type of a `problem()` body: `"application/problem+json"`. */
export declare const PROBLEM_CONTENT_TYPE: 'application/problem+json'

/** Options of `acquire`. */
export interface AcquireOptions {
  /** Abort the wait; the promise rejects with `signal.reason`. */
  signal?: AbortSignal
  /**
   * The most to wait in total, in the clock's milliseconds: once the next wait would pass
   * it, `acquire` resolves with that denial (a denial is a value) instead of waiting.
   */
  timeoutMs?: number
}

/** A rule as a limiter reads it back: also valid input to the constructors and to {@link Limiter}. */
export type RuleInfo =
  | {
      /** A token bucket. */
      algorithm: 'tokenBucket'
      /** The most a key can hold: the capacity. */
      limit: number
      /** The burst: the most tokens a key holds. */
      capacity: number
      /** Tokens refilled per second. */
      refillPerSec: number
    }
  | {
      /** A fixed or a sliding window. */
      algorithm: 'fixedWindow' | 'slidingWindow'
      /** The most calls a window allows. */
      limit: number
      /** The window's length in milliseconds. */
      windowMs: number
      /** The rule as a rate string (`'100/m'`) that parses back to it. */
      rate: string
    }

/** A clock for tests: time stands still until you move it. `acquire` waits on it too. */
export declare class ManualClock {
  /** @param startMs the initial time in milliseconds (default 0). */
  constructor(startMs?: number)
  /** The current time, in milliseconds. */
  now(): number
  /** Moves the clock forward by `ms` (>= 0); returns the new time. */
  advance(ms: number): number
  /** Sets the clock to `ms` (it may go backwards: limiters never grant more for it); returns it. */
  set(ms: number): number
  /** Resolves once the clock reaches now + `ms`; rejects with `signal.reason` on abort. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>
}

/**
 * The opt-in coarse clock: the kernel's `CLOCK_MONOTONIC_COARSE`, the default clock's
 * timeline read several times more cheaply, in steps of one kernel tick (`resolutionMs`,
 * typically 4 ms). Read natively; works with `sharedFile` and in a `Stack` beside the
 * default clock. Over any span of real time a limiter on it grants at most
 * `rate × resolution` more than on a perfect clock.
 */
export declare class CoarseClock {
  constructor()
  /** The time, in milliseconds on the host's monotonic timeline. */
  now(): number
  /** How far apart readings step, in milliseconds (the kernel's tick). */
  readonly resolutionMs: number
}

/**
 * What every limiter offers (exported for `instanceof` checks; not constructible). Every
 * call but `acquire` is synchronous. Errors are for misuse and change no state: a
 * TypeError for an argument of the wrong type, a RangeError for one out of range (a cost
 * above the limit, a key too long), each with a `code`.
 */
export declare abstract class BaseLimiter<D extends Decision = Decision> {
  /** Use TokenBucket, FixedWindow, SlidingWindow or Limiter. */
  protected constructor()
  /**
   * Takes `cost` (default 1, a whole number; 0 answers like `peek`) from `key`.
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
   * Many calls at one clock reading, in order: a key or a `[key, cost]` pair each, decided as
   * that many `allow` calls would be, one after another.
   * Every request is checked before any is decided: if one is invalid the whole call throws,
   * naming the first invalid request (`error.index`), and nothing changes.
   */
  allowMany(requests: Array<Key | [Key, number?]>): D[]
  /** Keys held (a key full again may count until it is dropped; `gc()` first for an exact count). */
  readonly size: number
  /** Bytes of memory the limiter's store holds: tables, long keys, summaries of evicted keys. */
  readonly memoryBytes: number
  /** The longest key accepted, in bytes. */
  readonly maxKeyLen: number
  /** The clock the limiter was given (`undefined`: the monotonic clock). */
  readonly clock: ClockLike | undefined
  /** The limiter's time now, in milliseconds on its clock (the time `gc` and the calls use). */
  now(): number
  /**
   * Drops every key that is full again at `atMs` (default: now on the limiter's clock) and
   * returns how many. Memory only: no later decision changes, whatever time it is made at.
   */
  gc(atMs?: number): number
  /**
   * Takes `cost` from `key`, waiting (on the limiter's clock) out each denial's
   * `retryAfterMs`. Resolves with the allowing decision, or, with `timeoutMs`, with the
   * denial once the next wait would take the total past it. Rejects with `signal.reason`
   * on abort, or at once on a bad call.
   */
  acquire(key: Key, cost?: number, options?: AcquireOptions): Promise<D>
  /**
   * The limiter's class and rule with its units, as every ratomic face prints it, and the keys
   * held: `FixedWindow { fixed window 5 per 60ms, keys: 0 }`, `TokenBucket { token bucket 10
   * per 1s, keys: 3 }` (a burst of 10 refilled over a second). `console.log` and
   * `util.inspect` show the same.
   */
  toString(): string
}

/** A token bucket per key (GCRA): bursts of `capacity`, refilled at `refillPerSec` tokens a second. */
export declare class TokenBucket extends BaseLimiter {
  /**
   * @param capacity burst size, a whole number >= 1
   * @param refillPerSec tokens per second (finite, > 0), or a rate string (`'5/s'`: 5 tokens a second)
   */
  constructor(capacity: number, refillPerSec: number | string, options?: LimiterOptions)
  /** From a rate string: `'10/s'` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  constructor(rate: string, options?: LimiterOptions & { burst?: number })
  /** The most a key can hold: the capacity. */
  readonly limit: number
  /** The rule, as the constructors accept it. */
  readonly rule: RuleInfo
  /**
   * The HTTP header fields for `decision` (one this limiter returned), formatted by
   * ratomic's core: `RateLimit-Policy` and `RateLimit` for the limit named `name` (default
   * `"default"`), `Retry-After` on a denial (whole seconds, rounded up, never 0), and the
   * legacy `X-RateLimit-*` fields with `legacy: true`.
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`; null when allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /** From a rate string: `'10/s'` is a burst of 10 refilled over a second; `burst` overrides the capacity. */
  static fromRate(rate: string, options?: LimiterOptions & { burst?: number }): TokenBucket
  /**
   * The process-wide token bucket `name`: every worker thread asking for it gets a handle
   * to the same native limiter. (For separate processes — `cluster`, pm2 — use the
   * `sharedFile` option instead.) A different configuration under the same name throws
   * an Error with code `ERR_RATOMIC_SHARED_CONFLICT`.
   */
  static shared(name: string, capacity: number, refillPerSec: number | string, options?: SharedOptions): TokenBucket
  static shared(name: string, rate: string, options?: SharedOptions & { burst?: number }): TokenBucket
}

/** At most `limit` calls per key in each window (aligned to the clock's epoch). */
export declare class FixedWindow extends BaseLimiter {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options?: LimiterOptions)
  /** @param window the window's length as a duration such as `'1min'`, `'250ms'`, `'h'` */
  constructor(limit: number, window: string, options?: LimiterOptions)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options?: LimiterOptions)
  /** The most calls a window allows. */
  readonly limit: number
  /** The rule, as the constructors accept it. */
  readonly rule: RuleInfo
  /**
   * The HTTP header fields for `decision` (one this limiter returned), formatted by
   * ratomic's core: `RateLimit-Policy` and `RateLimit` for the limit named `name` (default
   * `"default"`), `Retry-After` on a denial (whole seconds, rounded up, never 0), and the
   * legacy `X-RateLimit-*` fields with `legacy: true`.
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`; null when allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /** The process-wide fixed window `name`, shared by every worker thread (`windowMs` in milliseconds). */
  static shared(name: string, limit: number, windowMs: number, options?: SharedOptions): FixedWindow
  static shared(name: string, limit: number, window: string, options?: SharedOptions): FixedWindow
  static shared(name: string, rate: string, options?: SharedOptions): FixedWindow
}

/** At most `limit` calls per key in any sliding window (the counter approximation, exact integer arithmetic). */
export declare class SlidingWindow extends BaseLimiter {
  /**
   * @param limit the most calls a window allows, a whole number >= 1
   * @param windowMs the window's length in milliseconds (> 0)
   */
  constructor(limit: number, windowMs: number, options?: LimiterOptions)
  /** @param window the window's length as a duration such as `'1min'`, `'250ms'`, `'h'` */
  constructor(limit: number, window: string, options?: LimiterOptions)
  /** From a rate string such as `'100/min'`. */
  constructor(rate: string, options?: LimiterOptions)
  /** The most calls a window allows. */
  readonly limit: number
  /** The rule, as the constructors accept it. */
  readonly rule: RuleInfo
  /**
   * The HTTP header fields for `decision` (one this limiter returned), formatted by
   * ratomic's core: `RateLimit-Policy` and `RateLimit` for the limit named `name` (default
   * `"default"`), `Retry-After` on a denial (whole seconds, rounded up, never 0), and the
   * legacy `X-RateLimit-*` fields with `legacy: true`.
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`; null when allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /** The process-wide sliding window `name`, shared by every worker thread (`windowMs` in milliseconds). */
  static shared(name: string, limit: number, windowMs: number, options?: SharedOptions): SlidingWindow
  static shared(name: string, limit: number, window: string, options?: SharedOptions): SlidingWindow
  static shared(name: string, rate: string, options?: SharedOptions): SlidingWindow
}

/**
 * One token bucket for all traffic, no key (core's `DirectTokenBucket`): a global limit — all
 * calls to a backend, one outbound API quota — with no key to convert or look up, so cheaper
 * than any keyed call. Built as a {@link TokenBucket} is, with `clock` the only option; its
 * decisions, errors and header fields are a TokenBucket's. In a {@link Stack} it ignores its key.
 */
export declare class DirectTokenBucket {
  /**
   * @param capacity burst size, a whole number >= 1
   * @param refillPerSec tokens per second (finite, > 0), or a rate string (`'5/s'`: 5 tokens a second)
   */
  constructor(capacity: number, refillPerSec: number | string, options?: { clock?: ClockLike })
  /** From a rate string: `'1000/s'` is a burst of 1000 refilled over a second; `burst` overrides the capacity. */
  constructor(rate: string, options?: { clock?: ClockLike; burst?: number })
  /**
   * Takes `cost` (default 1, a whole number; 0 answers like `peek`) if the bucket holds that
   * much. Throws a RangeError if `cost` exceeds the capacity (and changes nothing).
   */
  allow(cost?: number): Decision
  /** Answers like `allow` and changes nothing. */
  peek(cost?: number): Decision
  /** Gives `tokens` (default 1) back, never above full. */
  refund(tokens?: number): void
  /** Fills the bucket again (reads no clock). */
  reset(): void
  /**
   * Takes `cost`, waiting (on the bucket's clock) out each denial's `retryAfterMs`; as
   * {@link BaseLimiter.acquire}, without the key.
   */
  acquire(cost?: number, options?: AcquireOptions): Promise<Decision>
  /** The most the bucket can hold: the capacity. */
  readonly limit: number
  /** The rule, as TokenBucket's constructors accept it (a `tokenBucket` {@link RuleInfo}). */
  readonly rule: RuleInfo
  /** The clock the bucket was given (`undefined`: the monotonic clock). */
  readonly clock: ClockLike | undefined
  /** The bucket's time now, in milliseconds on its clock. */
  now(): number
  /**
   * The HTTP header fields for `decision` (one this bucket returned), as
   * {@link TokenBucket.headers}: the limit named `name` (default `"default"`).
   */
  headers(decision: Decision, options?: HeaderOptions): Array<[string, string]>
  /** The RFC 9457 problem document (JSON) for a 429 answering `decision`; null when allowed. */
  problem(decision: Decision, options?: { name?: string }): string | null
  /** The rule with its units: `DirectTokenBucket { token bucket 1000 per 1s }`; `util.inspect` shows the same. */
  toString(): string
  /** From a rate string: `'1000/s'` is a burst of 1000 refilled over a second; `burst` overrides the capacity. */
  static fromRate(rate: string, options?: { clock?: ClockLike; burst?: number }): DirectTokenBucket
  /**
   * The process-wide bucket `name`, on the monotonic clock: every worker thread asking for it
   * gets a handle to the same native bucket (a global limit across workers). A different
   * configuration, or another kind of limiter, under the same name throws an Error with code
   * `ERR_RATOMIC_SHARED_CONFLICT`.
   */
  static shared(name: string, capacity: number, refillPerSec: number | string): DirectTokenBucket
  static shared(name: string, rate: string, options?: { burst?: number }): DirectTokenBucket
}

/** One limit of a {@link Limiter}: a rate string is a token bucket; an object picks the algorithm. */
export type Rule =
  | string
  | {
      /** A token bucket (the default). */
      algorithm?: 'tokenBucket'
      /** The burst: the most tokens a key holds (a whole number >= 1). */
      capacity: number
      /** Tokens refilled per second (finite, > 0). */
      refillPerSec: number
      /** Overrides the capacity. */
      burst?: number
    }
  | {
      /** A token bucket (the default). */
      algorithm?: 'tokenBucket'
      /** A rate string: `'10/s'` is a capacity of 10 refilled over a second. */
      rate: string
      /** Overrides the capacity the rate string implies. */
      burst?: number
    }
  | {
      /** A fixed or a sliding window. */
      algorithm: 'fixedWindow' | 'slidingWindow'
      /** A rate string: `'100/min'` is 100 calls per window of a minute. */
      rate: string
    }
  | {
      /** A fixed or a sliding window. */
      algorithm: 'fixedWindow' | 'slidingWindow'
      /** The most calls a window allows (a whole number >= 1). */
      limit: number
      /** The window's length in milliseconds (> 0). */
      windowMs: number
    }
  | {
      /** A fixed or a sliding window. */
      algorithm: 'fixedWindow' | 'slidingWindow'
      /** The most calls a window allows (a whole number >= 1). */
      limit: number
      /** The window as a duration such as `'1min'`, `'250ms'`, `'h'`. */
      window: string
    }
  | RuleInfo

/**
 * Several limits in one string, as Python's `limits` and slowapi write them: `'10/second;1000/day'`
 * (separated by `;`, `,` or `|`), each a token bucket named by its rate string as written.
 */
export type LimitsString = string

/** Several named limits on one key, all or nothing (at most 16). */
export declare class Limiter extends BaseLimiter<MultiDecision> {
  /**
   * @param limits `{ name: rule }`, `[{ name, ...rule }]`, or a string such as
   * `'10/second;1000/day'` (token buckets named `'10/second'` and `'1000/day'`)
   */
  constructor(limits: Record<string, Rule> | Array<Exclude<Rule, string> & { name: string }> | LimitsString, options?: LimiterOptions)
  /** The limit names, in order. */
  readonly names: string[]
  /** Every limit's rule, by name, as the constructor accepts them. */
  readonly rules: Record<string, RuleInfo>
  /**
   * The HTTP header fields for `decision` (one this limiter returned): one `RateLimit-Policy`
   * and `RateLimit` item per limit the call was subject to, `Retry-After` on a denial, and the
   * legacy `X-RateLimit-*` fields (of the combined decision) with `legacy: true`.
   */
  headers(decision: MultiDecision, options?: Omit<HeaderOptions, 'name'>): Array<[string, string]>
  /** The RFC 9457 problem document for a 429 answering `decision`, naming who denied; null when allowed. */
  problem(decision: MultiDecision): string | null
  /**
   * A view of this limiter (same keys and state) whose calls are subject only to the named
   * limits: per-request limit selection. Views are cached, one per set of limits. An unknown
   * name, or none, throws a RangeError (`ERR_RATOMIC_UNKNOWN_LIMIT`).
   */
  select(names: string[]): Limiter
  /** The process-wide Limiter `name`, shared by every worker thread. */
  static shared(name: string, limits: Record<string, Rule> | Array<Exclude<Rule, string> & { name: string }> | LimitsString, options?: SharedOptions): Limiter
}

/**
 * A call's token-bucket quota: a rate string (`"100/min"`: a burst of 100
 * refilled over a minute), `{ capacity, refillPerSec }`, or `{ rate, burst }`.
 */
export type QuotaSpec =
  | string
  | {
      /** Burst size, a whole number >= 1. */
      capacity: number
      /** Tokens refilled per second (finite, > 0). */
      refillPerSec: number
    }
  | {
      /** A rate string such as `"10/s"`: its count is the burst unless `burst` is given. */
      rate: string
      /** A burst other than the rate's count, refilled at the same pace. */
      burst?: number
    }

/**
 * Token buckets whose quota comes with each call, one bucket per (quota, key), all in one
 * bounded store: per-customer quotas read from a database. The same key under two quotas
 * is two buckets; a quota never seen starts full. Windows are not accepted (a window's
 * state cannot be read without its period).
 */
export declare class Quotas {
  constructor(options?: LimiterOptions)
  /** Takes `cost` (default 1) from `key`'s bucket under `quota`. A denial is a value. */
  allow(key: Key, quota: QuotaSpec, cost?: number): Decision
  /** Answers like `allow` and changes nothing. */
  peek(key: Key, quota: QuotaSpec, cost?: number): Decision
  /** Gives `tokens` (default 1) back to `key`'s bucket under `quota`, never above full. */
  refund(key: Key, quota: QuotaSpec, tokens?: number): void
  /** Forgets `key`'s bucket under `quota`: it is full again. */
  reset(key: Key, quota: QuotaSpec): void
  /** Like {@link BaseLimiter.acquire}, with the quota. */
  acquire(key: Key, quota: QuotaSpec, cost?: number, options?: AcquireOptions): Promise<Decision>
  /** The HTTP header fields for `decision` (made under `quota`), as `TokenBucket.headers`. */
  headers(decision: Decision, quota: QuotaSpec, options?: HeaderOptions): Array<[string, string]>
  /** The problem document for a 429 answering `decision` under `quota`; null when allowed. */
  problem(decision: Decision, quota: QuotaSpec, options?: { name?: string }): string | null
  /** Drops every bucket full again at `atMs` (default: now); returns how many. */
  gc(atMs?: number): number
  /** Buckets held, across all quotas. */
  readonly size: number
  /** Bytes of memory the store holds. */
  readonly memoryBytes: number
  /** The longest key accepted, in bytes. */
  readonly maxKeyLen: number
  /** The clock given to the constructor (`undefined`: the monotonic clock). */
  readonly clock: ClockLike | undefined
  /** The clock's reading, in milliseconds. */
  now(): number
  /** `Quotas { buckets: 3 }`; `util.inspect` shows the same. */
  toString(): string
}

/**
 * Limiters on different keys (per IP, per user, global), all or nothing: a call passes
 * only if every member allows its key; then every member is charged, otherwise none is.
 * Members stay usable on their own. The stack reads one clock per call and passes it to
 * every member, so all members must have the same clock: members on different clocks throw
 * a RangeError. A {@link DirectTokenBucket} member (a global limit)
 * ignores its key; the stack still takes one key per member.
 */
export declare class Stack {
  /**
   * @param members `{ name: limiter }` or `[[name, limiter]]`, at most 16
   * @param options `clock`: the members' clock (by default the first member's); any other throws
   */
  constructor(
    members: Record<string, BaseLimiter<any> | DirectTokenBucket> | Array<[string, BaseLimiter<any> | DirectTokenBucket]>,
    options?: { clock?: ClockLike },
  )
  /** The member names, in order. */
  readonly names: string[]
  /** The clock the stack reads (`undefined`: the monotonic clock). */
  readonly clock: ClockLike | undefined
  /** Charges `cost` (default 1) to every member, member `i` on `keys[i]`, all or nothing. */
  allow(keys: Key[], cost?: number): MultiDecision
  /** Answers like `allow` and changes nothing. */
  peek(keys: Key[], cost?: number): MultiDecision
  /** Gives `tokens` (default 1) back to every member, each on its key, never above full. */
  refund(keys: Key[], tokens?: number): void
  /** Forgets every member's key: each is full again. */
  reset(keys: Key[]): void
  /** Like {@link BaseLimiter.acquire}, for every member at once. */
  acquire(keys: Key[], cost?: number, options?: AcquireOptions): Promise<MultiDecision>
  /**
   * The HTTP header fields for `decision` (one this stack returned): one `RateLimit-Policy`
   * and `RateLimit` item per member, named as the member, `Retry-After` on a denial, and the
   * legacy `X-RateLimit-*` fields (of the combined decision) with `legacy: true`. A `Limiter`
   * member has no single policy: a stack holding one throws a TypeError naming it.
   */
  headers(decision: MultiDecision, options?: Omit<HeaderOptions, 'name'>): Array<[string, string]>
  /**
   * The RFC 9457 problem document for a 429 answering `decision`, naming the members that
   * denied; null when allowed. A stack with a `Limiter` member throws as `headers` does.
   */
  problem(decision: MultiDecision): string | null
  /**
   * Each member's name and printed form: `Stack { "ip": TokenBucket { token bucket 10 per 1s,
   * keys: 0 }, "global": DirectTokenBucket { token bucket 1000 per 1s } }`.
   */
  toString(): string
}
