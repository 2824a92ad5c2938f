// The middleware typings, checked by tsc and then run.
import test from 'node:test'
import assert from 'node:assert/strict'
import { ipKeyGenerator, rateLimit, RateLimitOptions } from 'ratomic/express'
import ratomicFastify = require('ratomic/fastify')
import { DirectTokenBucket, Stack, TokenBucket } from 'ratomic'
import { RedisLimiter, RedisTokenBucket } from 'ratomic/redis'

test('typings: the middleware factories', () => {
  const options: RateLimitOptions = { limiter: new TokenBucket('5/s'), name: 'api', legacyHeaders: true, ipv6Subnet: 56 }
  const mw = rateLimit(options)
  assert.equal(typeof mw, 'function')
  assert.equal(typeof rateLimit({ limit: 10, windowMs: 1000, keyGenerator: (req) => String(req.headers['x-api-key']) }), 'function')
  assert.equal(typeof ratomicFastify, 'function')
  // A Redis limiter fits `limiter` too (types only here; middleware-redis.test.js runs them).
  const onRedis = (limiter: RedisTokenBucket | RedisLimiter): RateLimitOptions => ({ limiter, passOnStoreError: true })
  assert.equal(typeof onRedis, 'function')
  // What a client is not told goes to onLimiterError, with a code and the status sent.
  const seen: string[] = []
  const logged: RateLimitOptions = { onLimiterError: (e, req) => seen.push(`${e.code} ${e.status} ${req.url}`) }
  assert.equal(typeof rateLimit(logged), 'function')
  // @ts-expect-error onLimiterError is a function
  assert.throws(() => rateLimit({ onLimiterError: 'console' }), TypeError)
  assert.equal(typeof rateLimit({ standardHeaders: 'draft-7' }), 'function')
  // A Stack: one key for every member, or one per member.
  const stack = new Stack({ ip: new TokenBucket('5/s'), global: new TokenBucket('100/s') })
  const perMember: RateLimitOptions = { limiter: stack, keyGenerator: (req) => [ipKeyGenerator(String(req.socket.remoteAddress)), 'all'] }
  const whole: string = ratomicFastify.ipKeyGenerator('2001:db8::1', false)
  assert.equal(whole, '2001:db8:0:0:0:0:0:1')
  assert.equal(typeof rateLimit(perMember), 'function')
  assert.equal(typeof rateLimit({ limiter: stack, keyGenerator: async () => Buffer.from('k') }), 'function')
  // A DirectTokenBucket: no key; as a Stack member, it ignores its key.
  assert.equal(typeof rateLimit({ limiter: new DirectTokenBucket('1000/s'), name: 'global' }), 'function')
  const withGlobal = new Stack({ ip: new TokenBucket('5/s'), global: new DirectTokenBucket('100/s') })
  assert.equal(typeof rateLimit({ limiter: withGlobal }), 'function')
  // @ts-expect-error keys are strings or bytes
  assert.equal(typeof rateLimit({ limiter: stack, keyGenerator: () => [1, 2] }), 'function')
  // @ts-expect-error standardHeaders takes true, false or a draft's name
  assert.throws(() => rateLimit({ standardHeaders: 'draft-5' }), TypeError)
})
