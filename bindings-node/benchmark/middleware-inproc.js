'use strict'
// Run by hand, after `npm run build`:
//
//   node benchmark/middleware-inproc.js                 # ROUNDS=21 N=5000, Express and Fastify
//   ONLY=express node benchmark/middleware-inproc.js
//   FLOOR=1 ONLY=express node benchmark/middleware-inproc.js   # and both without header fields
//
// What the middleware itself costs a request, against its peer, in this one
// process. Each app — a hello-world Express or Fastify app bare, with
// ratomic's middleware, with the peer's — is called as Node's HTTP server
// calls it, `app(req, res)`, with a fresh request object and a fresh
// http.ServerResponse per request (no socket: what the response writes
// stays in its buffer). Requests run one after another, each awaited until
// its response ends. The apps run in rounds, interleaved, the order rotating
// each round; each round's figure is CPU time (process.cpuUsage: time this
// process was scheduled out is not counted — the machine is shared) per
// request. A scenario's cost is an app's median over the rounds minus the
// bare app's, and the ratio ratomic's cost ÷ the peer's (the target: ≤ 0.5).
//
// Scenarios, the same header fields on both sides:
// - allowed, one key: every request from one address, the limit never reached;
// - allowed, 10,000 keys: addresses taken in turn from 10,000;
// - denied: one address over a limit of 1 a day (every request but the first
//   is a 429); the bare app answers every request with a 429 from its first
//   middleware (hook), so the cost is the limiter's, not the route's saved.
//
// Express: ratomic/express against express-rate-limit 8, both with
// `standardHeaders: 'draft-7'`, `legacyHeaders: false` (RateLimit-Policy
// and RateLimit; Retry-After on a denial). Fastify: ratomic/fastify against
// @fastify/rate-limit, both with `enableDraftSpec: true` (RateLimit-Limit,
// -Remaining, -Reset; Retry-After on a denial).

const http = require('node:http')
const fs = require('node:fs')
const path = require('node:path')

const ROUNDS = Number(process.env.ROUNDS || 21)
const N = Number(process.env.N || 5000)
const ONLY = process.env.ONLY
// FLOOR=1: Express's two middlewares also without header fields (the cost the fields add).
const FLOOR = process.env.FLOOR
const DAY = 86_400_000
const HUGE = 1e9

const KEYS = Array.from({ length: 10_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`)
const SCENARIOS = {
  'allowed, one key': { limit: HUGE, windowMs: 60_000, ip: () => '10.0.0.1', status: 200 },
  'allowed, 10,000 keys': { limit: HUGE, windowMs: 60_000, ip: (i) => KEYS[i % KEYS.length], status: 200 },
  denied: { limit: 1, windowMs: DAY, ip: () => '10.0.0.2', status: 429 },
}

function expressApp(middleware) {
  const express = require('express')
  const a = express()
  a.set('etag', false)
  if (middleware) a.use(middleware)
  a.get('/', (req, res) => res.send('hello'))
  return a
}

async function fastifyApp(register) {
  const a = require('fastify')()
  if (register) await register(a)
  a.get('/', async () => 'hello')
  await a.ready()
  return a.routing
}

const APPS = {
  express(s) {
    const rateLimit = require('../express.js')
    const { rateLimit: erl } = require('express-rate-limit')
    const o = { limit: s.limit, windowMs: s.windowMs, standardHeaders: 'draft-7', legacyHeaders: false }
    const apps = {
      bare: expressApp(s.status === 429 ? (req, res) => ((res.statusCode = 429), res.end('denied')) : null),
      ratomic: expressApp(rateLimit(o)),
      peer: expressApp(erl({ ...o, validate: false })),
    }
    if (FLOOR) {
      // Both without header fields: what the fields cost each side (Node's
      // setHeader and its writing of them) is the rest.
      const off = { ...o, standardHeaders: false }
      apps['ratomic, no fields'] = expressApp(rateLimit(off))
      apps['peer, no fields'] = expressApp(erl({ ...off, validate: false }))
    }
    return apps
  },
  async fastify(s) {
    const o = { max: s.limit, timeWindow: s.windowMs, enableDraftSpec: true }
    return {
      bare: await fastifyApp(s.status === 429 ? async (a) => a.addHook('onRequest', (req, reply, done) => reply.code(429).send('denied')) : null),
      ratomic: await fastifyApp((a) => a.register(require('../fastify.js'), o)),
      peer: await fastifyApp((a) => a.register(require('@fastify/rate-limit'), o)),
    }
  },
}

// One request through `handler` from address `ip`; resolves with the status when the response ends.
function request(handler, ip) {
  return new Promise((resolve) => {
    const socket = { remoteAddress: ip, remotePort: 40000, encrypted: false }
    const req = { method: 'GET', url: '/', httpVersionMajor: 1, httpVersionMinor: 1, httpVersion: '1.1', headers: { host: 'bench' }, socket, connection: socket, complete: true, on() {}, once() {}, removeListener() {} }
    const res = new http.ServerResponse(req)
    const end = res.end
    res.end = function (...args) {
      end.apply(this, args)
      resolve(res.statusCode)
    }
    handler(req, res)
  })
}

// CPU ns per request for N requests from `from` on; every status but an app's first must be `expect`.
async function time(handler, s, from, expect) {
  const t0 = process.cpuUsage()
  for (let i = 0; i < N; i++) {
    const status = await request(handler, s.ip(from + i))
    if (status !== expect && from + i > 0) throw new Error(`status ${status}, expected ${expect}`)
  }
  const t = process.cpuUsage(t0)
  return ((t.user + t.system) * 1000) / N
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

const version = (p) => JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'node_modules', p, 'package.json'))).version

async function main() {
  const peerName = { express: `express-rate-limit ${version('express-rate-limit')}`, fastify: `@fastify/rate-limit ${version('@fastify/rate-limit')}` }
  console.log(`node ${process.version}, express ${version('express')}, fastify ${version('fastify')}; ${ROUNDS} rounds of ${N} requests an app; ${new Date().toISOString()}`)
  console.log('| framework | scenario | bare app | ratomic | peer | ratomic ÷ peer |')
  console.log('|---|---|---:|---:|---:|---:|')
  for (const framework of Object.keys(APPS)) {
    if (ONLY && ONLY !== framework) continue
    for (const [name, s] of Object.entries(SCENARIOS)) {
      const apps = await APPS[framework](s)
      const names = Object.keys(apps)
      const t = Object.fromEntries(names.map((n) => [n, []]))
      const next = Object.fromEntries(names.map((n) => [n, 0]))
      for (let r = 0; r < ROUNDS; r++) {
        for (let j = 0; j < names.length; j++) {
          const n = names[(j + r) % names.length]
          t[n].push(await time(apps[n], s, next[n], s.status))
          next[n] += N
        }
      }
      const bare = median(t.bare)
      const cost = (n) => median(t[n]) - bare
      console.log(
        `| ${framework} | ${name} | ${(bare / 1000).toFixed(2)} µs | +${(cost('ratomic') / 1000).toFixed(2)} µs | +${(cost('peer') / 1000).toFixed(2)} µs (${peerName[framework]}) | ${(cost('ratomic') / cost('peer')).toFixed(2)} |`
      )
      for (const n of names.filter((n) => n.endsWith('no fields'))) console.log(`|   | ${n} | | +${(cost(n) / 1000).toFixed(2)} µs | | |`)
      if (process.env.ALL) for (const n of names) console.error(`  ${n}: ${t[n].map((x) => (x / 1000).toFixed(1)).join(' ')}`)
    }
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
