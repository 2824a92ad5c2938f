'use strict'
// ratomic/express takes express-rate-limit 8's options with their meaning
// (issue 38): each over a real socket (Express on 127.0.0.1 port 0, fetch),
// asserting the status and header fields of a sequence of requests. Where
// ratomic differs on purpose (headers by default, a problem document for a
// denial, a denial not counted), the test says so.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const express = require('express')
const rateLimit = require('ratomic/express')
const { TokenBucket, FixedWindow, ManualClock, PROBLEM_CONTENT_TYPE } = require('ratomic')

// An Express app limited by `middleware`, whose routes answer as their path says:
// /ok 200, /fail 500, /decision the decision left on the request.
async function serve(middleware, setup = () => {}) {
  const app = express()
  setup(app)
  app.use(middleware)
  app.get('/fail', (req, res) => res.status(500).send('failed'))
  app.get('/decision', (req, res) => res.json(req.rateLimit === undefined ? null : req.rateLimit))
  // How an express-rate-limit user reads the reset: a Date, the same one on each read.
  app.get('/reset', (req, res) => {
    const t = req.rateLimit.resetTime
    res.json({ isDate: t instanceof Date, same: t === req.rateLimit.resetTime, ms: t.getTime(), json: JSON.parse(JSON.stringify(req.rateLimit)).resetTime })
  })
  app.use((req, res) => res.send('ok'))
  const server = http.createServer(app)
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}`
  return { url, get: (path = '/ok', headers = {}) => fetch(url + path, { headers }), close: () => new Promise((resolve) => server.close(resolve)) }
}

async function statuses(get, n, ...args) {
  const out = []
  for (let i = 0; i < n; i++) out.push((await get(...args)).status)
  return out
}

test("require('ratomic/express') is the middleware factory itself, as express-rate-limit's is", async () => {
  assert.equal(typeof rateLimit, 'function')
  assert.equal(rateLimit.rateLimit, rateLimit)
  assert.equal(rateLimit.default, rateLimit)
  assert.equal(typeof rateLimit.ipKeyGenerator, 'function')
  // ES modules: the default export and the named ones.
  const esm = await import('ratomic/express')
  assert.equal(esm.default, rateLimit)
  assert.equal(esm.rateLimit, rateLimit)
  assert.equal(esm.ipKeyGenerator, rateLimit.ipKeyGenerator)
  // express-rate-limit's README, with only the require changed.
  const s = await serve(rateLimit({ windowMs: 15 * 60 * 1000, limit: 2, standardHeaders: 'draft-8', legacyHeaders: false }))
  try {
    assert.deepEqual(await statuses(s.get, 3), [200, 200, 429])
  } finally {
    await s.close()
  }
})

test('limit, or max, is a number or a function of the request (sync or async): a limit per plan', async () => {
  const plan = (req) => (req.headers['x-plan'] === 'pro' ? 3 : 1)
  for (const options of [{ limit: plan }, { max: plan }, { limit: async (req) => plan(req) }]) {
    const s = await serve(rateLimit({ ...options, keyGenerator: (req) => req.headers['x-user'] }))
    try {
      const free = await statuses(s.get, 3, '/ok', { 'x-user': 'ann' })
      const pro = await statuses(s.get, 4, '/ok', { 'x-user': 'bob', 'x-plan': 'pro' })
      assert.deepEqual(free, [200, 429, 429], JSON.stringify(options))
      assert.deepEqual(pro, [200, 200, 200, 429])
      const r = await s.get('/ok', { 'x-user': 'cy', 'x-plan': 'pro' })
      assert.equal(r.headers.get('ratelimit-policy'), '"default";q=3;w=60')
    } finally {
      await s.close()
    }
  }
  assert.throws(() => rateLimit({ limit: 3, max: 3 }), { name: 'TypeError', message: /limit or max/ })
  assert.throws(() => rateLimit({ limit: [3] }), TypeError)
})

test("standardHeaders: true is draft 6 (express-rate-limit's true), 'draft-8' is named by identifier, false leaves Retry-After; legacyHeaders", async () => {
  const clock = new ManualClock()
  const six = await serve(rateLimit({ limiter: new FixedWindow(2, 60_000, { clock }), standardHeaders: true }))
  const eight = await serve(rateLimit({ limiter: new FixedWindow(2, 60_000, { clock }), standardHeaders: 'draft-8', identifier: '2-in-1min' }))
  const none = await serve(rateLimit({ limiter: new FixedWindow(1, 60_000, { clock }), standardHeaders: false }))
  try {
    const r = await six.get()
    assert.deepEqual(
      ['ratelimit-policy', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset', 'ratelimit'].map((h) => r.headers.get(h)),
      ['2;w=60', '2', '1', '60', null]
    )
    const e = await eight.get()
    assert.deepEqual([e.headers.get('ratelimit-policy'), e.headers.get('ratelimit')], ['"2-in-1min";q=2;w=60', '"2-in-1min";r=1;t=60'])
    const first = await none.get()
    assert.deepEqual([first.status, first.headers.get('ratelimit'), first.headers.get('ratelimit-policy')], [200, null, null])
    const denied = await none.get()
    assert.deepEqual([denied.status, denied.headers.get('retry-after'), denied.headers.get('ratelimit')], [429, '60', null])
  } finally {
    await Promise.all([six.close(), eight.close(), none.close()])
  }
  assert.throws(() => rateLimit({ standardHeaders: 'draft-9' }), { name: 'TypeError', message: /draft-6/ })
  // legacyHeaders: off by default (express-rate-limit 8 sends them), X-RateLimit-* when on.
  const off = await serve(rateLimit({ limiter: new TokenBucket('3/min', { clock }), standardHeaders: true }))
  const on = await serve(rateLimit({ limiter: new TokenBucket('3/min', { clock }), standardHeaders: true, legacyHeaders: true }))
  try {
    const a = await off.get()
    assert.deepEqual([a.headers.get('x-ratelimit-limit'), a.headers.get('ratelimit-remaining')], [null, '2'])
    const b = await on.get()
    // X-RateLimit-Reset is seconds until full (ratomic reads a monotonic clock), not a Unix time.
    assert.deepEqual(['limit', 'remaining', 'reset'].map((f) => b.headers.get(`x-ratelimit-${f}`)), ['3', '2', '20'])
  } finally {
    await Promise.all([off.close(), on.close()])
  }
})

test('identifier names the policy, or a function of the request does', async () => {
  const clock = new ManualClock()
  const s = await serve(rateLimit({ limiter: new TokenBucket('3/min', { clock }), identifier: (req) => `api-${req.headers['x-tier'] || 'free'}` }))
  try {
    assert.equal((await s.get('/ok')).headers.get('ratelimit-policy'), '"api-free";q=3;w=60')
    const r = await s.get('/ok', { 'x-tier': 'gold' })
    assert.equal(r.headers.get('ratelimit'), '"api-gold";r=1;t=40')
  } finally {
    await s.close()
  }
  assert.throws(() => rateLimit({ identifier: 'a', name: 'b' }), TypeError)
  assert.throws(() => rateLimit({ identifier: 'café' }), RangeError)
})

test('skipSuccessfulRequests gives a successful request back; skipFailedRequests a failed one', async () => {
  const clock = new ManualClock()
  const ok = await serve(rateLimit({ limiter: new FixedWindow(2, 60_000, { clock }), skipSuccessfulRequests: true }))
  const failed = await serve(rateLimit({ limiter: new FixedWindow(2, 60_000, { clock }), skipFailedRequests: true }))
  try {
    // Successes are free: only the failures count, two of them.
    assert.deepEqual(await statuses(ok.get, 5, '/ok'), [200, 200, 200, 200, 200])
    assert.deepEqual(await statuses(ok.get, 3, '/fail'), [500, 500, 429])
    // Failures are free: only the successes count.
    assert.deepEqual(await statuses(failed.get, 4, '/fail'), [500, 500, 500, 500])
    assert.deepEqual(await statuses(failed.get, 3, '/ok'), [200, 200, 429])
  } finally {
    await Promise.all([ok.close(), failed.close()])
  }
})

test('requestWasSuccessful decides what a success is', async () => {
  const clock = new ManualClock()
  const s = await serve(
    rateLimit({ limiter: new FixedWindow(1, 60_000, { clock }), skipFailedRequests: true, requestWasSuccessful: (req, res) => res.statusCode < 500 && req.query.bad !== '1' })
  )
  try {
    assert.deepEqual(await statuses(s.get, 3, '/ok?bad=1'), [200, 200, 200], 'counted as failed: given back')
    assert.deepEqual(await statuses(s.get, 2, '/ok'), [200, 429])
  } finally {
    await s.close()
  }
})

test('skip (sync or async), keyGenerator (sync or async), handler with the options in force, message, statusCode, requestPropertyName', async () => {
  for (const skip of [(req) => req.headers['x-vip'] === '1', async (req) => req.headers['x-vip'] === '1']) {
    const s = await serve(rateLimit({ limit: 1, skip, identifier: 'one' }))
    try {
      assert.match((await s.get()).headers.get('ratelimit'), /^"one";r=0;t=\d+$/)
      const vip = await s.get('/decision', { 'x-vip': '1' })
      assert.deepEqual([vip.status, vip.headers.get('ratelimit'), await vip.json()], [200, null, null], 'skipped: not counted, no fields, no decision')
      assert.equal((await s.get()).status, 429)
    } finally {
      await s.close()
    }
  }
  const seen = []
  const handler = (req, res, next, options) => {
    seen.push([options.statusCode, options.message, options.limit, req.limited.remaining])
    res.status(options.statusCode).send(options.message)
  }
  const a = await serve(rateLimit({ limit: 1, keyGenerator: async (req) => req.headers['x-key'], handler, statusCode: 503, requestPropertyName: 'limited' }))
  const b = await serve(rateLimit({ limit: 1, message: async (req) => ({ error: `slow down, ${req.headers['x-who']}` }) }))
  const c = await serve(rateLimit({ limit: 1, message: 'Too many', statusCode: 418 }))
  try {
    assert.deepEqual(await statuses(a.get, 2, '/ok', { 'x-key': 'k1' }), [200, 503])
    assert.equal((await a.get('/ok', { 'x-key': 'k2' })).status, 200, 'another key')
    assert.deepEqual(seen, [[503, 'Too many requests, please try again later.', 1, 0]])
    await b.get()
    const rb = await b.get('/ok', { 'x-who': 'ann' })
    assert.deepEqual([rb.status, await rb.json()], [429, { error: 'slow down, ann' }])
    await c.get()
    const rc = await c.get()
    assert.deepEqual([rc.status, await rc.text(), rc.headers.get('retry-after') !== null], [418, 'Too many', true])
  } finally {
    await Promise.all([a.close(), b.close(), c.close()])
  }
})

test("req.rateLimit has express-rate-limit's fields: limit, used, remaining, resetTime, key", async () => {
  const clock = new ManualClock()
  const s = await serve(rateLimit({ limiter: new FixedWindow(5, 60_000, { clock }) }))
  try {
    await s.get()
    const before = Date.now()
    const info = await (await s.get('/decision')).json()
    assert.deepEqual({ ...info, resetTime: undefined }, {
      limit: 5, used: 2, remaining: 3, key: '127.0.0.1', allowed: true, retryAfterMs: 0, resetAfterMs: 60_000, resetTime: undefined,
    })
    // The window ends 60 s after the decision, on the wall clock.
    const reset = Date.parse(info.resetTime)
    assert.ok(reset >= before + 60_000 - 1000 && reset <= Date.now() + 60_000, info.resetTime)
    // Read in the handler: a Date (made when first read), and JSON has it as an ISO string.
    const read = await (await s.get('/reset')).json()
    assert.deepEqual([read.isDate, read.same, read.json], [true, true, new Date(read.ms).toISOString()])
    assert.ok(read.ms >= reset && read.ms <= Date.now() + 60_000, read.ms)
  } finally {
    await s.close()
  }
})

test('req.rateLimit: kept per request beside res.locals, assignable, invisible to templates and JSON, on fast and general paths', async () => {
  for (const general of [false, true]) {
    // skip makes the middleware take its general path; the common set-up takes the fast one.
    const limiter = rateLimit({ limit: 5, windowMs: 60_000, ...(general ? { skip: () => false } : {}) })
    const app = express()
    app.use(limiter)
    app.get('/seen', (req, res) => {
      // What a view or a JSON dump of the locals sees: no key of ratomic's.
      res.json({ remaining: req.rateLimit.remaining, localsKeys: Object.keys(res.locals), localsJson: JSON.stringify(res.locals) })
    })
    app.get('/assigned', (req, res, next) => {
      req.rateLimit = { mine: true }
      next()
    }, (req, res) => res.json(req.rateLimit))
    app.get('/spread', (req, res, next) => {
      res.locals = { ...res.locals, user: 'u' }
      next()
    }, (req, res) => res.json({ remaining: req.rateLimit.remaining, user: res.locals.user }))
    // Two requests in flight at once each read their own decision.
    let release
    const gate = new Promise((resolve) => (release = resolve))
    app.get('/slow', async (req, res) => {
      const before = req.rateLimit.remaining
      await gate
      res.json({ before, after: req.rateLimit.remaining })
    })
    const server = http.createServer(app)
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${server.address().port}`
    try {
      assert.deepEqual(await (await fetch(`${url}/seen`)).json(), { remaining: 4, localsKeys: [], localsJson: '{}' })
      assert.deepEqual(await (await fetch(`${url}/assigned`)).json(), { mine: true })
      assert.deepEqual(await (await fetch(`${url}/spread`)).json(), { remaining: 2, user: 'u' })
      const first = fetch(`${url}/slow`)
      const second = fetch(`${url}/slow`)
      // Both decided before either answers (a bound that only a failure reaches).
      const deadline = Date.now() + 30_000
      while ((await limiter.getKey('127.0.0.1')).totalHits < 5) {
        assert.ok(Date.now() < deadline, 'both /slow requests were decided within 30 s')
        await new Promise((resolve) => setImmediate(resolve))
      }
      release()
      const answers = (await Promise.all([first, second].map(async (r) => (await r).json()))).sort((a, b) => a.before - b.before)
      assert.deepEqual(answers, [{ before: 0, after: 0 }, { before: 1, after: 1 }])
    } finally {
      // Held handlers would keep the server from closing.
      release()
      await new Promise((resolve) => server.close(resolve))
    }
  }
})

