'use strict'
// Run by hand, after `npm run build`:
//
//   node benchmark/middleware.js            # ROUNDS=5 SECONDS=2 by default
//   DRIVER=rust node benchmark/middleware.js
//
// DRIVER=rust loads the same apps with ratomic's Rust load generator
// (`cargo run --release -p ratomic-benches --bin middleware -- drive`, as
// the FastAPI and axum benches do: 10 keep-alive connections, apps shuffled
// each round) instead of autocannon, which shares this machine's cores with
// the server and is itself JavaScript: about twice the bare app's rate, so a
// middleware's cost is a larger share of each request.
//
// Requests per second of a hello-world Express app, three ways, served by a
// child process on 127.0.0.1 and loaded by autocannon from this one (10
// connections; server and load generator in different processes, so they
// do not share one event loop):
// no limiter, ratomic's `ratomic/express`, and express-rate-limit 7
// (its default MemoryStore). Both limiters are set so nothing is ever
// denied (a limit of 10^9 a minute), so the figure is the cost of the
// middleware on an allowed request, headers included (draft-11 fields for
// ratomic, express-rate-limit's `standardHeaders: 'draft-7'`, no legacy
// fields for either).
//
// The three apps run in rounds, interleaved, the order rotating each round;
// the table shows the median req/s and each middleware's cost per request
// over the bare app: 1/rps(middleware) − 1/rps(bare). The target (issue 17)
// is ratomic's cost at most half of express-rate-limit's. Server and load
// generator share this machine's cores, as they would for any contender.

const http = require('node:http')
const { fork } = require('node:child_process')
const express = require('express')
const autocannon = require('autocannon')
const { rateLimit: erl } = require('express-rate-limit')
const { rateLimit } = require('../express.js')

const ROUNDS = Number(process.env.ROUNDS || 5)
const SECONDS = Number(process.env.SECONDS || 2)
const HUGE = 1e9

function app(middleware) {
  const a = express()
  a.set('etag', false)
  if (middleware) a.use(middleware)
  a.get('/', (req, res) => res.send('hello'))
  return a
}

const apps = {
  'no limiter': app(null),
  'ratomic/express': app(rateLimit({ limit: HUGE, windowMs: 60_000 })),
  'express-rate-limit': app(erl({ limit: HUGE, windowMs: 60_000, standardHeaders: 'draft-7', legacyHeaders: false })),
}

async function listen(a) {
  const server = http.createServer(a)
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return server
}

function load(port) {
  return new Promise((resolve, reject) => {
    autocannon({ url: `http://127.0.0.1:${port}/`, connections: 10, duration: SECONDS }, (err, result) => {
      if (err) reject(err)
      else if (result.non2xx > 0 || result.errors > 0) reject(new Error(`${result.non2xx} non-2xx, ${result.errors} errors`))
      else resolve(result.requests.average)
    })
  })
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]
}

async function serve() {
  const ports = {}
  for (const [n, a] of Object.entries(apps)) ports[n] = (await listen(a)).address().port
  process.send(ports)
}

async function main() {
  const names = Object.keys(apps)
  const child = fork(__filename, ['serve'])
  const ports = await new Promise((resolve) => child.once('message', resolve))
  if (process.env.DRIVER === 'rust') {
    const { execFileSync } = require('node:child_process')
    const path = require('node:path')
    const root = path.join(__dirname, '..', '..')
    try {
      execFileSync('cargo', ['build', '-q', '--release', '-p', 'ratomic-benches', '--bin', 'middleware'], { cwd: root, stdio: 'inherit' })
      const fs = require('node:fs')
      const version = (pkg) => JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'node_modules', pkg, 'package.json'))).version
      console.log(`node ${process.version}, express ${version('express')}, express-rate-limit ${version('express-rate-limit')}`)
      const driver = path.join(root, 'target', 'release', 'middleware')
      const apps = names.map((n) => `${n}=${ports[n]}`)
      execFileSync(driver, ['drive', String(ROUNDS), String(SECONDS), ...apps], { stdio: 'inherit' })
    } finally {
      child.kill()
    }
    return
  }
  const rps = Object.fromEntries(names.map((n) => [n, []]))
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const order = names.map((_, i) => names[(i + r) % names.length])
      for (const n of order) rps[n].push(await load(ports[n]))
      process.stderr.write(`round ${r + 1}/${ROUNDS}\n`)
    }
  } finally {
    child.kill()
  }

  const base = median(rps['no limiter'])
  const cost = (n) => 1e6 / median(rps[n]) - 1e6 / base // µs per request over the bare app
  console.log(`node ${process.version}, ${ROUNDS} rounds of ${SECONDS} s, 10 connections, ${new Date().toISOString()}`)
  console.log('| app | median req/s | cost per request over the bare app |')
  console.log('|---|---:|---:|')
  for (const n of names) {
    console.log(`| ${n} | ${median(rps[n]).toFixed(0)} | ${n === 'no limiter' ? '—' : `${cost(n).toFixed(2)} µs`} |`)
  }
  const ratio = cost('ratomic/express') / cost('express-rate-limit')
  console.log(`\nratomic's cost ÷ express-rate-limit's: ${ratio.toFixed(2)} (target <= 0.5)`)
}

;(process.argv[2] === 'serve' ? serve() : main()).catch((e) => {
  console.error(e)
  process.exit(1)
})
