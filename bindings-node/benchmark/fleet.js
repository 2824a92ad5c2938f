'use strict'
// Issue 37's benchmark, Node's half (Python's: bindings-python/benches/
// fleet_bench.py, the same cells and contenders but for the peer). Run by
// hand, after `npm run build` (needs redis-server, which run-tests.sh
// installs):
//
//   node benchmark/fleet.js [RUNS] [SECONDS]
//
// One redis-server this script starts (a free 127.0.0.1 port, no
// persistence), one ioredis client for every contender:
// - ratomic, lease off / lease on: RedisTokenBucket#allow, lease 'off' / 'auto';
// - rate-limiter-flexible: RateLimiterRedis#consume;
// - plain GCRA script: the GCRA everyone writes (one string key, server
//   time, SET ... PX), through the same client (defineCommand: EVALSHA);
// - in memory: ratomic's in-process TokenBucket.
// Every contender gets a limit no run reaches (10^9 tokens refilled 10^6 a
// second; rate-limiter-flexible 10^9 points a second). Cells: one call in
// flight (each awaited before the next) and 64 in flight (64 async workers,
// each awaiting its own calls); one hot key, or 10,000 keys in turn. In each
// cell the contenders take turns, in a new shuffled order each of ROUNDS (5)
// rounds, each turn SECONDS / ROUNDS (SECONDS default 1) by wall clock; a
// contender's rate is the median of its turns. Each run's prefixes are
// fresh. Also counted, from the server: script calls (EVALSHA and EVAL, INFO
// commandstats) and read events (INFO stats total_reads_processed: one per
// round trip, a pipeline's included) per 1,000 decisions.
//
// Prints each run's decisions/s, then the ratios against the issue's
// targets: lease off >= 1.0x rate-limiter-flexible and >= 0.9x the plain
// script in every cell; lease on, hot key, >= 20x rate-limiter-flexible and
// >= 0.5x the in-memory limiter.
const { Redis } = require('ioredis')
const { RateLimiterRedis } = require('rate-limiter-flexible')
const { RedisTokenBucket } = require('../redis')
const { TokenBucket } = require('../ratomic')
const { startRedis } = require('../__test__/redis-server')

const RUNS = Number(process.argv[2] || 3)
const SECONDS = Number(process.argv[3] || 1)
const ROUNDS = 5
const IN_FLIGHT = 64
const CAPACITY = 1e9
const PER_SEC = 1e6
const KEYSETS = { 'hot key': ['hot'], '10,000 keys': Array.from({ length: 10_000 }, (_, i) => `user:${i}`) }
const SHAPES = ['1 in flight', `${IN_FLIGHT} in flight`]

