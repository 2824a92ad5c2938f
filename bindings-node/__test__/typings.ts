// Compiled with `tsc --noEmit`: the typings must accept real usage and reject misuse.
import { TokenBucket, FixedWindow, SlidingWindow, Limiter, ManualClock, Decision, MultiDecision } from '..'
import * as native from '../index'

const clock = new ManualClock()
const tb = new TokenBucket(10, 5, { clock, maxKeys: 1000, maxKeyLen: 64 })
const d: Decision = tb.allow('user:1')
const allowed: boolean = d.allowed
const wait: number = d.retryAfterMs + d.resetAfterMs + d.remaining + d.limit
tb.allow(Buffer.from('user:1'), 2)
tb.peek('k')
tb.refund('k', 1)
tb.reset('k')
const many: Decision[] = tb.allowMany(['a', ['b', 2]])
const size: number = tb.size
clock.advance(100)
clock.set(0)

const fromRate: TokenBucket = TokenBucket.fromRate('10/s', { burst: 20 })
const str = new TokenBucket('100/min', { clock: () => Date.now() })
const shared: TokenBucket = TokenBucket.shared('api', 10, 1)
const fw = new FixedWindow(100, 60_000)
const fw2 = new FixedWindow('100/min')
const sw = new SlidingWindow(100, '1min', { clock })

const limiter = new Limiter({
  burst: '10/s',
  daily: { algorithm: 'fixedWindow', rate: '1000/day' },
  hourly: { algorithm: 'slidingWindow', limit: 100, window: '1h' },
})
const md: MultiDecision = limiter.allow('user:1')
const deniedBy: string[] = md.deniedBy
const names: string[] = md.entries.map((e) => e.name)
const burstOnly: Limiter = limiter.select(['burst'])

async function waits(): Promise<Decision> {
  const ac = new AbortController()
  return tb.acquire('user:1', 1, { signal: ac.signal, timeoutMs: 500 })
}

const n: number = native.OUT_LEN
const spec: native.LimiterSpec = { multi: false, rules: [{ name: '', algorithm: 'tokenBucket', capacity: 1, refillPerSec: 1 }] }

// @ts-expect-error a key is a string or a Buffer
tb.allow(42)
// @ts-expect-error the clock is a function or a ManualClock
new TokenBucket(1, 1, { clock: 5 })
// @ts-expect-error a Decision has no `ok` field
d.ok

void [allowed, wait, many, size, fromRate, str, shared, fw, fw2, sw, deniedBy, names, burstOnly, waits, n, spec]
