'use strict'
// Run by hand, after `npm ci && npm run build`:
//
//   node benchmark/shared.js [ROUNDS]
//
// To rerun part of it: SCENARIOS=many PROCS=4 ONLY='ratomic shared,ratomic in process'
// (comma-separated; ONLY must keep `ratomic shared`, the reference). VERBOSE=1
// also prints every run's ns per call as it comes.
//
// One limit shared by the processes of a Node `cluster` (issue 14's peer
// benchmark): ratomic's TokenBucket on one file shared by every worker
// (`{ sharedFile }`) against rate-limiter-flexible's RateLimiterCluster, whose
// workers send each call over IPC to the RateLimiterClusterMaster in the
// primary (this process), which answers from a RateLimiterMemory.
//
// Each run forks P workers (P = 1, 2, 4) for one contender; every worker
// builds its limiter, touches every key it will use once, says it is ready,
// and when all are ready the primary releases them together; each then makes
// N calls (ratomic's synchronous, rate-limiter-flexible's awaited one after
// the other, as a request handler would) and reports its time. Contenders:
//
// - ratomic shared: `new TokenBucket(1e7, 1, { maxKeys: 2 ** 15, sharedFile })`,
//   `allow(key).allowed`, the file in a fresh private directory (mkdtemp)
//   under /dev/shm for every run; after the run the primary opens the file
//   again and checks, by `peek`, that the tokens taken from the keys add up
//   to the calls all workers made (the refill of 1 token a second allowed for);
// - ratomic in process: the same without the file (each worker has its own:
//   *not* one limit, shown as the floor);
// - rlf cluster: `await RateLimiterCluster#consume(key)` (points 1e9 per
//   second, a fresh keyPrefix, hence a fresh limiter in the master, per run);
// - rlf cluster, 64 in flight: the same calls issued 64 at a time and
//   awaited together (a busy worker with many requests open: their IPC
//   messages overlap); its ns per call is the batch's time ÷ its calls, a
//   throughput figure rather than one call's latency;
// - rlf memory: `await RateLimiterMemory#consume(key)` in each worker (not
//   one limit either: what RateLimiterCluster costs over its own in-process
//   store).
//
// Limits are never reached: every call must be allowed, and the script says
// so when one is not. Scenarios: `hot`, one 16-byte key every worker hits;
// `many`, 10,000 16-byte keys, each worker in its own random order. Rounds
// interleave the contenders (forward order in even rounds, reversed in odd
// ones). Figures: wall-clock ns per call per worker (the workers' mean),
// median over ROUNDS (default 7) rounds, with the range; calls/s of all
// workers over the time from the first start to the last finish; ratios are
// ns per call ÷ ratomic shared's (medians; in brackets the range of the
// per-round ratios). On a 2-CPU machine, P = 2 and 4 workers share the CPUs
// with each other (and, for RateLimiterCluster, with the primary that
// answers them).
const cluster = require('node:cluster')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFileSync } = require('node:child_process')

const CAP = 1e7 // never reached
const REFILL = 1 // token a second: no key becomes full (and forgettable) during a run
const MAX_KEYS = 2 ** 15
const KEYS = 10_000
const HOT = 'user:00000000042' // 16 bytes, as every key here
const key = (i) => `user:${String(i).padStart(11, '0')}`

// [name, calls per worker]
const CONTENDERS = [
  ['ratomic shared', 1_000_000],
  ['ratomic in process', 1_000_000],
  ['rlf cluster', 20_000],
  ['rlf cluster, 64 in flight', 20_000],
  ['rlf memory', 200_000],
]
const REF = 'ratomic shared'
const IN_FLIGHT = 64
const SCENARIOS = (process.env.SCENARIOS || 'hot,many').split(',')
const PROCS = (process.env.PROCS || '1,2,4').split(',').map(Number)
const ONLY = process.env.ONLY ? process.env.ONLY.split(',') : null
const RUN = CONTENDERS.filter(([n]) => !ONLY || ONLY.includes(n))

// The worker's key sequence: its own order, the same in every run.
function keySequence(scenario, calls, index) {
  if (scenario === 'hot') return new Array(calls).fill(HOT)
  const keys = Array.from({ length: KEYS }, (_, i) => key(i))
  let seed = index + 1
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  for (let i = keys.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1))
    ;[keys[i], keys[j]] = [keys[j], keys[i]]
  }
  return Array.from({ length: calls }, (_, i) => keys[i % KEYS])
}

// ---- worker ---------------------------------------------------------------

