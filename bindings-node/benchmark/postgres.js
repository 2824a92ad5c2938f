'use strict'
// Run by postgres/bench.sh (or by hand after `npm run build`, with a
// database whose URL is in RATOMIC_POSTGRES_URL):
//
//   node benchmark/postgres.js [ROUNDS] [SECONDS]
//
// ratomic/postgres against rate-limiter-flexible's RateLimiterPostgres, both
// through one pg Pool of 4 connections on the same local server: decisions
// per second with 1 and 64 calls in flight, on one hot key and on 10,000
// keys, limits no run reaches (100,000 a second). The contenders alternate
// which goes first in each round; the median of the rounds is reported per
// cell, and ratomic / rlf.
const { Pool } = require('pg')
const { RateLimiterPostgres } = require('rate-limiter-flexible')
const { PostgresTokenBucket, migrate } = require('../postgres')

const url = process.env.RATOMIC_POSTGRES_URL
if (!url) throw new Error('RATOMIC_POSTGRES_URL: the database to measure on')
const rounds = Number(process.argv[2] || 3)
const seconds = Number(process.argv[3] || 1)

async function measure(call, inFlight, keys) {
  let done = 0
  let stop = false
  let i = 0
  const worker = async (w) => {
    let k = w * 7919
    while (!stop) {
      k += 1
      await call('k' + (k % keys))
      done += 1
    }
  }
  const start = process.hrtime.bigint()
  const workers = Array.from({ length: inFlight }, (_, w) => worker(w))
  await new Promise((r) => setTimeout(r, seconds * 1000))
  stop = true
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9
  const n = done
  await Promise.all(workers)
  i += 1
  return n / elapsed
}

const median = (v) => v.slice().sort((a, b) => a - b)[Math.floor(v.length / 2)]

async function main() {
  const pool = new Pool({ connectionString: url, max: 4 })
  await migrate(pool)
  const ours = new PostgresTokenBucket(100000, 100000, { client: pool, prefix: 'bench-node-' + process.pid, denyCache: 0 })
  const rlf = await new Promise((resolve, reject) => {
    const l = new RateLimiterPostgres(
      { storeClient: pool, storeType: 'pool', points: 100000, duration: 1, tableName: 'rlf_bench', keyPrefix: 'b' + process.pid },
      (err) => (err ? reject(err) : resolve(l))
    )
  })
  const contenders = {
    ratomic: (key) => ours.allow(key),
    rlf: (key) => rlf.consume(key).catch((r) => r),
  }
  console.log(`${'cell'.padEnd(24)}${'ratomic/s'.padStart(12)}${'rlf/s'.padStart(12)}${'ratio'.padStart(9)}`)
  for (const [inFlight, keys, name] of [[1, 1, '1 in flight, hot key'], [1, 10000, '1 in flight, 10k keys'], [64, 1, '64 in flight, hot key'], [64, 10000, '64 in flight, 10k keys']]) {
    const got = { ratomic: [], rlf: [] }
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? ['ratomic', 'rlf'] : ['rlf', 'ratomic']
      for (const c of order) got[c].push(await measure(contenders[c], inFlight, keys))
    }
    const a = median(got.ratomic)
    const b = median(got.rlf)
    console.log(`${name.padEnd(24)}${a.toFixed(0).padStart(12)}${b.toFixed(0).padStart(12)}${(a / b).toFixed(2).padStart(8)}x`)
  }
  await ours.gc(4e12)
  await pool.query('DROP TABLE IF EXISTS rlf_bench')
  await pool.end()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