test('req.rateLimit stays readable after the request leaves a mounted sub-app that limited it; other apps read undefined', async () => {
  const sub = express()
  sub.use(rateLimit({ limit: 5, windowMs: 60_000 }))
  sub.get('/inner', (req, res) => res.json({ where: 'sub', remaining: req.rateLimit.remaining }))
  const parent = express()
  parent.use('/sub', sub)
  // Reached only by what falls through the sub-app (Express has put the parent's prototype back).
  parent.use((req, res) => res.json({ where: 'parent', remaining: req.rateLimit === undefined ? null : req.rateLimit.remaining }))
  // An app in the same process without the middleware.
  const other = express()
  other.use((req, res) => res.json({ where: 'other', seen: req.rateLimit === undefined ? null : req.rateLimit }))
  const servers = [http.createServer(parent), http.createServer(other)]
  await Promise.all(servers.map((s) => new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))))
  const [p, o] = servers.map((s) => `http://127.0.0.1:${s.address().port}`)
  try {
    assert.deepEqual(await (await fetch(`${p}/sub/inner`)).json(), { where: 'sub', remaining: 4 })
    assert.deepEqual(await (await fetch(`${p}/sub/elsewhere`)).json(), { where: 'parent', remaining: 3 })
    assert.deepEqual(await (await fetch(`${p}/top`)).json(), { where: 'parent', remaining: null })
    assert.deepEqual(await (await fetch(o)).json(), { where: 'other', seen: null })
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))))
  }
})