const RAW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + interval
if new - now > tau then return {0, new - tau - now} end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
`

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

function shuffle(xs) {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[xs[i], xs[j]] = [xs[j], xs[i]]
  }
  return xs
}

// Decisions `call` made in `seconds` of wall clock, `inFlight` at a time.
async function timed(call, keys, seconds, inFlight) {
  const end = performance.now() + seconds * 1000
  let n = 0
  const worker = async () => {
    let i = Math.floor(Math.random() * keys.length)
    while (performance.now() < end) {
      for (let j = 0; j < 16; j++) await call(keys[i++ % keys.length])
      n += 16
    }
  }
  await Promise.all(Array.from({ length: inFlight }, worker))
  return n
}

// Script calls and read events so far.
async function counts(admin) {
  const stats = await admin.info('commandstats')
  let scripts = 0
  for (const c of ['evalsha', 'eval']) {
    const m = stats.match(new RegExp(`cmdstat_${c}:calls=(\\d+)`))
    if (m) scripts += Number(m[1])
  }
  const reads = Number((await admin.info('stats')).match(/total_reads_processed:(\d+)/)[1])
  return [scripts, reads]
}

function contenders(client, tag) {
  const off = new RedisTokenBucket(CAPACITY, PER_SEC, { client, prefix: `off-${tag}:`, timeoutMs: 1000 })
  const on = new RedisTokenBucket(CAPACITY, PER_SEC, { client, prefix: `on-${tag}:`, timeoutMs: 1000, lease: 'auto' })
  const rlf = new RateLimiterRedis({ storeClient: client, keyPrefix: `rlf-${tag}`, points: CAPACITY, duration: 1 })
  const memory = new TokenBucket(CAPACITY, PER_SEC)
  return {
    limiters: [off, on],
    calls: {
      'ratomic, lease off': (k) => off.allow(k),
      'ratomic, lease on': (k) => on.allow(k),
      'rate-limiter-flexible': (k) => rlf.consume(k),
      'plain GCRA script': (k) => client.gcra(`raw-${tag}:${k}`, 1, CAPACITY),
      'in memory': async (k) => memory.allow(k),
    },
  }
}

async function cell(admin, client, tag, keys, inFlight) {
  const { limiters, calls } = contenders(client, tag)
  for (const call of Object.values(calls)) await timed(call, keys, 0.05, inFlight) // warm-up
  const rates = Object.fromEntries(Object.keys(calls).map((n) => [n, []]))
  const totals = Object.fromEntries(Object.keys(calls).map((n) => [n, [0, 0, 0]]))
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of shuffle(Object.keys(calls))) {
      const [s0, r0] = await counts(admin)
      const t0 = performance.now()
      const n = await timed(calls[name], keys, SECONDS / ROUNDS, inFlight)
      const took = (performance.now() - t0) / 1000
      const [s1, r1] = await counts(admin)
      rates[name].push(n / took)
      const t = totals[name]
      t[0] += n
      t[1] += s1 - s0
      t[2] += Math.max(r1 - r0 - 2, 0) // less our two INFOs
    }
  }
  for (const l of limiters) await l.close()
  return Object.fromEntries(
    Object.keys(calls).map((n) => [n, [median(rates[n]), (1000 * totals[n][1]) / totals[n][0], (1000 * totals[n][2]) / totals[n][0]]]),
  )
}

const fmt = (xs) => xs.map((x) => x.toFixed(2)).join(' / ')

async function main() {
  const server = await startRedis()
  const client = new Redis({ port: server.port, host: '127.0.0.1' })
  const admin = new Redis({ port: server.port, host: '127.0.0.1' })
  client.defineCommand('gcra', { numberOfKeys: 1, lua: RAW })
  try {
    const version = (await admin.info('server')).match(/redis_version:(\S+)/)[1]
    const pkg = (name) => require(`${name}/package.json`).version
    console.log(
      `redis-server ${version}, node ${process.version}, ioredis ${pkg('ioredis')}, rate-limiter-flexible ${pkg('rate-limiter-flexible')}, ` +
        `ratomic ${require('../package.json').version}; ${RUNS} runs, ${SECONDS} s a contender a cell`,
    )
    const results = []
    for (let run = 1; run <= RUNS; run++) {
      const cells = {}
      for (const shape of SHAPES) {
        for (const [kname, keys] of Object.entries(KEYSETS)) {
          const tag = `r${run}-${shape.startsWith('1 ') ? 's' : 'a'}-${keys.length === 1 ? 'hot' : 'many'}`
          cells[`${shape}, ${kname}`] = await cell(admin, client, tag, keys, shape.startsWith('1 ') ? 1 : IN_FLIGHT)
        }
      }
      results.push(cells)
      console.log(`\nrun ${run}: decisions/s (script calls, round trips per 1,000 decisions)`)
      for (const [name, c] of Object.entries(cells)) {
        const row = Object.entries(c)
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([n, [r, s, t]]) => `${n} ${Math.round(r).toLocaleString('en')} (${s.toFixed(0)}, ${t.toFixed(0)})`)
          .join(', ')
        console.log(`  ${name}: ${row}`)
      }
    }
    console.log(`\nratios, runs ${results.map((_, i) => i + 1).join(' / ')}`)
    for (const name of Object.keys(results[0])) {
      const cs = results.map((r) => r[name])
      const ratio = (a, b) => cs.map((c) => c[a][0] / c[b][0])
      const hot = name.endsWith('hot key')
      console.log(`  ${name}:`)
      console.log(`    lease off / rate-limiter-flexible: ${fmt(ratio('ratomic, lease off', 'rate-limiter-flexible'))}  (target >= 1.0)`)
      console.log(`    lease off / plain script: ${fmt(ratio('ratomic, lease off', 'plain GCRA script'))}  (target >= 0.9)`)
      console.log(`    lease on / rate-limiter-flexible: ${fmt(ratio('ratomic, lease on', 'rate-limiter-flexible'))}${hot ? '  (target >= 20)' : ''}`)
      console.log(`    lease on / in memory: ${fmt(ratio('ratomic, lease on', 'in memory'))}${hot ? '  (target >= 0.5)' : ''}`)
      console.log(
        `    script calls per 1,000 decisions, lease off: ${fmt(cs.map((c) => c['ratomic, lease off'][1]))}; lease on: ${fmt(cs.map((c) => c['ratomic, lease on'][1]))}`,
      )
    }
  } finally {
    client.disconnect()
    admin.disconnect()
    await server.stop()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
