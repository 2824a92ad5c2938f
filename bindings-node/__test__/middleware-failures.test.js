'use strict'
// What a client sees when the limiter cannot decide, and what the operator
// gets: Redis really down (a redis-server SIGKILLed, through ioredis and
// node-redis), a key the limiter refuses, a server on a Unix socket (no
// client address), X-Forwarded-For the app does not trust — Express and
// Fastify on real sockets. The client gets a generic RFC 9457 document (503,
// 400 or 500); the address and the error's text go to onLimiterError only,
// whose default writes console.warn once per kind and interval.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const express = require('express')
const Fastify = require('fastify')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const { rateLimit } = require('ratomic/express')
const ratomicFastify = require('ratomic/fastify')
const { TokenBucket, ManualClock, PROBLEM_CONTENT_TYPE } = require('ratomic')
const { RedisTokenBucket } = require('ratomic/redis')
const { startRedis } = require('./redis-server')

const GENERIC = {
  503: { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'Rate limiting is unavailable; try again later.' },
  400: { type: 'about:blank', title: 'Bad Request', status: 400, detail: 'This request cannot be rate limited.' },
  500: { type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'Rate limiting is misconfigured on this server.' },
}

// A refusal with the generic body, and none of `secrets` (nor an error's
// wording) in its body or header fields.
async function checkGeneric(r, status, secrets) {
  assert.equal(r.status, status)
  assert.ok(r.headers.get('content-type').startsWith(PROBLEM_CONTENT_TYPE))
  const body = await r.text()
  assert.deepEqual(JSON.parse(body), GENERIC[status])
  const seen = body + [...r.headers].map(([n, v]) => `${n}: ${v}\n`).join('')
  for (const secret of [...secrets, 'ECONNREFUSED', 'edis', 'bytes', 'closed']) {
    assert.ok(!seen.includes(secret), `${secret} reached the client: ${seen}`)
  }
  assert.equal(r.headers.get('retry-after'), status === 503 ? '1' : null)
}

// Each framework with `options`, on 127.0.0.1 port 0 or on a Unix socket.
const SERVERS = {
  async express(options, listen = ['127.0.0.1'], setup = () => {}) {
    const app = express()
    setup(app)
    app.use(rateLimit(options))
    app.get('/', (req, res) => res.send('ok'))
    const server = http.createServer(app)
    const at = listen.length === 1 && listen[0].startsWith('/') ? listen[0] : undefined
    await new Promise((resolve) => (at ? server.listen(at, resolve) : server.listen(0, listen[0], resolve)))
    return { port: at ? undefined : server.address().port, close: () => new Promise((resolve) => server.close(resolve)) }
  },
  async fastify(options, listen = ['127.0.0.1'], setup = {}) {
    const app = Fastify(setup)
    await app.register(ratomicFastify, options)
    app.get('/', async () => 'ok')
    const at = listen.length === 1 && listen[0].startsWith('/') ? listen[0] : undefined
    await (at ? app.listen({ path: at }) : app.listen({ port: 0, host: listen[0] }))
    return { port: at ? undefined : app.server.address().port, close: () => app.close() }
  },
}

// A GET over TCP or a Unix socket, with `headers`; a fetch-like response.
function get({ port, socketPath }, headers = {}) {
  return new Promise((resolve, reject) => {
    const where = socketPath === undefined ? { host: '127.0.0.1', port } : { socketPath }
    const req = http.request({ ...where, path: '/', headers, agent: false }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () =>
        resolve({
          status: res.statusCode,
          headers: new Headers(Object.entries(res.headers).map(([n, v]) => [n, String(v)])),
          text: async () => body,
        })
      )
    })
    req.on('error', reject)
    req.end()
  })
}

async function deadRedis() {
  const s = await startRedis()
  s.proc.kill('SIGKILL')
  await new Promise((r) => s.proc.once('exit', r))
  return s
}

const CLIENTS = {
  ioredis(port) {
    const c = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true })
    c.on('error', () => {})
    return { client: c, close: async () => c.disconnect() }
  },
  nodeRedis(port) {
    // Not connected: node-redis rejects each command (the client is closed).
    const c = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: false } })
    c.on('error', () => {})
    return { client: c, close: async () => {} }
  },
}

