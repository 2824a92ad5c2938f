// The typings of `ratomic/redis`, checked by tsc against redis.d.ts (misuse
// must not type-check: each expected error is marked) and then run against
// a real redis-server, so every typed call is also a real call.
// typings-match.test.js checks that this file uses every declaration.
import test from 'node:test'
import assert from 'node:assert/strict'
import * as path from 'node:path'
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import { Limiter, TokenBucket } from 'ratomic'
import {
  IoRedisLike,
  Lease,
  NodeRedisLike,
  RedisBase,
  RedisDecision,
  RedisFixedWindow,
  RedisLimiter,
  RedisMultiDecision,
  RedisOptions,
  RedisSlidingWindow,
  RedisTokenBucket,
  Source,
} from 'ratomic/redis'

// The helper is plain JavaScript next to this file's source (the compiled file runs from build/).
const { startRedis } = require(path.join(__dirname, '..', 'redis-server.js')) as {
  startRedis(): Promise<{ port: number; stop(): Promise<void> }>
}

test('typings: ratomic/redis through ioredis and node-redis', async () => {
  const server = await startRedis()
  const io = new Redis({ port: server.port, host: '127.0.0.1' })
  const nodeRedis = createClient({ socket: { port: server.port, host: '127.0.0.1' } })
  await nodeRedis.connect()
  try {
    // Both clients as they come, typed by their own packages, fit the client option.
    const ioLike: IoRedisLike = io
    const nodeLike: NodeRedisLike = nodeRedis
    assert.equal(await ioLike.call('PING'), 'PONG')
    assert.ok(ioLike.pipeline())
    assert.equal(await nodeLike.sendCommand(['PING']), 'PONG')
    const options: RedisOptions<TokenBucket> = {
      client: ioLike,
      prefix: `types-${process.pid}:`,
      timeoutMs: 10_000, // generous: the calls below must reach Redis on a loaded machine
      onError: new TokenBucket('5/s'),
      denyRetryAfterMs: 500,
      denyCache: 100,
      breakerThreshold: 3,
      breakerCooldownMs: 2000,
      breakerFailureTimeMs: 10_000,
      maxKeyLen: 64,
    }
    const tb = new RedisTokenBucket(5, 1, options)
    const d: RedisDecision = await tb.allow('k')
    const source: Source = d.source
    assert.equal(source, 'redis')
    assert.equal((await tb.peek('k')).allowed, true)
    await tb.refund('k')
    // The *At forms take your clock (ms): a key is best kept on one clock.
    assert.equal((await tb.allowAt('j', 1000, 2)).remaining, 3)
    assert.equal((await tb.peekAt('j', 1000)).remaining, 2)
    await tb.refundAt('j', 1000, 1)
    await tb.reset('k')
    const many: RedisDecision[] = await tb.allowMany(['a', ['b', 2], Buffer.from('c')])
    assert.equal(many.length, 3)
    assert.equal((await tb.allowManyAt(['j'], 1000))[0].remaining, 3)
    assert.equal((await tb.acquire('k', 1, { timeoutMs: 0 })).allowed, true)
    assert.equal(tb.client, io)
    assert.equal(tb.prefix, options.prefix)
    assert.equal(tb.limit, 5)
    assert.equal(tb.breakerOpen, false)
    assert.ok(tb instanceof RedisBase)

    // Leases: off by default; 'auto' or a size; close() gives them back.
    assert.equal(tb.lease, null)
    const lease: Lease = 'auto'
    const leasing = new RedisTokenBucket(80, 10, { client: io, prefix: `types-lease-${process.pid}:`, lease, leaseKeys: 100 })
    const max: number | null = leasing.lease
    assert.equal(max, 10)
    await leasing.allow('k')
    await leasing.allow('k')
    const held: number = leasing.leasesHeld
    assert.equal(held, 1)
    const back: number = await leasing.close()
    assert.equal(back, 1)
    assert.equal(new RedisTokenBucket(80, 10, { client: io, lease: 4 }).lease, 4)
    // @ts-expect-error lease is 'off', 'auto' or a number
    assert.throws(() => new RedisTokenBucket(5, 1, { client: io, lease: 'always' }), RangeError)

    const fw = new RedisFixedWindow(10, '1min', { client: nodeLike, onError: 'allow' })
    const sw = new RedisSlidingWindow('10/min', { client: nodeRedis, onError: 'deny' })
    assert.equal((await new RedisTokenBucket('10/s', { client: io, burst: 20 }).allow('k')).limit, 20)
    assert.equal((await new RedisFixedWindow('3/s', { client: io }).allow('k')).limit, 3)
    assert.equal((await new RedisSlidingWindow(4, 1000, { client: io }).allow('k')).limit, 4)
    for (const l of [fw, sw]) assert.equal((await l.allow('k')).source, 'redis')

    const m = new RedisLimiter({ burst: '2/s', day: { algorithm: 'fixedWindow', rate: '100/d' } }, { client: io, onError: new Limiter({ burst: '2/s' }) })
    const md: RedisMultiDecision = await m.allow('u')
    assert.deepEqual(
      md.entries.map((e) => e.name),
      ['burst', 'day']
    )
    assert.deepEqual(m.names, ['burst', 'day'])
    assert.deepEqual(md.deniedBy, [])
    assert.equal(md.source, 'redis')

    // Header fields and problem bodies, as the in-memory limiters give them (what the middleware sends).
    const fields: Array<[string, string]> = tb.headers(d, { name: 'api', legacy: true })
    assert.deepEqual(fields[0], ['RateLimit-Policy', '"api";q=5;w=5'])
    const problem: string | null = tb.problem(d, { name: 'api' })
    assert.equal(problem, null)
    assert.equal(m.headers(md, { legacy: false })[0][1], '"burst";q=2;w=1, "day";q=100;w=86400')
    assert.equal(m.problem(md), null)
    // Printed with the rules' units; several limits also as one string, as slowapi writes them.
    const printed: string = fw.toString()
    assert.equal(printed, 'RedisFixedWindow { fixed window 10 per 1m, prefix: "ratomic:" }')
    assert.equal(String(m), 'RedisLimiter { "burst": token bucket 2 per 1s, "day": fixed window 100 per 1d, prefix: "ratomic:" }')
    const slowapi = new RedisLimiter('5/second;100 per day', { client: io })
    assert.deepEqual(slowapi.names, ['5/second', '100 per day'])
    // @ts-expect-error a RedisLimiter's limits are named already
    assert.throws(() => m.headers(md, { name: 'x' }), TypeError)

    // @ts-expect-error the client is required
    assert.throws(() => new RedisTokenBucket(5, 1, {}), TypeError)
    // @ts-expect-error a URL is not a client
    assert.throws(() => new RedisTokenBucket(5, 1, { client: 'redis://127.0.0.1' }), TypeError)
    // @ts-expect-error a single-rule limiter falls back to a single-rule limiter, not a Limiter
    assert.throws(() => new RedisTokenBucket(5, 1, { client: io, onError: new Limiter({ a: '1/s' }) }), TypeError)
    // @ts-expect-error onError is 'raise', 'allow', 'deny' or a limiter
    assert.throws(() => new RedisTokenBucket(5, 1, { client: io, onError: 'ignore' }), RangeError)
    // @ts-expect-error RedisBase is abstract
    assert.throws(() => new RedisBase(), TypeError)
  } finally {
    io.disconnect()
    await nodeRedis.destroy()
    await server.stop()
  }
})
