const { Pool } = require('pg')
const { RateLimiterPostgres } = require('rate-limiter-flexible')
const { PostgresTokenBucket, migrate } = require('../postgres')
async function main() {
  const pool = new Pool({ connectionString: process.env.U, max: 4 })
  await migrate(pool)
  const ours = new PostgresTokenBucket(100000, 100000, { client: pool, prefix: 'l' + process.pid, denyCache: 0 })
  const rlf = await new Promise((res, rej) => { const l = new RateLimiterPostgres({ storeClient: pool, storeType: 'pool', points: 100000, duration: 1, tableName: 'rlf_b', keyPrefix: 'b' }, (e) => e ? rej(e) : res(l)) })
  const CALL = 'SELECT ratomic_v1_call($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::text, $7::bigint[], $8::bigint[]) AS r'
  const c = {
    select1: (k) => pool.query({ name: 's1', text: 'SELECT 1 AS r', values: [] }),
    rawcall: (k) => pool.query({ name: 'rc', text: CALL, values: ['a', 'raw' + process.pid, Buffer.from(k), null, '1', 'g', '{10}', '{100000}'] }),
    ours: (k) => ours.allow(k),
    rlf: (k) => rlf.consume(k).catch((r) => r),
  }
  const res = {}
  for (let round = 0; round < 3; round++) {
    for (const [name, f] of Object.entries(c)) {
      let n = 0; const t0 = process.hrtime.bigint(); const end = Date.now() + 1000
      while (Date.now() < end) { await f('k' + (n % 10000)); n++ }
      const us = Number(process.hrtime.bigint() - t0) / 1e3 / n
      ;(res[name] ||= []).push(us)
    }
  }
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(8), v.map((x) => x.toFixed(1)).join(' '), 'us/call')
  await pool.end()
}
main()