test("req.rateLimit outside Express (a plain http server, an HTTP/2 compatibility server): set on each request itself, Node's prototypes untouched", async () => {
  const http2 = require('node:http2')
  const limiter = rateLimit({ limit: 5, windowMs: 60_000, keyGenerator: (req) => req.socket.remoteAddress })
  const answer = (req, res) => limiter(req, res, () => res.end(JSON.stringify({ own: Object.hasOwn(req, 'rateLimit'), remaining: req.rateLimit.remaining })))
  const plain = http.createServer(answer)
  const h2 = http2.createServer(answer)
  await Promise.all([plain, h2].map((s) => new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))))
  const client = http2.connect(`http://127.0.0.1:${h2.address().port}`)
  const h2get = () =>
    new Promise((resolve, reject) => {
      const r = client.request({ ':path': '/' })
      let body = ''
      r.setEncoding('utf8')
      r.on('data', (c) => (body += c))
      r.on('end', () => resolve(JSON.parse(body)))
      r.on('error', reject)
    })
  try {
    // The first request of each kind walks its prototype chain; the later ones take what was learnt.
    for (const remaining of [4, 3, 2]) {
      assert.deepEqual(await (await fetch(`http://127.0.0.1:${plain.address().port}/`)).json(), { own: true, remaining })
    }
    // The same limiter and key (127.0.0.1): two more allowed, then the limit.
    for (const remaining of [1, 0]) assert.deepEqual(await h2get(), { own: true, remaining })
    for (const o of [http.IncomingMessage.prototype, http2.Http2ServerRequest.prototype]) assert.equal(Object.hasOwn(o, 'rateLimit'), false)
  } finally {
    client.close()
    await Promise.all([plain, h2].map((s) => new Promise((resolve) => s.close(resolve))))
  }
})

