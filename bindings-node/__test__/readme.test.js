'use strict'
// The READMEs' Node examples run as written: the project README's ```js
// blocks and the npm page's (bindings-node/README.md).
//
// `require('ratomic')`, `require('ratomic/express')` ... resolve as in a
// user's project: by default this package (by its own name, through
// package.json's `exports`); with RATOMIC_INSTALLED set (run-tests.sh), the
// project outside the repository where the packed tarballs were installed.
// Other modules (express, ioredis) come from this package's devDependencies.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { createRequire } = require('node:module')

const INSTALLED = process.env.RATOMIC_INSTALLED
const fromProject = INSTALLED ? createRequire(path.join(INSTALLED, 'package.json')) : require
const load = (name) => (name === 'ratomic' || name.startsWith('ratomic/') ? fromProject(name) : require(name))
const README = path.join(__dirname, '..', '..', 'README.md')
const NPM_README = path.join(__dirname, '..', 'README.md')

if (INSTALLED) {
  test('ratomic resolves to the installed package, its binary to the platform package', () => {
    const pkg = path.dirname(fromProject.resolve('ratomic/package.json'))
    assert.equal(pkg, path.join(fs.realpathSync(INSTALLED), 'node_modules', 'ratomic'))
    assert.deepEqual(fs.readdirSync(pkg).filter((f) => f.endsWith('.node')), [], 'the main package carries no binary')
    // The platform this machine built for: the one ratomic.<platform>.node beside the sources.
    const built = fs.readdirSync(path.join(__dirname, '..')).filter((f) => /^ratomic\..+\.node$/.test(f))
    assert.equal(built.length, 1, `one built addon: ${built}`)
    const here = built[0].slice('ratomic.'.length, -'.node'.length)
    const platform = path.join(pkg, '..', `ratomic-${here}`)
    assert.equal(typeof fromProject('ratomic').TokenBucket, 'function')
    assert.ok(require.cache[path.join(platform, built[0])], 'the addon loaded is the platform package\'s')
    for (const f of ['LICENSE-MIT', 'LICENSE-APACHE']) assert.ok(fs.existsSync(path.join(platform, f)), `ratomic-${here} ships ${f}`)
  })
}

test('the README example runs', async () => {
  const md = fs.readFileSync(README, 'utf8')
  const code = md.match(/```js\n([\s\S]*?)```/)[1]
  const lines = []
  const log = (...args) => lines.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '))
  const run = new Function('require', 'console', `return (async () => { ${code}; await waited })()`)
  await run(load, { log })
  assert.deepEqual(lines[0], JSON.stringify({ allowed: false, remaining: 0, limit: 10, retryAfterMs: 100, resetAfterMs: 1000 }))
  assert.equal(lines[1], 'true')
  assert.deepEqual(JSON.parse(lines[2]), { algorithm: 'tokenBucket', limit: 20, capacity: 20, refillPerSec: 100 / 60 })
  assert.equal(lines[4], 'true')
  assert.equal(
    lines.at(-2),
    'TokenBucket { token bucket 10 per 1s, keys: 2 } Limiter { "10/second": token bucket 10 per 1s, "1000/day": token bucket 1000 per 1d, keys: 0 }',
  )
  assert.equal(lines.at(-1), 'acquired true')
})

