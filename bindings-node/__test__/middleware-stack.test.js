'use strict'
// A Stack as the limiter of ratomic/express and ratomic/fastify (issue 17),
// and a keyless DirectTokenBucket, alone or as a stack's global member, over
// real sockets: each scenario runs on an Express and a Fastify server on
// 127.0.0.1 port 0, requests with fetch.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const express = require('express')
const Fastify = require('fastify')
const { rateLimit } = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { TokenBucket, FixedWindow, Limiter, Stack, DirectTokenBucket, ManualClock, PROBLEM_CONTENT_TYPE } = require('ratomic')

// A server limited by `options` whose one route answers with the decision
// the middleware left on the request.
const SERVERS = {
  async express(options) {
    const app = express()
    app.use(rateLimit(options))
    app.get('/', (req, res) => res.json({ decision: req.rateLimit === undefined ? null : req.rateLimit }))
    const server = http.createServer(app)
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((resolve) => server.close(resolve)) }
  },
  async fastify(options) {
    const app = Fastify()
    await app.register(ratomicFastify, options)
    app.get('/', async (request) => ({ decision: request.rateLimit === undefined ? null : request.rateLimit }))
    return { url: await app.listen({ port: 0, host: '127.0.0.1' }), close: () => app.close() }
  },
}

async function serve(framework, options, run) {
  const server = await SERVERS[framework](options)
  try {
    await run(server.url)
  } finally {
    await server.close()
  }
}

