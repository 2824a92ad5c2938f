'use strict'
// ratomic/fastify takes @fastify/rate-limit's options with their meaning
// (issue 38): each over a real socket (Fastify on 127.0.0.1 port 0, fetch),
// asserting the status and header fields of a sequence of requests.
const test = require('node:test')
const assert = require('node:assert/strict')
const Fastify = require('fastify')
const { Redis } = require('ioredis')
const ratomicFastify = require('ratomic/fastify')
const { FixedWindow, TokenBucket, ManualClock, PROBLEM_CONTENT_TYPE } = require('ratomic')
const { RedisTokenBucket } = require('ratomic/redis')

// A Fastify app with the plugin registered with `options`, then `routes(app)`.
async function serve(options, routes = (app) => app.get('/', async () => 'ok'), setup = async () => {}) {
  const app = Fastify()
  await setup(app)
  await app.register(ratomicFastify, options)
  routes(app)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, get: (path = '/', headers = {}) => fetch(url + path, { headers }), close: () => app.close() }
}

async function statuses(get, n, ...args) {
  const out = []
  for (let i = 0; i < n; i++) out.push((await get(...args)).status)
  return out
}

test("@fastify/rate-limit's max and timeWindow (a number or a duration like '1 minute'); the plugin's names", async () => {
  assert.equal(ratomicFastify.default, ratomicFastify)
  assert.equal(ratomicFastify.fastifyRateLimit, ratomicFastify)
  const esm = await import('ratomic/fastify')
  assert.equal(esm.default, ratomicFastify)
  for (const timeWindow of [60_000, '1 minute', '1m']) {
    const s = await serve({ max: 2, timeWindow })
    try {
      const r = await s.get()
      assert.equal(r.headers.get('ratelimit-policy'), '"default";q=2;w=60')
      assert.deepEqual(await statuses(s.get, 2), [200, 429])
    } finally {
      await s.close()
    }
  }
  await assert.rejects(ratomicFastify(Fastify(), { timeWindow: 'a fortnight' }), { name: 'TypeError', message: /duration/ })
})

test('a route\'s config.rateLimit: its own limit (or false); global: false limits only the routes that ask', async () => {
  const routes = (app) => {
    app.get('/a', { config: { rateLimit: { max: 1, timeWindow: '1 minute' } } }, async () => 'a')
    app.get('/b', async () => 'b')
    app.get('/c', { config: { rateLimit: false } }, async () => 'c')
  }
  const s = await serve({ max: 2, timeWindow: 60_000 }, routes)
  try {
    assert.deepEqual(await statuses(s.get, 2, '/a'), [200, 429], 'the route\'s own max')
    assert.deepEqual(await statuses(s.get, 3, '/b'), [200, 200, 429], 'the plugin\'s max, its own count')
    const c = await s.get('/c')
    assert.deepEqual([c.status, c.headers.get('ratelimit')], [200, null])
    assert.deepEqual(await statuses(s.get, 3, '/c'), [200, 200, 200])
  } finally {
    await s.close()
  }
  const local = await serve({ global: false, max: 1 }, routes)
  try {
    assert.deepEqual(await statuses(local.get, 3, '/b'), [200, 200, 200], 'no config: not limited')
    assert.deepEqual(await statuses(local.get, 2, '/a'), [200, 429])
  } finally {
    await local.close()
  }
})

