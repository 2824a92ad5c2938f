'use strict'
// ratomic/express and ratomic/fastify over real sockets: servers on
// 127.0.0.1 port 0, requests with fetch.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const net = require('node:net')
const express = require('express')
const Fastify = require('fastify')
const { rateLimit } = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { TokenBucket, FixedWindow, Limiter, ManualClock, PROBLEM_CONTENT_TYPE } = require('ratomic')
const { clientKey } = require('../http.js')

async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${server.address().port}`
}

// A GET whose header fields go out exactly as `lines`, one field line each
// (fetch would fold repeated names into one line): as a proxy that appends
// its own X-Forwarded-For line sends them. Resolves with the status.
function rawGet(url, lines) {
  const { port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => {
      const head = lines.map(([n, v]) => `${n}: ${v}\r\n`).join('')
      socket.write(`GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n${head}\r\n`)
    })
    let data = ''
    socket.on('data', (chunk) => (data += chunk))
    socket.on('end', () => resolve(Number(data.split(' ')[1])))
    socket.on('error', reject)
  })
}

// What HAProxy's `option forwardfor` passes on: the client's own (forged)
// line, then one of its own with the address it saw.
const forgedThenAppended = (i) => [['X-Forwarded-For', `6.6.${i}.${i}`], ['X-Forwarded-For', '203.0.113.7']]

// Each face behind one trusted proxy, served for real; a url and a close().
const BEHIND_ONE_PROXY = {
  async express(limiter) {
    const app = express()
    app.set('trust proxy', 1)
    app.use(rateLimit({ limiter }))
    app.get('/', (req, res) => res.send('ok'))
    const server = http.createServer(app)
    return { url: await listen(server), close: () => server.close() }
  },
  async fastify(limiter) {
    const app = Fastify({ trustProxy: 1 })
    await app.register(ratomicFastify, { limiter })
    app.get('/', async () => 'ok')
    return { url: await app.listen({ port: 0, host: '127.0.0.1' }), close: () => app.close() }
  },
}

for (const [face, serve] of Object.entries(BEHIND_ONE_PROXY)) {
  test(`${face}: a proxy that appends its own X-Forwarded-For line is the hop trusted; a hop's port is no new client`, async () => {
    for (const hops of [forgedThenAppended, (i) => [['X-Forwarded-For', `203.0.113.7:${40000 + i}`]], (i) => [['X-Forwarded-For', `[2001:db8::7]:${40000 + i}`]]]) {
      const limiter = new TokenBucket('3/min', { clock: new ManualClock() })
      const { url, close } = await serve(limiter)
      try {
        const statuses = []
        for (let i = 0; i < 10; i++) statuses.push(await rawGet(url, hops(i)))
        assert.equal(statuses.filter((s) => s === 200).length, 3, `${JSON.stringify(hops(0))}: ${statuses}`)
      } finally {
        await close()
      }
    }
  })
}

