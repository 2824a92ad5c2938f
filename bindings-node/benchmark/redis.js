'use strict'
// Run by hand, after `npm run build` (needs redis-server, which run-tests.sh
// installs):
//
//   node benchmark/redis.js [ROUNDS]
//
// ratomic/redis against the raw script and rate-limiter-flexible's
// RateLimiterRedis, through one client of each kind (ioredis, node-redis) on
// one local redis-server this script starts (a free 127.0.0.1 port, no
// persistence). 1,000 keys in turn, limits no run reaches. Contenders,
// interleaved in rounds (their order shuffled each round), each timed by wall
// clock over BATCH calls, in two modes:
//
// - sequential: each call awaited before the next (a request handler's
//   latency: mostly waiting for the round trip);
// - 64 in flight: BATCH calls issued 64 at a time (a busy server: the
//   client pipelines what is in flight).
//
// Contenders:
// - raw: EVALSHA of ratomic's own script with its arguments built once per
//   key before timing, through the same client: the floor of any limiter
//   that uses this script through this client;
// - ratomic: RedisTokenBucket#allow (checks, arguments, decoding, deny
//   cache, breaker, timeout: everything);
// - rlf: rate-limiter-flexible's RateLimiterRedis#consume on the same client.
//
// Prints decisions/s (median over rounds) and ratios to ratomic. Then the
// deny cache: 10 keys at their limit take 90% of 10,000 calls, 1,000 other
// keys the rest; it counts the server's EVALSHA calls (INFO commandstats).
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const { RateLimiterRedis } = require('rate-limiter-flexible')
const { RedisTokenBucket } = require('../redis')
const { NativeRedis } = require('../index.js') // internal: the arguments of a raw call
const { startRedis } = require('../__test__/redis-server')

const ROUNDS = Number(process.argv[2] || 9)
const BATCH = 2_000
const IN_FLIGHT = 64
const KEYS = Array.from({ length: 1_000 }, (_, i) => `user:${i}`)

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

function shuffle(xs) {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[xs[i], xs[j]] = [xs[j], xs[i]]
  }
  return xs
}

// Decisions per second of `call` over BATCH keys from `at`.
async function time(call, at, inFlight) {
  const t0 = process.hrtime.bigint()
  if (inFlight === 1) {
    for (let i = 0; i < BATCH; i++) await call(KEYS[(at + i) % KEYS.length])
  } else {
    for (let i = 0; i < BATCH; i += inFlight) {
      const wave = []
      for (let j = i; j < Math.min(i + inFlight, BATCH); j++) wave.push(call(KEYS[(at + j) % KEYS.length]))
      await Promise.all(wave)
    }
  }
  return BATCH / (Number(process.hrtime.bigint() - t0) / 1e9)
}

async function evalshaCalls(io) {
  const info = await io.info('commandstats')
  const m = info.match(/cmdstat_evalsha:calls=(\d+)/)
  return m ? Number(m[1]) : 0
}

async function compare(label, client, send) {
  const options = { client, prefix: `bench-${label}:`, timeoutMs: 1000 }
  const limiter = new RedisTokenBucket(1e7, 10, options)
  const native = new NativeRedis([{ algorithm: 'tokenBucket', capacity: 1e7, refillPerSec: 10 }], { prefix: options.prefix })
  const prepared = new Map(KEYS.map((k) => [k, [native.sha, '1', native.begin(0, k, 1, undefined, new Float64Array(native.ioLen)), ...native.argv(0, 1)]]))
  const rlf = new RateLimiterRedis({ storeClient: client, keyPrefix: `bench-rlf-${label}`, points: 1e9, duration: 3600, useRedisPackage: label === 'node-redis' })
  await limiter.allow('warm') // loads the script
  const contenders = {
    raw: (k) => send('EVALSHA', prepared.get(k)),
    ratomic: (k) => limiter.allow(k),
    'rate-limiter-flexible': (k) => rlf.consume(k),
  }
  for (const call of Object.values(contenders)) for (const k of KEYS.slice(0, 50)) await call(k)
  for (const inFlight of [1, IN_FLIGHT]) {
    const rates = Object.fromEntries(Object.keys(contenders).map((n) => [n, []]))
    let at = 0
    for (let r = 0; r < ROUNDS; r++) {
      for (const name of shuffle(Object.keys(contenders))) rates[name].push(await time(contenders[name], at, inFlight))
      at += BATCH
    }
    const base = median(rates.ratomic)
    console.log(`${label}, ${inFlight === 1 ? 'sequential (each call awaited)' : `${inFlight} calls in flight`}: decisions/s, median of ${ROUNDS} rounds of ${BATCH}`)
    for (const [name, rs] of Object.entries(rates)) {
      const m = median(rs)
      console.log(`  ${name.padEnd(22)} ${Math.round(m).toLocaleString('en').padStart(9)}/s   ratomic ÷ this: ${(base / m).toFixed(2)}`)
    }
  }
}

async function denyCache(io) {
  const capped = new RedisTokenBucket(5, 1 / 3600, { client: io, prefix: 'bench-deny:', timeoutMs: 1000 })
  const hot = Array.from({ length: 10 }, (_, i) => `hot:${i}`)
  for (const k of hot) while ((await capped.allow(k)).allowed);
  let seed = 1
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const calls = Array.from({ length: 10_000 }, () => (rand() < 0.9 ? hot[Math.floor(rand() * 10)] : KEYS[Math.floor(rand() * KEYS.length)]))
  const before = await evalshaCalls(io)
  const sources = {}
  const t0 = process.hrtime.bigint()
  for (const k of calls) {
    const s = (await capped.allow(k)).source
    sources[s] = (sources[s] || 0) + 1
  }
  const took = Number(process.hrtime.bigint() - t0) / 1e9
  const sent = (await evalshaCalls(io)) - before
  console.log(`deny cache: 10,000 calls, 90% on 10 keys at their limit (ioredis, sequential)`)
  console.log(`  EVALSHA sent: ${sent} (${((100 * (calls.length - sent)) / calls.length).toFixed(1)}% of calls answered off Redis); sources ${JSON.stringify(sources)}; ${Math.round(calls.length / took).toLocaleString('en')} decisions/s`)
}

async function main() {
  const server = await startRedis()
  const io = new Redis({ port: server.port, host: '127.0.0.1' })
  const nodeRedis = createClient({ socket: { port: server.port, host: '127.0.0.1' } })
  await nodeRedis.connect()
  try {
    console.log(`node ${process.version}; redis-server on 127.0.0.1:${server.port}; ${KEYS.length} keys`)
    await compare('ioredis', io, (command, args) => io.call(command, ...args))
    await compare('node-redis', nodeRedis, (command, args) => nodeRedis.sendCommand([command, ...args]))
    await denyCache(io)
  } finally {
    io.disconnect()
    await nodeRedis.destroy()
    await server.stop()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