for (const framework of Object.keys(SERVERS)) {
  for (const [name, makeClient] of Object.entries(CLIENTS)) {
    test(`${framework} on ${name}, Redis down: a generic 503, the cause with its address to onLimiterError`, async () => {
      const s = await deadRedis()
      const { client, close } = makeClient(s.port)
      const reports = []
      const onLimiterError = (e, req) => reports.push([e, typeof req])
      const limiter = new RedisTokenBucket('5/s', { client, prefix: 'down:', breakerThreshold: 0 })
      const closed = await SERVERS[framework]({ limiter, onLimiterError })
      const open = await SERVERS[framework]({ limiter, onLimiterError, passOnStoreError: true })
      try {
        for (let i = 0; i < 3; i++) await checkGeneric(await get(closed), 503, ['127.0.0.1', String(s.port)])
        assert.equal((await get(open)).status, 200, 'passOnStoreError: fail open')
        assert.equal(reports.length, 4)
        for (const [e, req] of reports) {
          assert.equal(e.code, 'ERR_RATOMIC_BACKEND')
          assert.equal(req, 'object', 'the request is given too')
          assert.equal(e.cause.code, 'ERR_RATOMIC_BACKEND', 'the limiter error, as the limiter raised it')
        }
        assert.deepEqual(reports.map(([e]) => e.status), [503, 503, 503, 0])
        // The operator's side names what failed: the client's own error.
        const causes = reports.map(([e]) => `${e.cause.message} ${e.cause.cause && e.cause.cause.message}`)
        assert.ok(causes.every((m) => /Redis|ECONNREFUSED|closed|connect/i.test(m)), causes.join('\n'))
      } finally {
        await closed.close()
        await open.close()
        await close()
        await s.stop()
      }
    })
  }

  test(`${framework}: a key the limiter refuses is a generic 400, even under passOnStoreError`, async () => {
    const reports = []
    const limiter = new TokenBucket('5/s', { clock: new ManualClock() })
    for (const passOnStoreError of [false, true]) {
      const keyGenerator = (req) => req.headers['x-api-key']
      const server = await SERVERS[framework]({ limiter, keyGenerator, passOnStoreError, onLimiterError: (e) => reports.push(e) })
      try {
        await checkGeneric(await get(server, { 'X-API-Key': 'k'.repeat(2000) }), 400, ['2000', 'long', '1024'])
        assert.equal((await get(server, { 'X-API-Key': 'short' })).status, 200)
        await checkGeneric(await get(server), 400, [])
      } finally {
        await server.close()
      }
    }
    assert.deepEqual(
      reports.map((e) => [e.code, e.status]),
      Array(4).fill(['ERR_RATOMIC_BAD_REQUEST', 400])
    )
    assert.match(reports[0].cause.message, /2000 bytes/)
    assert.match(reports[1].message, /keyGenerator gave no key/)
  })

  test(`${framework} on a Unix socket (no client address): a 500, reported once naming keyGenerator`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-uds-'))
    const socketPath = path.join(dir, 'app.sock')
    const reports = []
    const limiter = new TokenBucket('5/s', { clock: new ManualClock() })
    let server = await SERVERS[framework]({ limiter, onLimiterError: (e) => reports.push(e) }, [socketPath])
    try {
      for (let i = 0; i < 3; i++) await checkGeneric(await get({ socketPath }), 500, [])
    } finally {
      await server.close()
    }
    server = await SERVERS[framework]({ limiter, keyGenerator: () => 'everyone', onLimiterError: (e) => reports.push(e) }, [socketPath])
    try {
      assert.equal((await get({ socketPath })).status, 200, 'with a keyGenerator, the same server decides')
    } finally {
      await server.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
    assert.equal(reports.length, 1)
    assert.equal(reports[0].code, 'ERR_RATOMIC_NO_CLIENT_ADDRESS')
    assert.match(reports[0].message, /keyGenerator/)
  })
}

test('express: X-Forwarded-For with no trusted proxy, or with every hop trusted, is reported once', async () => {
  for (const [trust, code] of [[undefined, 'ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR'], [true, 'ERR_RATOMIC_PERMISSIVE_TRUST_PROXY'], [1, undefined]]) {
    const reports = []
    const limiter = new TokenBucket('5/min', { clock: new ManualClock() })
    const setup = (app) => trust !== undefined && app.set('trust proxy', trust)
    const server = await SERVERS.express({ limiter, onLimiterError: (e) => reports.push(e) }, ['127.0.0.1'], setup)
    try {
      for (let i = 0; i < 3; i++) assert.equal((await get(server, { 'X-Forwarded-For': `198.51.100.${i}` })).status, 200)
    } finally {
      await server.close()
    }
    assert.deepEqual(reports.map((e) => e.code), code ? [code] : [], `trust proxy ${trust}`)
  }
})

test('fastify: X-Forwarded-For with no trustProxy is reported once', async () => {
  for (const [setup, codes] of [[{}, ['ERR_RATOMIC_UNTRUSTED_FORWARDED_FOR']], [{ trustProxy: 1 }, []]]) {
    const reports = []
    const limiter = new TokenBucket('5/min', { clock: new ManualClock() })
    const server = await SERVERS.fastify({ limiter, onLimiterError: (e) => reports.push(e) }, ['127.0.0.1'], setup)
    try {
      for (let i = 0; i < 3; i++) assert.equal((await get(server, { 'X-Forwarded-For': `198.51.100.${i}` })).status, 200)
    } finally {
      await server.close()
    }
    assert.deepEqual(reports.map((e) => e.code), codes)
  }
})

// The default onLimiterError, in a process of its own whose stderr is read:
// five failures, one console.warn line, with the cause and its address.
test('the default onLimiterError writes one console.warn line for many failures', async () => {
  const s = await deadRedis()
  try {
    const script = `
      const http = require('node:http')
      const express = require('express')
      const { Redis } = require('ioredis')
      const { rateLimit } = require('ratomic/express')
      const { RedisTokenBucket } = require('ratomic/redis')
      const client = new Redis({ port: ${s.port}, host: '127.0.0.1', maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true })
      client.on('error', () => {})
      const app = express()
      app.use(rateLimit({ limiter: new RedisTokenBucket('5/s', { client, breakerThreshold: 0 }) }))
      const server = http.createServer(app).listen(0, '127.0.0.1', async () => {
        const statuses = []
        for (let i = 0; i < 5; i++) statuses.push((await fetch('http://127.0.0.1:' + server.address().port)).status)
        console.log(JSON.stringify(statuses))
        server.close()
        client.disconnect()
      })
    `
    const r = spawnSync(process.execPath, ['-e', script], { cwd: path.join(__dirname, '..'), encoding: 'utf8', timeout: 60_000 })
    assert.equal(r.status, 0, r.stderr)
    assert.deepEqual(JSON.parse(r.stdout), [503, 503, 503, 503, 503])
    const lines = r.stderr.trim().split('\n')
    assert.equal(lines.length, 1, r.stderr)
    assert.match(lines[0], /^ratomic\/express: the rate limiter's backend failed; requests are refused with a 503: /)
  } finally {
    await s.stop()
  }
})