// A refusal that is not a denial (the limiter could not decide): the
// generic problem document, no Retry-After but on a 503.
async function refusal(r, status = 400) {
  assert.equal(r.status, status)
  assert.equal(r.headers.get('retry-after'), status === 503 ? '1' : null)
  assert.ok(r.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
  const body = await r.json()
  assert.deepEqual(Object.keys(body), ['type', 'title', 'status', 'detail'])
  assert.equal(body.status, status)
  return body
}

// The problem body of a 429, checked: Retry-After and the media type.
async function denial(r, retryAfter) {
  assert.equal(r.status, 429)
  const seconds = Number(r.headers.get('retry-after'))
  assert.ok(seconds >= 1, `Retry-After ${seconds}`)
  if (retryAfter !== undefined) assert.equal(seconds, retryAfter)
  assert.ok(r.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
  return r.json()
}

for (const framework of Object.keys(SERVERS)) {
  test(`${framework}: a stack's members each get the client's key; one header item per member`, async () => {
    const clock = new ManualClock()
    const burst = new TokenBucket('3/min', { clock })
    const hourly = new FixedWindow('100/h', { clock })
    await serve(framework, { limiter: new Stack({ burst, hourly }) }, async (url) => {
      for (const [r, t] of [[2, 20], [1, 40], [0, 60]]) {
        const res = await fetch(url)
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('ratelimit-policy'), '"burst";q=3;w=60, "hourly";q=100;w=3600')
        assert.equal(res.headers.get('ratelimit'), `"burst";r=${r};t=${t}, "hourly";r=${97 + r};t=3600`)
        const { decision } = await res.json()
        assert.deepEqual(decision.entries.map((e) => [e.name, e.remaining]), [['burst', r], ['hourly', 97 + r]], 'req.rateLimit is the stack\'s decision')
        assert.deepEqual(decision.deniedBy, [])
      }
      const denied = await fetch(url)
      assert.equal(denied.headers.get('ratelimit'), '"burst";r=0;t=60, "hourly";r=97;t=3600', 'the denial charged nothing')
      const body = await denial(denied, 20)
      assert.deepEqual([body.status, body['violated-policies']], [429, ['burst']])
      assert.equal(burst.peek('127.0.0.1', 0).remaining, 0, 'keyed by the client address')
      assert.equal(hourly.peek('127.0.0.1', 0).remaining, 97)
    })
  })

  test(`${framework}: keyGenerator's one key is every member's`, async () => {
    const clock = new ManualClock()
    const a = new TokenBucket('3/min', { clock })
    const b = new FixedWindow('10/min', { clock })
    await serve(framework, { limiter: new Stack({ a, b }), keyGenerator: () => 'tenant-7' }, async (url) => {
      assert.equal((await fetch(url)).headers.get('ratelimit'), '"a";r=2;t=20, "b";r=9;t=60')
      assert.deepEqual([a.peek('tenant-7', 0).remaining, b.peek('tenant-7', 0).remaining], [2, 9])
      assert.equal(a.size + b.size, 2)
    })
  })

  test(`${framework}: a stack per IP and global (a DirectTokenBucket); the member that denies is named`, async () => {
    const clock = new ManualClock()
    const global = new DirectTokenBucket('3/min', { clock })
    const stack = new Stack({ ip: new TokenBucket('2/min', { clock }), global })
    // All requests come from 127.0.0.1: a header stands for the client's
    // address. One key for every member: the direct bucket ignores it.
    const keyGenerator = (req) => req.headers['x-client']
    await serve(framework, { limiter: stack, keyGenerator, legacyHeaders: true }, async (url) => {
      const as = (client) => fetch(url, { headers: { 'X-Client': client } })
      const first = await as('10.0.0.1')
      assert.equal(first.status, 200)
      assert.equal(first.headers.get('ratelimit-policy'), '"ip";q=2;w=60, "global";q=3;w=60')
      assert.equal(first.headers.get('ratelimit'), '"ip";r=1;t=30, "global";r=2;t=20')
      assert.deepEqual(['limit', 'remaining', 'reset'].map((f) => first.headers.get(`x-ratelimit-${f}`)), ['2', '1', '30'])
      assert.equal((await as('10.0.0.1')).status, 200)
      const perIp = await denial(await as('10.0.0.1'), 30)
      assert.deepEqual(perIp['violated-policies'], ['ip'])
      assert.match(perIp.detail, /Quota exceeded for ip/)
      assert.equal(global.peek(0).remaining, 1, 'the ip\'s denial did not charge the global bucket')
      assert.equal((await as('10.0.0.2')).status, 200, 'another address: its own ip budget')
      const everyone = await as('10.0.0.3')
      assert.equal(everyone.headers.get('ratelimit'), '"ip";r=2;t=0, "global";r=0;t=60')
      assert.deepEqual((await denial(everyone, 20))['violated-policies'], ['global'])
    })
  })

  test(`${framework}: a DirectTokenBucket limits every request together, with no key`, async () => {
    const clock = new ManualClock()
    const global = new DirectTokenBucket('3/min', { clock })
    const cost = (req) => (req.headers['x-cost'] === undefined ? 1 : Number(req.headers['x-cost']))
    const reports = []
    const onLimiterError = (e) => reports.push(e)
    await serve(framework, { limiter: global, name: 'global', cost, onLimiterError }, async (url) => {
      const as = (client, headers = {}) => fetch(url, { headers: { 'X-Client': client, ...headers } })
      for (const [client, r, t] of [['10.0.0.1', 2, 20], ['10.0.0.2', 1, 40]]) {
        const res = await as(client)
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('ratelimit-policy'), '"global";q=3;w=60')
        assert.equal(res.headers.get('ratelimit'), `"global";r=${r};t=${t}`)
        const { decision } = await res.json()
        const { resetTime, ...rest } = decision
        // The decision, with express-rate-limit's fields (a DirectTokenBucket has no key).
        assert.deepEqual(rest, { allowed: true, remaining: r, limit: 3, used: 3 - r, retryAfterMs: 0, resetAfterMs: t * 1000 }, 'req.rateLimit is the decision')
        assert.ok(Math.abs(Date.parse(resetTime) - (Date.now() + t * 1000)) < 60_000, resetTime)
      }
      const tooDear = await as('10.0.0.3', { 'X-Cost': '2' })
      assert.deepEqual((await denial(tooDear, 20))['violated-policies'], ['global'])
      assert.equal((await as('10.0.0.3')).headers.get('ratelimit'), '"global";r=0;t=60', 'the denial charged nothing')
      const denied = await as('10.0.0.4')
      assert.equal(denied.headers.get('ratelimit'), '"global";r=0;t=60')
      assert.match((await denial(denied, 20)).detail, /Quota exceeded for global/)
      clock.advance(20_000)
      assert.equal((await as('10.0.0.5')).status, 200)
      // A cost above the capacity: a request it cannot judge, refused; the
      // reason is reported, not sent.
      const unjudged = await as('10.0.0.6', { 'X-Cost': '4' })
      assert.doesNotMatch(JSON.stringify(await refusal(unjudged)), /exceeds|limit 3/)
      assert.equal(reports.length, 1)
      assert.deepEqual([reports[0].code, reports[0].status], ['ERR_RATOMIC_BAD_REQUEST', 400])
      assert.match(reports[0].cause.message, /exceeds the limit 3/)
    })
    await serve(framework, { limiter: new DirectTokenBucket('1/min', { clock }), standardHeaders: false, legacyHeaders: true }, async (url) => {
      const res = await fetch(url)
      assert.equal(res.headers.get('ratelimit'), null)
      assert.deepEqual(['limit', 'remaining', 'reset'].map((f) => res.headers.get(`x-ratelimit-${f}`)), ['1', '0', '60'])
      await denial(await fetch(url), 60)
    })
  })

  test(`${framework}: a DirectTokenBucket with a keyGenerator is refused at set-up`, async () => {
    const options = { limiter: new DirectTokenBucket('5/s'), keyGenerator: (req) => req.ip }
    const NO_KEY = { name: 'TypeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /keyGenerator has no use with a DirectTokenBucket/ }
    if (framework === 'express') {
      assert.throws(() => rateLimit(options), NO_KEY)
      assert.throws(() => rateLimit({ limiter: new DirectTokenBucket('5/s'), name: 'caf\u00e9' }), RangeError, 'its name is checked at set-up')
    } else {
      const app = Fastify()
      await assert.rejects(app.register(ratomicFastify, options).ready(), NO_KEY)
      await app.close()
    }
  })

  test(`${framework}: keyGenerator's keys per member keep users apart while their IP binds`, async () => {
    const clock = new ManualClock()
    const stack = new Stack({ ip: new TokenBucket('3/min', { clock }), user: new TokenBucket('2/min', { clock }) })
    const keyGenerator = async (req) => [req.ip, Buffer.from(String(req.headers['x-user']))]
    await serve(framework, { limiter: stack, keyGenerator }, async (url) => {
      const as = (user) => fetch(url, { headers: { 'X-User': user } })
      assert.equal((await as('alice')).status, 200)
      assert.equal((await as('alice')).status, 200)
      assert.deepEqual((await denial(await as('alice')))['violated-policies'], ['user'])
      const bob = await as('bob')
      assert.equal(bob.status, 200, "alice's denial left the ip's last token")
      assert.equal(bob.headers.get('ratelimit'), '"ip";r=0;t=60, "user";r=1;t=30')
      assert.deepEqual((await denial(await as('bob')))['violated-policies'], ['ip'])
    })
  })

  test(`${framework}: keys not one per member: unjudged, a 400 even under passOnStoreError`, async () => {
    const clock = new ManualClock()
    const member = new TokenBucket('5/min', { clock })
    const stack = new Stack({ ip: member, user: new TokenBucket('5/min', { clock }) })
    const reports = []
    const onLimiterError = (e) => reports.push(e)
    for (const keys of [['10.0.0.1'], ['10.0.0.1', 'alice', 'extra'], []]) {
      // passOnStoreError fails open on a backend failure only: letting an
      // unjudgeable request through would let a client skip the limit.
      for (const passOnStoreError of [false, true]) {
        await serve(framework, { limiter: stack, keyGenerator: () => keys, passOnStoreError, onLimiterError }, async (url) => {
          const r = await fetch(url)
          assert.equal(r.headers.get('ratelimit'), null, 'no decision, no fields')
          assert.doesNotMatch(JSON.stringify(await refusal(r)), /key per member/)
        })
      }
    }
    assert.equal(member.size, 0, 'nothing was charged')
    assert.equal(reports.length, 6)
    for (const e of reports) assert.match(e.cause.message, /one key per member/)
  })

  test(`${framework}: a stack with a Limiter member is refused at set-up, naming it`, async () => {
    const clock = new ManualClock()
    const stack = new Stack({ ip: new TokenBucket('5/min', { clock }), user: new Limiter({ burst: '1/s', daily: '100/day' }, { clock }) })
    const NO_POLICY = { name: 'TypeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /stack member "user" is a Limiter/ }
    if (framework === 'express') {
      assert.throws(() => rateLimit({ limiter: stack }), NO_POLICY)
    } else {
      const app = Fastify()
      await assert.rejects(app.register(ratomicFastify, { limiter: stack }).ready(), NO_POLICY)
      await app.close()
    }
  })
}

test('a stack member name no header can carry is refused at set-up', () => {
  const s = new Stack({ 'caf\u00e9': new TokenBucket('5/min') })
  assert.throws(() => rateLimit({ limiter: s }), RangeError)
})

// No key is made for a DirectTokenBucket: a request with no client address
// (here a bare request object, no socket address) is judged all the same.
test('a DirectTokenBucket judges a request with no client address; a keyed limiter cannot', async () => {
  const clock = new ManualClock()
  const call = async (limiter) => {
    const req = { headers: {}, socket: {} }
    const fields = {}
    const res = { setHeader: (n, v) => { fields[n.toLowerCase()] = v }, end: () => {} }
    let passed = false
    await rateLimit({ limiter })(req, res, () => { passed = true })
    return { passed, decision: req.rateLimit, status: res.statusCode, fields }
  }
  const direct = await call(new DirectTokenBucket('2/min', { clock }))
  assert.deepEqual([direct.passed, direct.decision.remaining, direct.fields.ratelimit], [true, 1, '"default";r=1;t=30'])
  const keyed = await call(new TokenBucket('2/min', { clock }))
  assert.deepEqual([keyed.passed, keyed.decision, keyed.status], [false, undefined, 500], 'no client address: a set-up mistake')
})