async function checkDenial(r, names, status = 429) {
  assert.equal(r.status, status)
  assert.ok(Number(r.headers.get('retry-after')) >= 1)
  assert.ok(r.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
  const body = await r.json()
  assert.deepEqual(body['violated-policies'], names)
}

test('express: allowed responses carry the standard fields; the n+1th is a 429 problem', async () => {
  const app = express()
  app.use(rateLimit({ limiter: new TokenBucket('3/min', { clock: new ManualClock() }), name: 'per-ip' }))
  app.get('/', (req, res) => res.send(`left ${req.rateLimit.remaining}`))
  const server = http.createServer(app)
  const url = await listen(server)
  try {
    for (const left of [2, 1, 0]) {
      const r = await fetch(url)
      assert.equal(r.status, 200)
      assert.equal(await r.text(), `left ${left}`)
      assert.equal(r.headers.get('ratelimit-policy'), '"per-ip";q=3;w=60')
      assert.ok(r.headers.get('ratelimit').startsWith(`"per-ip";r=${left};t=`))
    }
    await checkDenial(await fetch(url), ['per-ip'])
  } finally {
    server.close()
  }
})

test('express: limit/windowMs as in express-rate-limit, X-Forwarded-For only with trust proxy', async () => {
  const open = express()
  open.use(rateLimit({ limit: 1, windowMs: 60_000, legacyHeaders: true }))
  open.get('/', (req, res) => res.send('ok'))
  const trusting = express()
  trusting.set('trust proxy', 1)
  trusting.use(rateLimit({ limit: 1, windowMs: 60_000 }))
  trusting.get('/', (req, res) => res.send('ok'))
  const [a, b] = [http.createServer(open), http.createServer(trusting)]
  const [ua, ub] = [await listen(a), await listen(b)]
  try {
    const first = await fetch(ua, { headers: { 'X-Forwarded-For': '1.1.1.1' } })
    assert.equal(first.status, 200)
    assert.equal(first.headers.get('x-ratelimit-limit'), '1')
    assert.equal((await fetch(ua, { headers: { 'X-Forwarded-For': '2.2.2.2' } })).status, 429, 'a forged header is no new client')
    assert.equal((await fetch(ub, { headers: { 'X-Forwarded-For': '1.1.1.1' } })).status, 200)
    assert.equal((await fetch(ub, { headers: { 'X-Forwarded-For': '2.2.2.2' } })).status, 200, 'behind a trusted proxy: two clients')
    assert.equal((await fetch(ub, { headers: { 'X-Forwarded-For': '1.1.1.1' } })).status, 429)
  } finally {
    a.close()
    b.close()
  }
})

// The default key is req.ip as the app defines it: Express's own getter is
// read directly when a request has no X-Forwarded-For (the socket's address,
// whatever trust proxy says), but an app's own `ip` (on app.request, or set
// on the request by an earlier middleware) is honoured as it was read before.
test("express: an app's own req.ip keys the client, on app.request or on the request", async () => {
  const byHeader = express()
  Object.defineProperty(byHeader.request, 'ip', { configurable: true, get() { return this.get('x-client') || this.socket.remoteAddress } })
  byHeader.use(rateLimit({ limit: 1, windowMs: 60_000 }))
  byHeader.get('/', (req, res) => res.send(req.rateLimit.key))
  const perRequest = express()
  perRequest.use((req, res, next) => {
    Object.defineProperty(req, 'ip', { value: req.get('x-client') })
    next()
  })
  perRequest.use(rateLimit({ limit: 1, windowMs: 60_000 }))
  perRequest.get('/', (req, res) => res.send(req.rateLimit.key))
  const plain = express()
  plain.use(rateLimit({ limit: 1, windowMs: 60_000 }))
  plain.get('/', (req, res) => res.send(req.rateLimit.key))
  const servers = [byHeader, perRequest, plain].map((a) => http.createServer(a))
  const [u1, u2, u3] = await Promise.all(servers.map(listen))
  try {
    for (const url of [u1, u2]) {
      const a = await fetch(url, { headers: { 'X-Client': '198.51.100.1' } })
      assert.equal(a.status, 200)
      assert.equal(await a.text(), '198.51.100.1')
      const b = await fetch(url, { headers: { 'X-Client': '198.51.100.2' } })
      assert.equal(b.status, 200, 'another client by the app\'s own ip')
      assert.equal(await b.text(), '198.51.100.2')
      assert.equal((await fetch(url, { headers: { 'X-Client': '198.51.100.1' } })).status, 429)
    }
    // Express's own ip, no proxy trusted: the socket's address, a header no new client.
    const first = await fetch(u3, { headers: { 'X-Client': '198.51.100.1' } })
    assert.equal(await first.text(), '127.0.0.1')
    assert.equal((await fetch(u3, { headers: { 'X-Client': '198.51.100.2' } })).status, 429)
  } finally {
    for (const s of servers) s.close()
  }
})

test('express: a multi-limit limiter lists every policy; handler, message, skip, errors', async () => {
  const clock = new ManualClock()
  const app = express()
  app.use('/multi', rateLimit({ limiter: new Limiter({ burst: '1/s', daily: { algorithm: 'fixedWindow', rate: '100/day' } }, { clock }) }))
  app.use('/custom', rateLimit({ limit: 1, statusCode: 503, message: { error: 'slow down' }, skip: (req) => req.query.vip === '1' }))
  app.use('/handled', rateLimit({ limit: 1, handler: (req, res) => res.status(429).send('handled') }))
  app.use('/broken', rateLimit({ limit: 1, keyGenerator: () => 'k'.repeat(5000), onLimiterError: () => {} }))
  app.use((req, res) => res.send('ok'))
  const server = http.createServer(app)
  const url = await listen(server)
  try {
    const r = await fetch(`${url}/multi`)
    assert.equal(r.headers.get('ratelimit-policy'), '"burst";q=1;w=1, "daily";q=100;w=86400')
    await checkDenial(await fetch(`${url}/multi`), ['burst'])
    await fetch(`${url}/custom`)
    assert.equal((await fetch(`${url}/custom?vip=1`)).status, 200, 'skipped')
    const custom = await fetch(`${url}/custom`)
    assert.deepEqual([custom.status, await custom.json()], [503, { error: 'slow down' }])
    await fetch(`${url}/handled`)
    assert.equal(await (await fetch(`${url}/handled`)).text(), 'handled')
    const broken = await fetch(`${url}/broken`)
    assert.equal(broken.status, 400, 'a key the limiter refuses is refused, not a 500')
  } finally {
    server.close()
  }
})

test('fastify: the plugin limits the routes of its scope', async () => {
  const app = Fastify()
  await app.register(ratomicFastify, { limiter: new TokenBucket('2/min', { clock: new ManualClock() }), name: 'api' })
  app.get('/', async (request) => ({ left: request.rateLimit.remaining }))
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    const r = await fetch(url)
    assert.deepEqual(await r.json(), { left: 1 })
    assert.equal(r.headers.get('ratelimit-policy'), '"api";q=2;w=60')
    await fetch(url)
    await checkDenial(await fetch(url), ['api'])
  } finally {
    await app.close()
  }
})

