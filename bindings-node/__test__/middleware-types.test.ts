// The middleware typings, checked by tsc and then run.
import test from 'node:test'
import assert from 'node:assert/strict'
import { ipKeyGenerator, rateLimit, RateLimitOptions, RateLimitInfo } from 'ratomic/express'
import rateLimitDefault from 'ratomic/express'
import rateLimitModule = require('ratomic/express')
import ratomicFastify = require('ratomic/fastify')
import type { FastifyRateLimitOptions } from 'ratomic/fastify'
import { DirectTokenBucket, Quotas, Stack, TokenBucket } from 'ratomic'
import { RedisLimiter, RedisTokenBucket } from 'ratomic/redis'
import { PostgresLimiter, PostgresSlidingWindow, PostgresTokenBucket } from 'ratomic/postgres'

test('typings: the middleware factories', () => {
  const options: RateLimitOptions = { limiter: new TokenBucket('5/s'), name: 'api', legacyHeaders: true, ipv6Subnet: 56 }
  const mw = rateLimit(options)
  assert.equal(typeof mw, 'function')
  assert.equal(typeof rateLimit({ limit: 10, windowMs: 1000, keyGenerator: (req) => String(req.headers['x-api-key']) }), 'function')
  assert.equal(typeof ratomicFastify, 'function')
  // A Redis limiter fits `limiter` too (types only here; middleware-redis.test.js runs them).
  const onRedis = (limiter: RedisTokenBucket | RedisLimiter): RateLimitOptions => ({ limiter, passOnStoreError: true })
  assert.equal(typeof onRedis, 'function')
  // A Postgres limiter too, in both frameworks (middleware-postgres.test.js runs them); its source is typed.
  const onPostgres = (limiter: PostgresTokenBucket | PostgresSlidingWindow | PostgresLimiter): RateLimitOptions => ({ limiter, passOnStoreError: true })
  assert.equal(typeof onPostgres, 'function')
  const onPostgresFastify = (limiter: PostgresTokenBucket | PostgresLimiter): FastifyRateLimitOptions => ({ limiter })
  assert.equal(typeof onPostgresFastify, 'function')
  const fromPostgres = (info: RateLimitInfo): boolean => info.source === 'postgres'
  assert.equal(typeof fromPostgres, 'function')
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

test('typings: the module is the function, with express-rate-limit 8\'s options and req.rateLimit', async () => {
  // Every way a user imports it names the same function.
  assert.equal(rateLimitDefault, rateLimit)
  assert.equal(rateLimitModule, rateLimit)
  assert.equal(rateLimitModule.default, rateLimit)
  const mw = rateLimitModule({
    limit: (req) => (req.headers['x-plan'] === 'pro' ? 100 : 10),
    windowMs: 60_000,
    standardHeaders: 'draft-8',
    legacyHeaders: true,
    identifier: (req) => `plan-${req.headers['x-plan']}`,
    skipFailedRequests: true,
    requestWasSuccessful: (req, res) => res.statusCode < 500,
    handler: (req, res, next, options) => res.writeHead(options.statusCode).end(String(options.message)),
    validate: { xForwardedForHeader: false },
    logger: console,
    ipv6Subnet: 56,
  })
  mw.resetKey('10.0.0.1')
  assert.equal(await mw.getKey('10.0.0.1'), undefined)
  const info: RateLimitInfo = { limit: 10, used: 1, remaining: 9, resetTime: new Date(), key: 'k', allowed: true, retryAfterMs: 0, resetAfterMs: 1 }
  assert.equal(info.used, 1)
  const quotas: RateLimitOptions = { limiter: new Quotas(), quota: (req) => (req.headers['x-plan'] === 'pro' ? '100/min' : '10/min') }
  assert.equal(typeof rateLimit(quotas), 'function')
  // @ts-expect-error store is express-rate-limit's: ratomic takes limiter
  assert.throws(() => rateLimit({ store: {} }), TypeError)
  const fastifyOptions: FastifyRateLimitOptions = {
    max: async (request, key) => (key === 'pro' ? 100 : 10),
    timeWindow: '1 minute',
    allowList: ['127.0.0.1'],
    hook: 'preHandler',
    errorResponseBuilder: (request, context) => ({ statusCode: context.statusCode, message: `retry in ${context.after}` }),
    enableDraftSpec: true,
    addHeaders: { 'retry-after': false },
    skipOnError: true,
  }
  assert.equal(typeof fastifyOptions.max, 'function')
  assert.equal(ratomicFastify.default, ratomicFastify)
  // @ts-expect-error ban needs a count of denials, which ratomic does not keep
  const banned: FastifyRateLimitOptions = { ban: 3 }
  assert.equal(banned.max, undefined)
})
