'use strict'
// Run by hand, after `npm run build`:
//
//   node benchmark/middleware-inproc.js                 # ROUNDS=21 N=5000 BLOCK=100, Express and Fastify
//   ONLY=express node benchmark/middleware-inproc.js
//   FLOOR=1 node benchmark/middleware-inproc.js         # and both sides without header fields
//   PRETENURING=1 node benchmark/middleware-inproc.js   # V8's allocation-site pretenuring left on (see below)
//   GC=1 node benchmark/middleware-inproc.js            # each turn closed by a full GC, timed with it
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
// bare app's, and the ratio ratomic's cost ÷ the peer's (the target: ≤ 0.5);
// beside it, the median and quartiles of each round's own ratio (the three
// apps measured in that round).
//
// Within a round the apps take turns of BLOCK requests (100), so that the
// load of whatever else runs on the machine (2 shared cores) falls on each
// app alike; whole rounds one app after another (BLOCK=N, as this bench did
// before 2026-11-28) let a busy second land on one app.
//
// The process runs with V8's allocation-site pretenuring off (it re-runs
// itself with --no-allocation-site-pretenuring). With it on (V8 then
// allocates an allocation site's objects straight in old space once enough
// of them survived a scavenge), runs fell into one of two modes for their
// whole length: the bare Fastify app measured 0.9–1.3 µs a request in some
// and 3.3–7 µs in others minutes apart, scavenges promoting most of what
// they copied, and every cost swung with it; with it off, 1.0–1.3 µs in
// every run tried. The same flag for every app: what is compared does not
// change.
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

if (!process.env.PRETENURING && !process.execArgv.includes('--no-allocation-site-pretenuring')) {
  const { status } = require('node:child_process').spawnSync(process.execPath, ['--no-allocation-site-pretenuring', ...process.execArgv, __filename], { stdio: 'inherit' })
  process.exit(status === null ? 1 : status)
}

const http = require('node:http')
const fs = require('node:fs')
const path = require('node:path')

const ROUNDS = Number(process.env.ROUNDS || 21)
const N = Number(process.env.N || 5000)
// Requests an app serves before the next takes its turn (BLOCK=N: each app's round in one go).
const BLOCK = Number(process.env.BLOCK || 100)
const ONLY = process.env.ONLY
// FLOOR=1: both middlewares also without the RateLimit header fields (the cost the fields add).
const FLOOR = process.env.FLOOR
// GC=1: a full collection closes each app's round, timed with it.
const gc = process.env.GC ? (require('node:v8').setFlagsFromString('--expose-gc'), require('node:vm').runInNewContext('gc')) : null
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
    const apps = {
      bare: await fastifyApp(s.status === 429 ? async (a) => a.addHook('onRequest', (req, reply, done) => reply.code(429).send('denied')) : null),
      ratomic: await fastifyApp((a) => a.register(require('../fastify.js'), o)),
      peer: await fastifyApp((a) => a.register(require('@fastify/rate-limit'), o)),
    }
    if (FLOOR) {
      // Both without the three RateLimit-* fields (Retry-After stays on a denial, as ratomic's does).
      const off = { 'ratelimit-limit': false, 'ratelimit-remaining': false, 'ratelimit-reset': false }
      apps['ratomic, no fields'] = await fastifyApp((a) => a.register(require('../fastify.js'), { max: s.limit, timeWindow: s.windowMs, standardHeaders: false }))
      apps['peer, no fields'] = await fastifyApp((a) => a.register(require('@fastify/rate-limit'), { ...o, addHeaders: off, addHeadersOnExceeding: off }))
    }
    return apps
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

// CPU µs (process.cpuUsage) of `count` requests from `from` on; every
// status but an app's first must be `expect`.
async function time(handler, s, from, count, expect) {
  const t0 = process.cpuUsage()
  for (let i = 0; i < count; i++) {
    const status = await request(handler, s.ip(from + i))
    if (status !== expect && from + i > 0) throw new Error(`status ${status}, expected ${expect}`)
  }
  if (gc !== null) gc()
  const t = process.cpuUsage(t0)
  return t.user + t.system
}

// One round: every app serves N requests, the apps taking turns BLOCK
// requests at a time (the order rotating each turn), so that what else runs
// on the machine weighs on each app alike; each app's CPU ns per request.
async function round(apps, names, s, next, r) {
  const spent = Object.fromEntries(names.map((n) => [n, 0]))
  for (let done = 0, turn = 0; done < N; done += BLOCK, turn++) {
    const count = Math.min(BLOCK, N - done)
    for (let j = 0; j < names.length; j++) {
      const n = names[(j + r + turn) % names.length]
      spent[n] += await time(apps[n], s, next[n], count, s.status)
      next[n] += count
    }
  }
  return Object.fromEntries(names.map((n) => [n, (spent[n] * 1000) / N]))
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

const version = (p) => JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'node_modules', p, 'package.json'))).version

async function main() {
  const peerName = { express: `express-rate-limit ${version('express-rate-limit')}`, fastify: `@fastify/rate-limit ${version('@fastify/rate-limit')}` }
  console.log(`node ${process.version}, express ${version('express')}, fastify ${version('fastify')}; ${ROUNDS} rounds of ${N} requests an app, in turns of ${BLOCK}${gc ? ', each turn closed by a full GC' : ''}; ${process.execArgv.join(' ') || 'pretenuring on'}; ${new Date().toISOString()}`)
  console.log(`| framework | scenario | bare app | ratomic | peer | ratomic ÷ peer | per-round ratio: median (quartiles) |`)
  console.log('|---|---|---:|---:|---:|---:|---:|')
  for (const framework of Object.keys(APPS)) {
    if (ONLY && ONLY !== framework) continue
    for (const [name, s] of Object.entries(SCENARIOS)) {
      const apps = await APPS[framework](s)
      const names = Object.keys(apps)
      const t = Object.fromEntries(names.map((n) => [n, []]))
      const next = Object.fromEntries(names.map((n) => [n, 0]))
      for (let r = 0; r < ROUNDS; r++) {
        const ns = await round(apps, names, s, next, r)
        for (const n of names) t[n].push(ns[n])
      }
      const bare = median(t.bare)
      const cost = (n) => median(t[n]) - bare
      // Each round's own ratio: (ratomic − bare) ÷ (peer − bare), the three measured in that round.
      const perRound = (a, b) => {
        const ratios = t[a].map((x, r) => (x - t.bare[r]) / (t[b][r] - t.bare[r])).sort((x, y) => x - y)
        const q = (f) => ratios[Math.round(f * (ratios.length - 1))].toFixed(2)
        return `${median(ratios).toFixed(2)} (${q(0.25)}–${q(0.75)})`
      }
      const us = (n) => `+${(cost(n) / 1000).toFixed(2)} µs`
      console.log(
        `| ${framework} | ${name} | ${(bare / 1000).toFixed(2)} µs | ${us('ratomic')} | ${us('peer')} (${peerName[framework]}) | ${(cost('ratomic') / cost('peer')).toFixed(2)} | ${perRound('ratomic', 'peer')} |`
      )
      if (FLOOR) {
        const [a, b] = ['ratomic, no fields', 'peer, no fields']
        console.log(`|   | both without fields | | ${us(a)} | ${us(b)} | ${(cost(a) / cost(b)).toFixed(2)} | ${perRound(a, b)} |`)
      }
      if (process.env.ALL) for (const n of names) console.error(`  ${n}: ${t[n].map((x) => (x / 1000).toFixed(1)).join(' ')}`)
    }
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