// The common set-up reads a TokenBucket's, FixedWindow's or SlidingWindow's
// numbers straight into request.rateLimit; a subclass with an allow of its
// own is still asked through it.
test("fastify: a limiter subclass's own allow is the one asked", async () => {
  const seen = []
  class Logged extends FixedWindow {
    allow(key, cost) {
      seen.push(key)
      return super.allow(key, cost)
    }
  }
  const app = Fastify()
  await app.register(ratomicFastify, { limiter: new Logged(2, 60_000, { clock: new ManualClock() }) })
  app.get('/', async (request) => ({ left: request.rateLimit.remaining, limit: request.rateLimit.limit, used: request.rateLimit.used }))
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  try {
    const r = await fetch(url)
    assert.deepEqual(await r.json(), { left: 1, limit: 2, used: 1 })
    assert.equal(r.headers.get('ratelimit-remaining'), null) // draft 11's fields: RateLimit-Policy and RateLimit
    assert.ok(r.headers.get('ratelimit').includes('r=1'))
    await fetch(url)
    assert.equal((await fetch(url)).status, 429)
    assert.deepEqual(seen, ['127.0.0.1', '127.0.0.1', '127.0.0.1'])
  } finally {
    await app.close()
  }
})

test('client keys: IPv6 grouped, IPv4-mapped unwrapped', () => {
  assert.equal(clientKey('10.0.0.1', 64), '10.0.0.1')
  assert.equal(clientKey('::ffff:10.0.0.1', 64), '10.0.0.1')
  assert.equal(clientKey('2001:db8:1:2:3:4:5:6', 64), '2001:db8:1:2:0:0:0:0/64')
  assert.equal(clientKey('2001:db8:1:2::ffff', 64), '2001:db8:1:2:0:0:0:0/64')
  assert.equal(clientKey('2001:db8:1:2::ffff', 56), '2001:db8:1:0:0:0:0:0/56')
  assert.equal(clientKey('2001:db8::1', 128), '2001:db8:0:0:0:0:0:1/128')
  // A port after the address (as proxies may write it) is not part of the client.
  assert.equal(clientKey('10.0.0.1:443', 64), '10.0.0.1')
  assert.equal(clientKey('[2001:db8:1:2::ffff]:443', 64), '2001:db8:1:2:0:0:0:0/64')
  assert.equal(clientKey('[2001:db8:1:2::ffff]', 64), '2001:db8:1:2:0:0:0:0/64')
  assert.equal(clientKey('[::ffff:10.0.0.1]:443', 64), '10.0.0.1')
  assert.equal(clientKey(undefined, 64), undefined)
  // The same keys, exported for key generators that combine them with others.
  const { ipKeyGenerator } = require('ratomic/express')
  assert.equal(ratomicFastify.ipKeyGenerator, ipKeyGenerator)
  assert.equal(ipKeyGenerator('2001:db8:1:2::ffff'), '2001:db8:1:2:0:0:0:0/64')
  assert.equal(ipKeyGenerator('2001:db8:1:2::ffff', 48), '2001:db8:1:0:0:0:0:0/48')
  assert.equal(ipKeyGenerator('2001:db8::1', false), '2001:db8:0:0:0:0:0:1')
  assert.equal(ipKeyGenerator('::ffff:10.0.0.1'), '10.0.0.1')
  assert.throws(() => ipKeyGenerator('2001:db8::1', 0), TypeError)
  assert.throws(() => ipKeyGenerator(undefined), TypeError)
})