test('validate turns off the set-up reports; knownOptions: false lets unknown options pass', async () => {
  const reports = []
  const onLimiterError = (e) => reports.push(e.code)
  const setup = (app) => app.set('trust proxy', true)
  for (const [validate, expected] of [
    [undefined, ['ERR_RATOMIC_PERMISSIVE_TRUST_PROXY']],
    [false, []],
    [{ trustProxy: false }, []],
    [{ default: false, trustProxy: true }, ['ERR_RATOMIC_PERMISSIVE_TRUST_PROXY']],
  ]) {
    reports.length = 0
    const s = await serve(rateLimit({ limit: 5, validate, onLimiterError }), setup)
    try {
      await s.get('/ok', { 'x-forwarded-for': '10.1.1.1' })
      await s.get('/ok', { 'x-forwarded-for': '10.1.1.1' })
      assert.deepEqual(reports, expected, JSON.stringify(validate))
    } finally {
      await s.close()
    }
  }
  assert.throws(() => rateLimit({ validate: { trustProxi: false } }), { name: 'TypeError', message: /trustProxy/ })
  assert.throws(() => rateLimit({ colour: 'red' }), TypeError)
  assert.equal(typeof rateLimit({ colour: 'red', validate: { knownOptions: false } }), 'function')
})

test("a keyGenerator keying by req.ip as is (IPv6's /64 split) is reported once, as express-rate-limit's check does", async () => {
  const reports = []
  const onLimiterError = (e, req) => reports.push([e.code, req.url])
  for (const options of [
    { keyGenerator: (req) => req.ip },
    { keyGenerator: (req) => rateLimit.ipKeyGenerator(req.ip) },
    { keyGenerator: (req) => req.ip, validate: { keyGeneratorIpFallback: false } },
  ]) {
    const s = await serve(rateLimit({ ...options, onLimiterError }))
    try {
      assert.deepEqual(await statuses(s.get, 2, '/ok?n=1'), [200, 200])
    } finally {
      await s.close()
    }
  }
  assert.deepEqual(reports, [['ERR_RATOMIC_KEY_GENERATOR_IP', '/ok?n=1']])
})

