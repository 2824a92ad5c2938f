'use strict'
// Run by hand: `node benchmark/bench.js` (after `npm run build`).
// ratomic's synchronous allow side by side with rate-limiter-flexible's
// RateLimiterMemory (awaited consume) and the floor: an empty native call.
const { TokenBucket, noop } = require('..')
const { RateLimiterMemory } = require('rate-limiter-flexible')

const N = Number(process.env.N || 2_000_000)
const KEYS = 100_000
const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`)

function timeSync(name, n, fn) {
  for (let i = 0; i < Math.min(n, 200_000); i++) fn(i) // warm up
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) fn(i)
  const ns = Number(process.hrtime.bigint() - t0) / n
  return { name, ns }
}

async function timeAsync(name, n, fn) {
  for (let i = 0; i < Math.min(n, 100_000); i++) await fn(i)
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await fn(i)
  const ns = Number(process.hrtime.bigint() - t0) / n
  return { name, ns }
}

async function main() {
  const rows = []
  let sink = 0
  rows.push(timeSync('floor: empty native call', N, () => { noop() }))

  // Hot key: a bucket that never runs dry.
  const hot = new TokenBucket(1e9, 1e9)
  rows.push(timeSync('ratomic allow, hot key', N, () => { sink += hot.allow('user:42').remaining }))
  const rlfHot = new RateLimiterMemory({ points: 1e9, duration: 1 })
  rows.push(await timeAsync('rlf consume, hot key', N / 4, () => rlfHot.consume('user:42')))

  // 100k distinct keys.
  const many = new TokenBucket(1e9, 1e9)
  rows.push(timeSync('ratomic allow, 100k keys', N, (i) => { sink += many.allow(keys[i % KEYS]).remaining }))
  const rlfMany = new RateLimiterMemory({ points: 1e9, duration: 1 })
  rows.push(await timeAsync('rlf consume, 100k keys', N / 4, (i) => rlfMany.consume(keys[i % KEYS])))

  // Denial: a drained bucket that refills slowly.
  const denied = new TokenBucket(1, 1e-6)
  denied.allow('user:42')
  rows.push(timeSync('ratomic allow, denial', N, () => { sink += denied.allow('user:42').retryAfterMs }))
  const rlfDenied = new RateLimiterMemory({ points: 1, duration: 1e6 })
  await rlfDenied.consume('user:42')
  rows.push(await timeAsync('rlf consume, denial', N / 4, () => rlfDenied.consume('user:42').catch((r) => r)))

  const by = Object.fromEntries(rows.map((r) => [r.name, r.ns]))
  for (const r of rows) console.log(`${r.name.padEnd(28)} ${r.ns.toFixed(1).padStart(8)} ns/op`)
  const f = (x) => x.toFixed(2)
  console.log()
  console.log(`hot allow vs rlf:   ${f(by['rlf consume, hot key'] / by['ratomic allow, hot key'])}x faster (target >= 3x)`)
  console.log(`100k keys vs rlf:   ${f(by['rlf consume, 100k keys'] / by['ratomic allow, 100k keys'])}x faster`)
  console.log(`denial vs rlf:      ${f(by['rlf consume, denial'] / by['ratomic allow, denial'])}x faster (target >= 10x)`)
  console.log(`hot allow / floor:  ${f(by['ratomic allow, hot key'] / by['floor: empty native call'])}x (target <= 6x)`)
  if (sink === 42) console.log('')
}

main()