test('groupId: routes of one group share a limit', async () => {
  const rl = { max: 2, timeWindow: '1 minute', groupId: 'reports' }
  const s = await serve({ global: false }, (app) => {
    app.get('/x', { config: { rateLimit: rl } }, async () => 'x')
    app.get('/y', { config: { rateLimit: rl } }, async () => 'y')
    app.get('/z', { config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, async () => 'z')
  })
  try {
    assert.deepEqual([...(await statuses(s.get, 1, '/x')), ...(await statuses(s.get, 2, '/y'))], [200, 200, 429])
    assert.deepEqual(await statuses(s.get, 2, '/z'), [200, 200], 'another route: its own count')
  } finally {
    await s.close()
  }
})

test('allowList (keys or a function of the request and key), keyGenerator (sync or async), onExceeding and onExceeded', async () => {
  const calls = []
  const s = await serve({
    max: 1,
    keyGenerator: async (request) => request.headers['x-api-key'],
    allowList: (request, key) => key === 'internal' || request.headers['x-trusted'] === 'yes',
    onExceeding: (request, key) => calls.push(['exceeding', key]),
    onExceeded: (request, key) => calls.push(['exceeded', key]),
  })
  const list = await serve({ max: 1, allowList: ['127.0.0.1'] })
  try {
    assert.deepEqual(await statuses(s.get, 3, '/', { 'x-api-key': 'internal' }), [200, 200, 200])
    assert.deepEqual(await statuses(s.get, 2, '/', { 'x-api-key': 'k1' }), [200, 429])
    assert.deepEqual(await statuses(s.get, 1, '/', { 'x-api-key': 'k1', 'x-trusted': 'yes' }), [200])
    assert.deepEqual(calls, [['exceeding', 'k1'], ['exceeded', 'k1']])
    const r = await list.get()
    assert.deepEqual([r.status, r.headers.get('ratelimit')], [200, null], 'allowed by its address: no fields')
    assert.deepEqual(await statuses(list.get, 3), [200, 200, 200])
  } finally {
    await Promise.all([s.close(), list.close()])
  }
})

test('errorResponseBuilder: its object is the error Fastify answers with (through setErrorHandler)', async () => {
  const contexts = []
  const clock = new ManualClock()
  const s = await serve(
    {
      limiter: new FixedWindow(1, 60_000, { clock }),
      errorResponseBuilder: (request, context) => {
        contexts.push(context)
        return { statusCode: 429, error: 'Too Many Requests', message: `only ${context.max} per minute; retry in ${context.after}` }
      },
    },
    (app) => app.get('/', async () => 'ok'),
    async (app) => app.setErrorHandler((error, request, reply) => reply.code(error.statusCode).send({ handled: error.message }))
  )
  try {
    await s.get()
    const r = await s.get()
    assert.deepEqual([r.status, await r.json()], [429, { handled: 'only 1 per minute; retry in 1 minute' }])
    assert.equal(r.headers.get('retry-after'), '60')
    assert.deepEqual(contexts, [{ statusCode: 429, ban: false, max: 1, ttl: 60_000, after: '1 minute' }])
  } finally {
    await s.close()
  }
})

test('enableDraftSpec writes the draft fields @fastify/rate-limit writes; addHeadersOnExceeding and addHeaders leave fields out', async () => {
  const clock = new ManualClock()
  const draft = await serve({ limiter: new TokenBucket('2/min', { clock }), enableDraftSpec: true })
  const some = await serve({
    limiter: new TokenBucket('1/min', { clock }),
    legacyHeaders: true,
    standardHeaders: false,
    addHeadersOnExceeding: { 'x-ratelimit-reset': false },
    addHeaders: { 'retry-after': false, 'x-ratelimit-limit': false },
  })
  try {
    const r = await draft.get()
    assert.deepEqual(
      ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset', 'ratelimit-policy', 'ratelimit'].map((h) => r.headers.get(h)),
      ['2', '1', '30', null, null]
    )
    const ok = await some.get()
    assert.deepEqual(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'].map((h) => ok.headers.get(h)), ['1', '0', null])
    const no = await some.get()
    assert.deepEqual([no.status, ...['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after'].map((h) => no.headers.get(h))], [429, null, '0', '60', null])
  } finally {
    await Promise.all([draft.close(), some.close()])
  }
})

test("hook: 'preHandler' limits after the app's own onRequest hooks (a key from authentication)", async () => {
  const s = await serve(
    { hook: 'preHandler', max: 1, keyGenerator: (request) => request.user },
    (app) => {
      app.addHook('onRequest', async (request) => {
        request.user = request.headers['x-user']
      })
      app.get('/', async () => 'ok')
    },
    async (app) => app.decorateRequest('user', null)
  )
  try {
    assert.deepEqual(await statuses(s.get, 2, '/', { 'x-user': 'ann' }), [200, 429])
    assert.deepEqual(await statuses(s.get, 1, '/', { 'x-user': 'bob' }), [200])
  } finally {
    await s.close()
  }
})

test('max and timeWindow as functions of the request and its key (sync or async)', async () => {
  const s = await serve({
    keyGenerator: (request) => request.headers['x-key'],
    max: async (request, key) => (key === 'pro' ? 3 : 1),
    timeWindow: (request, key) => (key === 'pro' ? '1 hour' : 60_000),
  })
  try {
    assert.deepEqual(await statuses(s.get, 2, '/', { 'x-key': 'free' }), [200, 429])
    const pro = await s.get('/', { 'x-key': 'pro' })
    assert.equal(pro.headers.get('ratelimit-policy'), '"default";q=3;w=3600')
    assert.deepEqual(await statuses(s.get, 3, '/', { 'x-key': 'pro' }), [200, 200, 429])
  } finally {
    await s.close()
  }
})

test('skipOnError lets requests through when the backend fails (passOnStoreError by its @fastify/rate-limit name)', async () => {
  const client = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  const limiter = new RedisTokenBucket('5/min', { client, onError: 'raise', breakerThreshold: 1000 })
  const quiet = () => {}
  const open = await serve({ limiter, skipOnError: true, onLimiterError: quiet })
  const closed = await serve({ limiter, onLimiterError: quiet })
  try {
    assert.deepEqual(await statuses(open.get, 2), [200, 200])
    const r = await closed.get()
    assert.deepEqual([r.status, r.headers.get('retry-after')], [503, '1'])
  } finally {
    await Promise.all([open.close(), closed.close()])
    client.disconnect()
  }
})

test('fastify.rateLimit() is a hook of your own; createRateLimit() asks without answering', async () => {
  const s = await serve({ global: false, max: 1 }, (app) => {
    app.get('/own', { onRequest: app.rateLimit({ max: 2, timeWindow: '1 minute' }) }, async () => 'own')
    const check = app.createRateLimit({ max: 1, timeWindow: 60_000, keyGenerator: (request) => request.query.user })
    app.get('/check', async (request) => check(request, { increment: request.query.peek !== '1' }))
  })
  try {
    assert.deepEqual(await statuses(s.get, 3, '/own'), [200, 200, 429])
    const peek = await (await s.get('/check?user=ann&peek=1')).json()
    assert.deepEqual([peek.isAllowed, peek.isExceeded, peek.remaining, peek.max, peek.key], [false, false, 1, 1, 'ann'])
    await s.get('/check?user=ann')
    const over = await (await s.get('/check?user=ann')).json()
    assert.deepEqual([over.isExceeded, over.remaining, over.ttlInSeconds > 0], [true, 0, true])
  } finally {
    await s.close()
  }
})

test('options ratomic cannot honour are TypeErrors naming what to use', async () => {
  for (const [option, alternative] of [
    [{ ban: 2 }, /longer one/],
    [{ continueExceeding: true }, /TokenBucket/],
    [{ exponentialBackoff: true }, /continueExceeding/],
    [{ redis: {} }, /RedisFixedWindow/],
    [{ nameSpace: 'rl-' }, /prefix/],
    [{ store: class {} }, /limiter/],
    [{ onBanReach: () => {} }, /onExceeded/],
  ]) {
    const app = Fastify()
    await assert.rejects(app.register(ratomicFastify, option).ready(), { name: 'TypeError', message: alternative }, Object.keys(option)[0])
    await app.close()
  }
  const app = Fastify()
  await app.register(ratomicFastify, { max: 1 })
  assert.throws(() => app.get('/', { config: { rateLimit: 5 } }, async () => 'ok'), /must be an object of options or false/)
  await app.close()
})

test('spoofed Forwarded, X-Real-IP and X-Forwarded-For never change the key when no proxy is trusted', async () => {
  const clock = new ManualClock()
  const reports = []
  const s = await serve({ limiter: new FixedWindow(3, 60_000, { clock }), onLimiterError: (e) => reports.push(e.code) })
  try {
    const got = []
    for (const h of [{ 'x-forwarded-for': '203.0.113.1' }, { 'x-real-ip': '203.0.113.2' }, { forwarded: 'for=203.0.113.3' }, { 'x-forwarded-for': '203.0.113.4' }]) {
      got.push((await s.get('/', h)).status)
    }
    assert.deepEqual(got, [200, 200, 200, 429])
    assert.deepEqual(reports, ['ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR'])
  } finally {
    await s.close()
  }
  // Forwarded alone is reported too: Fastify reads X-Forwarded-For only.
  reports.length = 0
  const f = await serve({ max: 5, onLimiterError: (e) => reports.push(e.code) })
  try {
    await f.get('/', { forwarded: 'for=203.0.113.9' })
    assert.deepEqual(reports, ['ERR_RATOMIC_UNTRUSTED_FORWARDED'])
  } finally {
    await f.close()
  }
})