async function workerMain() {
  const { CONTENDER: name, SCENARIO: scenario, CALLS, INDEX, FILE, PREFIX } = process.env
  const calls = Number(CALLS)
  const seq = keySequence(scenario, calls, Number(INDEX))
  const distinct = [...new Set(seq)]
  let result
  if (name.startsWith('ratomic')) {
    const { TokenBucket } = require('..')
    const lim = new TokenBucket(CAP, REFILL, name === REF ? { maxKeys: MAX_KEYS, sharedFile: FILE } : { maxKeys: MAX_KEYS })
    let warm = 0
    for (const k of distinct) if (lim.allow(k).allowed) warm++
    await ready()
    let ok = 0
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < calls; i++) if (lim.allow(seq[i]).allowed) ok++
    const t1 = process.hrtime.bigint()
    result = { t0: String(t0), t1: String(t1), ok, warm, distinct: distinct.length }
  } else {
    const { RateLimiterCluster, RateLimiterMemory } = require('rate-limiter-flexible')
    const opts = { keyPrefix: PREFIX, points: 1e9, duration: 1 }
    const lim = name.startsWith('rlf cluster') ? new RateLimiterCluster({ ...opts, timeoutMs: 60_000 }) : new RateLimiterMemory(opts)
    let warm = 0
    let errors = 0
    const consume = (k) => lim.consume(k).then(() => 1, (e) => { if (e instanceof Error) errors++; return 0 })
    for (const k of distinct) warm += await consume(k)
    await ready()
    let ok = 0
    const t0 = process.hrtime.bigint()
    if (name.endsWith('in flight')) {
      for (let i = 0; i < calls; i += IN_FLIGHT) {
        const wave = []
        for (let j = i; j < Math.min(i + IN_FLIGHT, calls); j++) wave.push(consume(seq[j]))
        for (const x of await Promise.all(wave)) ok += x
      }
    } else {
      for (let i = 0; i < calls; i++) ok += await consume(seq[i])
    }
    const t1 = process.hrtime.bigint()
    result = { t0: String(t0), t1: String(t1), ok, warm, distinct: distinct.length, errors }
  }
  process.send({ type: 'result', ...result }, () => process.exit(0))
}

// Tells the primary this worker is ready; resolves when it says go.
function ready() {
  return new Promise((resolve) => {
    const on = (msg) => {
      if (msg && msg.type === 'go') {
        process.off('message', on)
        resolve()
      }
    }
    process.on('message', on)
    process.send({ type: 'ready' })
  })
}

// ---- primary --------------------------------------------------------------

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}
const fmt = (x, d = 0) => x.toLocaleString('en', { minimumFractionDigits: d, maximumFractionDigits: d })

let runId = 0

// One run: P workers of one contender. Returns { ns, perSec, problems }.
function run(name, calls, scenario, p, file) {
  const prefix = `bench-${process.pid}-${runId++}`
  return new Promise((resolve, reject) => {
    const workers = []
    const results = []
    const problems = []
    let readyCount = 0
    let exited = 0
    for (let i = 0; i < p; i++) {
      const w = cluster.fork({ CONTENDER: name, SCENARIO: scenario, CALLS: String(calls), INDEX: String(i), FILE: file, PREFIX: prefix })
      workers.push(w)
      w.on('message', (msg) => {
        if (!msg || typeof msg.type !== 'string') return // rate-limiter-flexible's own messages
        if (msg.type === 'ready' && ++readyCount === p) for (const x of workers) x.send({ type: 'go' })
        if (msg.type === 'result') results.push(msg)
      })
      w.on('exit', (code) => {
        if (code !== 0) problems.push(`worker exit code ${code}`)
        if (++exited === p) {
          if (results.length !== p) return reject(new Error(`${name}: ${results.length} of ${p} workers reported (${problems.join('; ')})`))
          let made = 0
          for (const r of results) {
            made += calls + r.distinct
            if (r.ok !== calls || r.warm !== r.distinct) problems.push(`denied ${calls - r.ok} of ${calls} timed calls, ${r.distinct - r.warm} of ${r.distinct} warm-up calls${r.errors ? `, ${r.errors} errors` : ''}`)
          }
          const ns = results.reduce((s, r) => s + Number(BigInt(r.t1) - BigInt(r.t0)) / calls, 0) / p
          const first = results.reduce((m, r) => (BigInt(r.t0) < m ? BigInt(r.t0) : m), BigInt(results[0].t0))
          const last = results.reduce((m, r) => (BigInt(r.t1) > m ? BigInt(r.t1) : m), BigInt(results[0].t1))
          resolve({ ns, perSec: (p * calls) / (Number(last - first) / 1e9), problems, made })
        }
      })
    }
  })
}