test('options ratomic cannot honour are TypeErrors naming what to use', () => {
  for (const [option, alternative] of [
    [{ store: {} }, /limiter/],
    [{ headers: true }, /legacyHeaders/],
    [{ onLimitReached: () => {} }, /handler/],
    [{ draft_polli_ratelimit_headers: true }, /draft-6/],
    [{ retryAfter: 5 }, /handler/],
  ]) {
    assert.throws(() => rateLimit(option), { name: 'TypeError', message: alternative }, JSON.stringify(Object.keys(option)))
  }
})

test('logger gets the reports: a backend failure as error, the rest as warn', async () => {
  const lines = []
  const logger = { warn: (e) => lines.push(['warn', e.code]), error: (e) => lines.push(['error', e.code]) }
  const s = await serve(rateLimit({ limit: 5, keyGenerator: () => 'k'.repeat(5000), logger }))
  try {
    assert.equal((await s.get()).status, 400)
    assert.deepEqual(lines, [['warn', 'ERR_RATOMIC_BAD_REQUEST']])
  } finally {
    await s.close()
  }
  assert.throws(() => rateLimit({ logger: {}, onLimiterError: () => {} }), TypeError)
})

test('resetKey forgets a client; getKey reads its count', async () => {
  const clock = new ManualClock()
  const limiter = rateLimit({ limiter: new FixedWindow(2, 60_000, { clock }) })
  const s = await serve(limiter)
  try {
    assert.deepEqual(await statuses(s.get, 3), [200, 200, 429])
    const got = await limiter.getKey('127.0.0.1')
    assert.equal(got.totalHits, 2)
    assert.ok(got.resetTime instanceof Date)
    limiter.resetKey('127.0.0.1')
    assert.equal(await limiter.getKey('127.0.0.1'), undefined)
    assert.deepEqual(await statuses(s.get, 3), [200, 200, 429])
  } finally {
    await s.close()
  }
})

