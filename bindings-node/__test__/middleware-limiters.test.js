'use strict'
// Every limiter the Node face has is a limiter: of ratomic/express and of
// ratomic/fastify (issue 38) — in memory (token bucket, fixed and sliding
// windows), a multi-limit Limiter, a Stack, Quotas (the quota per request),
// a DirectTokenBucket, a shared file (one server in this process and one in
// another, on one file) and Redis (every kind, a real redis-server). Each
// over real sockets: the statuses and the RateLimit fields of a sequence.
const test = require('node:test')
const assert = require('node:assert/strict')
const { fork } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const express = require('express')
const Fastify = require('fastify')
const { Redis } = require('ioredis')
const rateLimit = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, Stack, Quotas, DirectTokenBucket, ManualClock } = require('ratomic')
const { RedisTokenBucket, RedisFixedWindow, RedisSlidingWindow, RedisLimiter } = require('ratomic/redis')
const { startRedis, SLOW_MACHINE_MS } = require('./redis-server')

const SERVERS = {
  async express(options) {
    const app = express()
    app.use(rateLimit(options))
    app.get('/', (req, res) => res.json({ used: req.rateLimit.used, key: req.rateLimit.key }))
    const server = http.createServer(app)
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    return { url: `http://127.0.0.1:${server.address().port}/`, close: () => new Promise((resolve) => server.close(resolve)) }
  },
  async fastify(options) {
    const app = Fastify()
    await app.register(ratomicFastify, options)
    app.get('/', async (request) => ({ used: request.rateLimit.used, key: request.rateLimit.key }))
    return { url: `${await app.listen({ port: 0, host: '127.0.0.1' })}/`, close: () => app.close() }
  },
}