// The primary opens the shared file again: the tokens taken from its keys must add up to the calls made.
function checkShared(file, scenario, p, made, elapsedS) {
  const { TokenBucket } = require('..')
  const lim = new TokenBucket(CAP, REFILL, { maxKeys: MAX_KEYS, sharedFile: file })
  const keys = scenario === 'hot' ? [HOT] : Array.from({ length: KEYS }, (_, i) => key(i))
  // peek (cost 1)'s remaining is what would be left after one more call
  const taken = keys.reduce((s, k) => s + (CAP - 1 - lim.peek(k).remaining), 0)
  const refill = keys.length * REFILL * (elapsedS + 1)
  if (!(made - refill <= taken && taken <= made)) return `ratomic shared count: ${taken} tokens taken from the file, ${made} calls made by ${p} processes`
  return null
}

function header(rounds) {
  let commit = '?'
  try {
    commit = execFileSync('git', ['-C', __dirname, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
  } catch {}
  const rlf = require('rate-limiter-flexible/package.json').version
  const ratomic = require('../package.json').version
  const load = () => os.loadavg().map((x) => x.toFixed(2)).join(' ')
  console.log(`# ${new Date().toISOString()}; commit ${commit}; ${os.arch()}, ${os.cpus().length} CPUs; node ${process.version}`)
  console.log(`# ratomic ${ratomic} (this tree's build), rate-limiter-flexible ${rlf}`)
  console.log(`# load average at start: ${load()}`)
  console.log(`# ${rounds} rounds; calls per worker: ${RUN.map(([n, c]) => `${n} ${fmt(c)}`).join(', ')}`)
  console.log()
  return load
}

async function primaryMain() {
  const rounds = Number(process.argv[2] || 7)
  const { RateLimiterClusterMaster } = require('rate-limiter-flexible')
  new RateLimiterClusterMaster() // eslint-disable-line no-new
  cluster.setupPrimary({ silent: false })
  const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir()
  const load = header(rounds)
  const problems = []
  for (const scenario of SCENARIOS) {
    console.log(`## ${scenario}: ${scenario === 'hot' ? 'one key every worker hits' : `${fmt(KEYS)} keys, each worker in its own random order`}`)
    console.log()
    console.log('| P | contender | ns per call per worker: median | min–max | calls/s, all workers | ÷ ratomic shared: median [min–max] |')
    console.log('|---|---|---:|---:|---:|---|')
    for (const p of PROCS) {
      const ns = Object.fromEntries(RUN.map(([n]) => [n, []]))
      const rate = Object.fromEntries(RUN.map(([n]) => [n, []]))
      for (let r = 0; r < rounds; r++) {
        const order = r % 2 === 0 ? RUN : [...RUN].reverse()
        for (const [name, calls] of order) {
          const dir = fs.mkdtempSync(path.join(base, 'ratomic-bench-'))
          const file = path.join(dir, 'ratomic.shm')
          try {
            const t = process.hrtime.bigint()
            const res = await run(name, calls, scenario, p, file)
            const elapsed = Number(process.hrtime.bigint() - t) / 1e9
            if (name === REF) {
              const miss = checkShared(file, scenario, p, res.made, elapsed)
              if (miss) res.problems.push(miss)
            }
            for (const b of res.problems) {
              problems.push(`${scenario}, P=${p}, round ${r}, ${name}: ${b}`)
              console.error(`PROBLEM: ${problems[problems.length - 1]}`)
            }
            ns[name].push(res.ns)
            rate[name].push(res.perSec)
            if (process.env.VERBOSE) console.log(`# ${scenario}, P=${p}, round ${r}: ${name} ${fmt(res.ns)} ns`)
          } finally {
            fs.rmSync(dir, { recursive: true, force: true })
          }
        }
      }
      const ref = median(ns[REF])
      for (const [name] of RUN) {
        const m = median(ns[name])
        const perRound = ns[name].map((x, i) => x / ns[REF][i])
        const ratio = name === REF ? '' : `${(m / ref).toFixed(1)} [${Math.min(...perRound).toFixed(1)}–${Math.max(...perRound).toFixed(1)}]`
        console.log(`| ${p} | ${name} | ${fmt(m)} | ${fmt(Math.min(...ns[name]))}–${fmt(Math.max(...ns[name]))} | ${fmt(median(rate[name]))} | ${ratio} |`)
      }
    }
    console.log()
  }
  console.log(`# load average at end: ${load()}`)
  console.log(`# ${new Date().toISOString()}`)
  if (problems.length) {
    console.log(`# ${problems.length} PROBLEMS:`)
    for (const b of problems) console.log(`#   ${b}`)
  } else {
    console.log("# every call allowed; every ratomic shared run's token count matched the calls made")
  }
}

if (cluster.isPrimary) {
  primaryMain().catch((e) => {
    console.error(e)
    process.exit(1)
  })
} else {
  workerMain().catch((e) => {
    console.error(e)
    process.exit(1)
  })
}