test('ipv6Subnet groups IPv6 clients (false: the whole address, a function: per request)', async () => {
  const keys = []
  const record = (req, res, next) => {
    keys.push(req.rateLimit.key)
    next()
  }
  for (const [ipv6Subnet, key] of [[undefined, '2001:db8:1:2:0:0:0:0/64'], [48, '2001:db8:1:0:0:0:0:0/48'], [false, '2001:db8:1:2:0:0:0:ffff'], [() => 56, '2001:db8:1:0:0:0:0:0/56']]) {
    keys.length = 0
    const s = await serve(record, (app) => {
      app.set('trust proxy', 1)
      app.use(rateLimit({ limit: 5, ipv6Subnet }))
    })
    try {
      await s.get('/ok', { 'x-forwarded-for': '2001:db8:1:2::ffff' })
      assert.deepEqual(keys, [key], String(ipv6Subnet))
    } finally {
      await s.close()
    }
  }
})

test('spoofed Forwarded, X-Real-IP and X-Forwarded-For never change the key when no proxy is trusted', async () => {
  const clock = new ManualClock()
  const reports = []
  const s = await serve(rateLimit({ limiter: new FixedWindow(3, 60_000, { clock }), onLimiterError: (e) => reports.push(e.code) }))
  try {
    const spoofs = [
      { 'x-forwarded-for': '203.0.113.1' },
      { 'x-real-ip': '203.0.113.2' },
      { forwarded: 'for=203.0.113.3' },
      { forwarded: 'for="[2001:db8::3]:4711"', 'x-real-ip': '203.0.113.4', 'x-forwarded-for': '203.0.113.5, 203.0.113.6' },
      { 'x-forwarded-for': '203.0.113.7' },
    ]
    const got = []
    for (const h of spoofs) got.push((await s.get('/ok', h)).status)
    assert.deepEqual(got, [200, 200, 200, 429, 429], 'one client, however it says it is another')
    assert.deepEqual(reports, ['ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR'])
  } finally {
    await s.close()
  }
  // Forwarded alone, which Express does not read, is reported too (express-rate-limit 8's forwardedHeader check).
  reports.length = 0
  const f = await serve(rateLimit({ limit: 1, onLimiterError: (e) => reports.push(e.code) }))
  try {
    assert.deepEqual([(await f.get('/ok', { forwarded: 'for=203.0.113.9' })).status, (await f.get('/ok', { forwarded: 'for=203.0.113.8' })).status], [200, 429])
    assert.deepEqual(reports, ['ERR_RATOMIC_UNTRUSTED_FORWARDED'])
  } finally {
    await f.close()
  }
})
