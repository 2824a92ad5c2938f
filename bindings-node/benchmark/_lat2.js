const { Pool } = require('pg')
const { RateLimiterPostgres } = require('rate-limiter-flexible')
async function main() {
  const pool = new Pool({ connectionString: process.env.U, max: 4 })
  const rlf = await new Promise((res, rej) => { const l = new RateLimiterPostgres({ storeClient: pool, storeType: 'pool', points: 100000, duration: 1, tableName: 'rlf_b', keyPrefix: 'b' }, (e) => e ? rej(e) : res(l)) })
  const P = 'x' + process.pid
  const CALL = 'SELECT ratomic_v1_call($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::text, $7::bigint[], $8::bigint[]) AS r'
  const PLAIN = `WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at)
  SELECT $1::text, $2::bytea, 'g', ARRAY[t.now + $3::bigint * $4::bigint, 0, 0]::bigint[], t.now + $3::bigint * $4::bigint FROM t
  ON CONFLICT (prefix, key) DO UPDATE
    SET kinds = 'g',
        state = ARRAY[greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - $3::bigint * $4::bigint) + $3::bigint * $4::bigint,
                      CASE WHEN s.kinds = 'g' THEN s.state[2] ELSE 0 END, 0],
        full_at = greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - $3::bigint * $4::bigint) + $3::bigint * $4::bigint
    WHERE greatest(CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END, excluded.full_at - $3::bigint * $4::bigint) + $3::bigint * $4::bigint - (excluded.full_at - $3::bigint * $4::bigint) <= $5::bigint * $4::bigint
  RETURNING s.state[1] - (SELECT now FROM t) AS r`
  const c = {
    select1: (k) => pool.query({ name: 's1', text: 'SELECT 1 AS r', values: [] }),
    fn: (k) => pool.query({ name: 'rc', text: CALL, values: ['a', P, Buffer.from(k), null, '1', 'g', '{10}', '{100000}'] }),
    slim: (k) => pool.query({ name: 'sl', text: 'SELECT slim_allow($1::text, $2::bytea, $3::bigint, $4::bigint, $5::bigint) AS r', values: [P + 's', Buffer.from(k), '1', '10', '100000'] }),
    plain: (k) => pool.query({ name: 'pl', text: PLAIN, values: [P + 'p', Buffer.from(k), '1', '10', '100000'] }),
    rlf: (k) => rlf.consume(k).catch((r) => r),
  }
  const res = {}
  const keys = +(process.env.KEYS || 10000)
  for (let round = 0; round < 4; round++) {
    for (const [name, f] of Object.entries(c)) {
      let n = 0; const t0 = process.hrtime.bigint(); const end = Date.now() + 1000
      while (Date.now() < end) { await f('k' + (n % keys)); n++ }
      const us = Number(process.hrtime.bigint() - t0) / 1e3 / n
      ;(res[name] ||= []).push(us)
    }
  }
  for (const [k, v] of Object.entries(res)) console.log(k.padEnd(8), v.map((x) => x.toFixed(1)).join(' '), 'us/call')
  await pool.end()
}
main()