test("express: standardHeaders in express-rate-limit's earlier drafts", async () => {
  const app = express()
  const clock = new ManualClock()
  for (const draft of ['draft-6', 'draft-7', 'draft-8']) {
    app.use(`/${draft}`, rateLimit({ limiter: new TokenBucket('2/min', { clock }), standardHeaders: draft, legacyHeaders: true }))
  }
  app.use((req, res) => res.send('ok'))
  const server = http.createServer(app)
  const url = await listen(server)
  try {
    const six = await fetch(`${url}/draft-6`)
    assert.equal(six.headers.get('ratelimit-policy'), '2;w=60')
    assert.deepEqual(['limit', 'remaining', 'reset'].map((f) => six.headers.get(`ratelimit-${f}`)), ['2', '1', '30'])
    assert.equal(six.headers.get('ratelimit'), null)
    assert.equal(six.headers.get('x-ratelimit-remaining'), '1')
    const seven = await fetch(`${url}/draft-7`)
    assert.equal(seven.headers.get('ratelimit-policy'), '2;w=60')
    assert.equal(seven.headers.get('ratelimit'), 'limit=2, remaining=1, reset=30')
    await fetch(`${url}/draft-7`)
    const denied = await fetch(`${url}/draft-7`)
    assert.equal(denied.status, 429)
    assert.equal(denied.headers.get('ratelimit'), 'limit=2, remaining=0, reset=60')
    assert.equal(denied.headers.get('retry-after'), '30')
    const eight = await fetch(`${url}/draft-8`)
    assert.equal(eight.headers.get('ratelimit-policy'), '"default";q=2;w=60', "draft 8's fields are draft 11's")
  } finally {
    server.close()
  }
})

test('express: limit as a rate string names its own window', async () => {
  const app = express()
  app.use(rateLimit({ limit: '2 per 15 minutes' }))
  app.get('/', (req, res) => res.send('ok'))
  const server = http.createServer(app)
  const url = await listen(server)
  try {
    const first = await fetch(url)
    assert.equal(first.status, 200)
    assert.equal(first.headers.get('ratelimit-policy'), '"default";q=2;w=900')
    assert.equal((await fetch(url)).status, 200)
    assert.equal((await fetch(url)).status, 429)
  } finally {
    server.close()
  }
  assert.throws(() => rateLimit({ limit: '10/second', windowMs: 1000 }), { name: 'TypeError', message: /names its window/ })
  assert.throws(() => rateLimit({ limit: '10 per fortnight' }), RangeError)
})

test('bad options throw at set-up', () => {
  assert.throws(() => rateLimit({ colour: 'red' }), TypeError)
  assert.throws(() => rateLimit({ standardHeaders: 'draft-5' }), TypeError)
  assert.throws(() => rateLimit({ ipv6Subnet: 0 }), TypeError)
  assert.throws(() => rateLimit({ limiter: {} }), TypeError)
  assert.throws(() => rateLimit({ limiter: new TokenBucket('1/s'), limit: 3 }), TypeError)
  assert.throws(() => rateLimit({ name: 'café' }), RangeError)
  // A limit no header can name: refused at set-up, not a 500 on every request.
  assert.throws(() => rateLimit({ limiter: new Limiter({ burst: '5/s', 'café': '100/d' }) }), /café/)
  assert.throws(() => rateLimit({ limit: 0 }), RangeError)
})