// A server of `framework` in a child process, limited by a TokenBucket on `file`.
if (process.env.RATOMIC_MIDDLEWARE_CHILD) {
  const { framework, file } = JSON.parse(process.env.RATOMIC_MIDDLEWARE_CHILD)
  SERVERS[framework]({ limiter: new TokenBucket(4, 1 / 3600, { sharedFile: file }) }).then((s) => process.send(s.url))
} else {
  // `n` requests with `headers`: their statuses and RateLimit values; and
  // what req.rateLimit said of the allowed ones (express-rate-limit's used, key).
  const run = async (url, n, headers = {}, infos = []) => {
    const out = []
    for (let i = 0; i < n; i++) {
      const r = await fetch(url, { headers })
      out.push([r.status, r.headers.get('ratelimit')])
      if (r.status === 200) infos.push(await r.json())
      else await r.text()
    }
    return out
  }

  const clock = new ManualClock()
  const LOCAL = {
    TokenBucket: [() => ({ limiter: new TokenBucket('2/min', { clock }) }), [[200, '"default";r=1;t=30'], [200, '"default";r=0;t=60'], [429, '"default";r=0;t=60']]],
    FixedWindow: [() => ({ limiter: new FixedWindow(2, 60_000, { clock }) }), [[200, '"default";r=1;t=60'], [200, '"default";r=0;t=60'], [429, '"default";r=0;t=60']]],
    // Full again once this window's count has slid out of the next: two windows.
    SlidingWindow: [() => ({ limiter: new SlidingWindow(2, 60_000, { clock }) }), [[200, '"default";r=1;t=120'], [200, '"default";r=0;t=120'], [429, '"default";r=0;t=120']]],
    Limiter: [
      () => ({ limiter: new Limiter({ burst: '2/min', daily: { algorithm: 'fixedWindow', rate: '100/day' } }, { clock }) }),
      [[200, '"burst";r=1;t=30, "daily";r=99;t=86400'], [200, '"burst";r=0;t=60, "daily";r=98;t=86400'], [429, '"burst";r=0;t=60, "daily";r=98;t=86400']],
    ],
    Stack: [
      () => ({ limiter: new Stack({ ip: new TokenBucket('2/min', { clock }), global: new DirectTokenBucket('100/min', { clock }) }) }),
      [[200, '"ip";r=1;t=30, "global";r=99;t=1'], [200, '"ip";r=0;t=60, "global";r=98;t=2'], [429, '"ip";r=0;t=60, "global";r=98;t=2']],
    ],
    'Quotas (the quota per request)': [
      () => ({ limiter: new Quotas({ clock }), quota: (req) => (req.headers['x-plan'] === 'pro' ? '3/min' : '2/min') }),
      [[200, '"default";r=1;t=30'], [200, '"default";r=0;t=60'], [429, '"default";r=0;t=60']],
    ],
    DirectTokenBucket: [() => ({ limiter: new DirectTokenBucket('2/min', { clock }) }), [[200, '"default";r=1;t=30'], [200, '"default";r=0;t=60'], [429, '"default";r=0;t=60']]],
  }

  for (const framework of Object.keys(SERVERS)) {
    for (const [kind, [options, expected]] of Object.entries(LOCAL)) {
      test(`${framework} on a ${kind}`, async () => {
        const s = await SERVERS[framework](options())
        try {
          const infos = []
          assert.deepEqual(await run(s.url, 3, {}, infos), expected)
          // A DirectTokenBucket has no key (nor does the JSON).
          const key = kind === 'DirectTokenBucket' ? {} : { key: '127.0.0.1' }
          assert.deepEqual(infos, [{ used: 1, ...key }, { used: 2, ...key }])
          if (kind.startsWith('Quotas')) {
            // Another plan is another bucket, with its own policy.
            const pro = await fetch(s.url, { headers: { 'x-plan': 'pro' } })
            assert.deepEqual([pro.status, pro.headers.get('ratelimit-policy'), pro.headers.get('ratelimit')], [200, '"default";q=3;w=60', '"default";r=2;t=20'])
          }
        } finally {
          await s.close()
        }
      })
    }
  }

  test('a Quotas limiter takes its quota: a set-up TypeError without one', () => {
    assert.throws(() => rateLimit({ limiter: new Quotas() }), { name: 'TypeError', message: /quota/ })
    assert.throws(() => rateLimit({ limiter: new TokenBucket('1/s'), quota: '1/s' }), TypeError)
  })

  for (const [here, there] of [['express', 'fastify'], ['fastify', 'express']]) {
    test(`a shared file: ${here} in this process and ${there} in another share one limit`, { skip: process.platform !== 'linux' && 'a shared file is Linux only' }, async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-mw-'))
      const file = path.join(dir, 'limits')
      const local = await SERVERS[here]({ limiter: new TokenBucket(4, 1 / 3600, { sharedFile: file }) })
      const child = fork(__filename, [], { env: { ...process.env, RATOMIC_MIDDLEWARE_CHILD: JSON.stringify({ framework: there, file }) }, stdio: 'inherit' })
      try {
        const remote = await new Promise((resolve, reject) => child.once('message', resolve).once('exit', reject))
        const statuses = []
        const used = []
        for (let i = 0; i < 4; i++) {
          for (const url of [local.url, remote]) {
            const r = await fetch(url)
            statuses.push(r.status)
            if (r.status === 200) used.push((await r.json()).used)
          }
        }
        assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429, 429, 429], 'four for the client across both processes')
        assert.deepEqual(used, [1, 2, 3, 4], 'each process sees the other\'s')
        const r = await fetch(remote)
        assert.equal(r.headers.get('ratelimit'), '"default";r=0;t=14400', 'four tokens, one an hour')
      } finally {
        child.kill('SIGKILL')
        await local.close()
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })
  }

  test('Redis: every kind of ratomic/redis limiter, both frameworks', async (t) => {
    const redis = await startRedis()
    const client = new Redis(redis.port, '127.0.0.1', { lazyConnect: true })
    await client.connect()
    let n = 0
    const KINDS = {
      RedisTokenBucket: (prefix) => new RedisTokenBucket('2/min', { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
      RedisFixedWindow: (prefix) => new RedisFixedWindow(2, 3_600_000, { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
      RedisSlidingWindow: (prefix) => new RedisSlidingWindow(2, 3_600_000, { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
      RedisLimiter: (prefix) => new RedisLimiter({ burst: '2/min', daily: '100/day' }, { client, prefix, timeoutMs: SLOW_MACHINE_MS }),
    }
    try {
      for (const framework of Object.keys(SERVERS)) {
        for (const [kind, make] of Object.entries(KINDS)) {
          await t.test(`${framework} on a ${kind}`, async () => {
            const s = await SERVERS[framework]({ limiter: make(`mw${n++}:`) })
            try {
              const infos = []
              const got = await run(s.url, 3, {}, infos)
              assert.deepEqual(got.map(([status]) => status), [200, 200, 429])
              assert.deepEqual(infos, [{ used: 1, key: '127.0.0.1' }, { used: 2, key: '127.0.0.1' }])
              const first = kind === 'RedisLimiter' ? /^"burst";r=1;t=\d+, "daily";r=99;t=\d+$/ : /^"default";r=1;t=\d+$/
              assert.match(got[0][1], first)
              assert.match(got[2][1], kind === 'RedisLimiter' ? /^"burst";r=0;/ : /^"default";r=0;/)
            } finally {
              await s.close()
            }
          })
        }
      }
    } finally {
      client.disconnect()
      await redis.stop()
    }
  })
}