test("the README's DirectTokenBucket example runs", async () => {
  const md = fs.readFileSync(README, 'utf8')
  const code = [...md.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((c) => c.includes('new DirectTokenBucket(') && !c.includes('express'))
  assert.ok(code, 'the README has a DirectTokenBucket example')
  const lines = []
  const log = (...args) => lines.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '))
  new Function('require', 'console', code)(load, { log })
  assert.deepEqual(lines, [
    JSON.stringify({ allowed: false, remaining: 0, limit: 100, retryAfterMs: 10, resetAfterMs: 1000 }),
    'true',
    JSON.stringify(['ip: 9', 'global: 0']),
  ])
})

test("the README's Express example runs and answers with the standard fields", async () => {
  const md = fs.readFileSync(README, 'utf8')
  const code = [...md.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((c) => c.includes("require('ratomic/express')"))
  assert.ok(code, 'the README has an Express example')
  const line = await new Promise((resolve, reject) => {
    const log = (...args) => resolve(args.join(' '))
    try {
      new Function('require', 'console', code)(load, { log })
    } catch (e) {
      reject(e)
    }
  })
  // A fixed window of a minute, aligned to the monotonic clock: 1–60 s left.
  assert.match(line, /^200 "default";r=99;t=([1-9]|[1-5][0-9]|60) 99 left$/)
})

test("the README's Express example with a Stack runs and writes an item per member", async () => {
  const md = fs.readFileSync(README, 'utf8')
  const code = [...md.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((c) => c.includes("require('ratomic/express')") && c.includes('new Stack('))
  assert.ok(code, 'the README has an Express example with a Stack')
  const lines = await new Promise((resolve, reject) => {
    const lines = []
    const log = (...args) => lines.push(args.join(' ')) === 2 && resolve(lines)
    try {
      new Function('require', 'console', code)(load, { log })
    } catch (e) {
      reject(e)
    }
  })
  assert.deepEqual(lines, ['"ip";q=10;w=1, "global";q=1000;w=1', '"ip";r=9;t=1, "global";r=999;t=1'])
})

test("the README's Redis example runs against a real server", async () => {
  const { startRedis } = require('./redis-server')
  const md = fs.readFileSync(README, 'utf8')
  const code = [...md.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((c) => c.includes("require('ratomic/redis')"))
  assert.ok(code, 'the README has a Redis example')
  const server = await startRedis()
  const saved = process.env.REDIS_URL
  process.env.REDIS_URL = server.url
  // The example as written, but for two things a loaded machine would
  // otherwise decide: each call may wait a second for Redis (the default,
  // 50 ms, is a real timeout the first call, which connects and loads the
  // script, can pass when the cores are busy: the example's decisions would
  // then be onError's), and every client it makes is disconnected whatever
  // happens (a client the example leaves open, as it does when a call
  // throws, reconnects forever to the stopped server and keeps this file's
  // process from ever exiting: the test hung instead of failing).
  const clients = []
  const patched = (name) => {
    const m = load(name)
    if (name === 'ioredis') {
      class Redis extends m.Redis {
        constructor(...args) {
          super(...args)
          clients.push(this)
        }
      }
      return { ...m, Redis }
    }
    if (name !== 'ratomic/redis') return m
    const classes = {}
    for (const [n, C] of Object.entries(m)) {
      classes[n] = typeof C === 'function' && /^Redis/.test(n) ? class extends C { constructor(rates, o) { super(rates, { timeoutMs: 1000, ...o }) } } : C
    }
    return classes
  }
  try {
    const lines = []
    const log = (...args) => lines.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '))
    await new Function('require', 'console', 'process', `return (async () => { ${code} })()`)(patched, { log }, process)
    assert.deepEqual(lines, ['[true,true,false]', 'redis', 'true 1000'])
  } finally {
    for (const c of clients) c.disconnect()
    if (saved === undefined) delete process.env.REDIS_URL
    else process.env.REDIS_URL = saved
    await server.stop()
  }
})

// A ```diff js block is a migration from a peer (express-rate-limit,
// @fastify/rate-limit): its old side (context and `-` lines) runs with the
// peer, its new side (context and `+` lines) with ratomic, and each prints
// the lines its `// shown` comments say.
const diffBlocks = () => [...fs.readFileSync(README, 'utf8').matchAll(/```diff js\n([\s\S]*?)```/g)].map((m) => m[1])

function diffSide(diff, sign) {
  const lines = []
  for (const line of diff.split('\n')) {
    if (line === '' || line[0] === ' ' || line[0] === sign) lines.push(line.slice(1))
    else if (line[0] !== '+' && line[0] !== '-') throw new Error(`not a line of a unified diff: ${JSON.stringify(line)}`)
  }
  return lines.join('\n')
}

// What one side prints, each line as console.log shows it.
async function printedAsync(code) {
  const lines = []
  const log = (...args) => lines.push(args.map((a) => (typeof a === 'string' ? a : require('node:util').inspect(a))).join(' '))
  await new Function('require', 'console', `return (async () => { ${code}\n })()`)(load, { log })
  return lines
}

test("the README's migrations from express-rate-limit and @fastify/rate-limit: one line, both sides print alike", async () => {
  const diffs = diffBlocks()
  const peers = diffs.map((d) => d.match(/^-.*require\('([^']+)'\)/m)?.[1])
  assert.deepEqual(peers, ['express-rate-limit', '@fastify/rate-limit'])
  for (const diff of diffs) {
    const changed = diff.split('\n').filter((l) => /^[-+]/.test(l))
    assert.equal(changed.length, 2, `one line changed:\n${changed.join('\n')}`)
    const shown = [...diff.matchAll(/console\.log\(.*\) \/\/ (.*)$/gm)].map((m) => m[1])
    const before = diffSide(diff, '-')
    const after = diffSide(diff, '+')
    assert.match(after, /require\('ratomic\//)
    assert.deepEqual(await printedAsync(before), shown, `the peer's side:\n${before}`)
    assert.deepEqual(await printedAsync(after), shown, `ratomic's side:\n${after}`)
  }
})

// The npm page (bindings-node/README.md): every ```js block, its printed
// lines as its comments say.
const npmBlocks = () => [...fs.readFileSync(NPM_README, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1].replace(/^ {2}/gm, ''))

function printed(code) {
  const lines = []
  const log = (...args) => lines.push(args.map((a) => (typeof a === 'string' ? a : require('node:util').inspect(a))).join(' '))
  new Function('require', 'console', code)(load, { log })
  return lines
}

test("the npm page's rate-string example runs", () => {
  const code = npmBlocks().find((c) => c.includes("new Limiter('10/second;1000/day')"))
  assert.ok(code, 'the npm README has the rate-string example')
  assert.deepEqual(printed(code), [
    'true 4',
    'TokenBucket { token bucket 5 per 1m, keys: 1 }',
    "true [ '10/second: 9 left', '1000/day: 999 left' ]",
    'FixedWindow { fixed window 100 per 1m, keys: 0 }',
  ])
})

test("the npm page's shared-file example runs", { skip: process.platform !== 'linux' && 'a shared file is Linux only' }, () => {
  const code = npmBlocks().find((c) => c.includes('sharedFile'))
  assert.ok(code, 'the npm README has the shared-file example')
  assert.deepEqual(printed(code), ['99'])
})

test('the npm page links nothing a package user cannot open', () => {
  const md = fs.readFileSync(NPM_README, 'utf8')
  const links = [...md.matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1])
  assert.ok(links.length > 0)
  for (const link of links) assert.match(link, /^https:\/\//, link)
  assert.doesNotMatch(md, /SPEC|§|\.\.\/shared/)
})
