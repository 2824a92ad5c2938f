'use strict'
// One hot-key `allow` in a loop, nothing else: the call to profile, and to
// compare two builds of the addon (alternate them, a few runs each; the
// machine is noisy and code layout alone moves this by 1-3 ns).
//
//   node benchmark/hot-loop.js                      # ns per call
//   perf record -e cpu-clock node benchmark/hot-loop.js
//   N=200000 valgrind --tool=callgrind --toggle-collect='*allow_cb*' node benchmark/hot-loop.js
const { TokenBucket } = require('..')

const N = Number(process.env.N || 30_000_000)
const hot = new TokenBucket(1e9, 1e9) // never runs dry
let allowed = 0
const t0 = process.hrtime.bigint()
for (let i = 0; i < N; i++) if (hot.allow('user:42').allowed) allowed++
const ns = Number(process.hrtime.bigint() - t0) / N
if (allowed !== N) throw new Error(`expected every call allowed, got ${allowed} of ${N}`)
console.log(`${ns.toFixed(1)} ns a call (${N} calls)`)
