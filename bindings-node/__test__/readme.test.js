'use strict'
// The READMEs' Node examples run as written: the project README's ```js
// blocks and the npm page's (bindings-node/README.md), each as a file run
// by `node` (what a user who pastes it does), and the cluster server under
// node:cluster with its four workers. The tests below that check printed
// lines also run the blocks in this process, with console.log captured.
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
const { execFile, spawn } = require('node:child_process')
const http = require('node:http')
const os = require('node:os')

const INSTALLED = process.env.RATOMIC_INSTALLED
const fromProject = INSTALLED ? createRequire(path.join(INSTALLED, 'package.json')) : require
const load = (name) => (name === 'ratomic' || name.startsWith('ratomic/') ? fromProject(name) : require(name))
const README = path.join(__dirname, '..', '..', 'README.md')
const NPM_README = path.join(__dirname, '..', 'README.md')

// Every ```js block of a README; a block inside a list item loses its indent.
function jsBlocks(readme) {
  return [...fs.readFileSync(readme, 'utf8').matchAll(/^( *)```js\n([\s\S]*?)^ *```$/gm)].map(([, indent, code]) =>
    code.replace(new RegExp(`^ {${indent.length}}`, 'gm'), ''),
  )
}
const npmBlocks = () => jsBlocks(NPM_README)

// The block as a file in a directory of its own, where `require('ratomic')`
// finds this package (or, with RATOMIC_INSTALLED, the installed one) in a
// node_modules, as in a user's project, and other packages (express,
// ioredis) come from this package's devDependencies through NODE_PATH.
function scratchFile(code, extraEnv = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-readme-'))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  const ratomic = INSTALLED ? path.join(INSTALLED, 'node_modules', 'ratomic') : path.join(__dirname, '..')
  fs.symlinkSync(ratomic, path.join(dir, 'node_modules', 'ratomic'), 'dir')
  const file = path.join(dir, 'example.js')
  fs.writeFileSync(file, code)
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
  const env = { ...process.env, NODE_PATH: path.join(__dirname, '..', 'node_modules'), ...extraEnv }
  return { file, env }
}

// Runs the block with `node example.js`; rejects, with its output, unless it exits 0.
function runFile(code, extraEnv) {
  const { file, env } = scratchFile(code, extraEnv)
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [file], { env, timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n--- the block:\n${code}\n--- stdout:\n${stdout}\n--- stderr:\n${stderr}`))
      else resolve({ stdout, stderr })
    })
  })
}

// What the block's comments say it prints: `console.log(...) // shown`.
const commentedOutput = (code) => [...code.matchAll(/console\.log\(.*\) \/\/ (.*)$/gm)].map((m) => m[1])

// The files named *.shm each process of a session has mapped, by pid.
function mappedFiles(session) {
  const found = new Map()
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]) !== session) continue
      const files = fs.readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n').filter((l) => l.endsWith('.shm')).map((l) => l.split(/\s+/).slice(5).join(' '))
      if (files.length > 0) found.set(Number(pid), [...new Set(files)])
    } catch {
      // gone meanwhile
    }
  }
  return found
}

// One GET on a connection of its own: [status, body].
function get(port) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => (body += c))
      res.on('end', () => resolve([res.statusCode, body]))
    }).on('error', reject)
  })
}

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

test("the README's Redis example runs as written, as a file, against a real server", async () => {
  const { startRedis } = require('./redis-server')
  const code = jsBlocks(README).find((c) => c.includes("require('ratomic/redis')"))
  assert.ok(code, 'the README has a Redis example')
  const server = await startRedis()
  try {
    const { stdout } = await runFile(code, { REDIS_URL: server.url })
    assert.deepEqual(stdout.trimEnd().split('\n'), commentedOutput(code))
    assert.deepEqual(commentedOutput(code), ['[ true, true, false ]', 'redis', 'true 1000'])
  } finally {
    await server.stop()
  }
})

test('every README js block that ends by itself runs as written, as a file (CommonJS, as `node file.js` runs it)', async () => {
  const { startRedis } = require('./redis-server')
  const server = await startRedis()
  try {
    const blocks = [...jsBlocks(README), ...jsBlocks(NPM_README)].filter((c) => !c.includes('cluster.fork()'))
    assert.ok(blocks.length >= 6, `${blocks.length} blocks`)
    for (const code of blocks) await runFile(code, { REDIS_URL: server.url })
  } finally {
    await server.stop()
  }
})

// A ```diff js block is a migration from a peer (express-rate-limit,
// @fastify/rate-limit): its old side (context and `-` lines) runs with the
// peer, its new side (context and `+` lines) with ratomic, each as a file,
// and each prints the lines its `// shown` comments say.
const diffBlocks = () => [...fs.readFileSync(README, 'utf8').matchAll(/^```diff js\n([\s\S]*?)^```$/gm)].map((m) => m[1])

function diffSide(diff, sign) {
  const lines = []
  for (const line of diff.split('\n')) {
    if (line === '' || line[0] === ' ' || line[0] === sign) lines.push(line.slice(1))
    else if (line[0] !== '+' && line[0] !== '-') throw new Error(`not a line of a unified diff: ${JSON.stringify(line)}`)
  }
  return lines.join('\n')
}

test("the README's migrations from express-rate-limit and @fastify/rate-limit: one line, both sides run as files and print alike", async () => {
  const diffs = diffBlocks()
  const peers = diffs.map((d) => d.match(/^-.*require\('([^']+)'\)/m)?.[1])
  assert.deepEqual(peers, ['express-rate-limit', '@fastify/rate-limit'])
  for (const diff of diffs) {
    const changed = diff.split('\n').filter((l) => /^[-+]/.test(l))
    assert.equal(changed.length, 2, `one line changed:\n${changed.join('\n')}`)
    const shown = commentedOutput(diff)
    assert.ok(shown.length >= 2, diff)
    const before = diffSide(diff, '-')
    const after = diffSide(diff, '+')
    assert.match(after, /require\('ratomic\//)
    assert.deepEqual((await runFile(before)).stdout.trimEnd().split('\n'), shown, `the peer's side:\n${before}`)
    assert.deepEqual((await runFile(after)).stdout.trimEnd().split('\n'), shown, `ratomic's side:\n${after}`)
  }
})

// The npm page (bindings-node/README.md): every ```js block, its printed
// lines as its comments say.

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

// The npm page's cluster server, as written, under node:cluster with its
// four workers: one client's 30 requests to its 5-per-minute limit, exactly
// 5 pass, and the four workers have one file mapped (with process.pid in
// the path: four files, 20 pass).
test("the npm page's cluster example shares one limit across its four workers", { skip: process.platform !== 'linux' && 'a shared file is Linux only' }, async () => {
  const code = npmBlocks().find((c) => c.includes('cluster.fork()'))
  assert.ok(code, 'the npm README has the cluster example')
  const runtime = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-readme-runtime-'))
  fs.chmodSync(runtime, 0o700)
  const { file, env } = scratchFile(code, { XDG_RUNTIME_DIR: runtime, PORT: '0' })
  const server = spawn(process.execPath, [file], { env, stdio: ['ignore', 'pipe', 'inherit'], detached: true })
  try {
    const port = await new Promise((resolve, reject) => {
      let out = ''
      server.stdout.on('data', (chunk) => {
        out += chunk
        const listening = [...out.matchAll(/^worker \d+ listening on port (\d+)$/gm)]
        if (listening.length === 4) resolve(Number(listening[0][1]))
      })
      server.on('exit', (code) => reject(new Error(`the example exited (${code}): ${out}`)))
    })
    const workers = mappedFiles(server.pid)
    assert.equal(workers.size, 4, `four workers map a file: ${JSON.stringify([...workers])}`)
    const answers = []
    for (let i = 0; i < 30; i++) answers.push(await get(port))
    const passed = answers.filter(([status]) => status === 200)
    assert.deepEqual([passed.length, answers.filter(([status]) => status === 429).length], [5, 25], JSON.stringify(answers))
    assert.deepEqual(new Set([...workers.values()].flat()).size, 1, `one file: ${JSON.stringify([...workers])}`)
    // Round robin: the five that passed were answered by more than one worker.
    assert.ok(new Set(passed.map(([, body]) => body)).size > 1, JSON.stringify(passed))
  } finally {
    process.kill(-server.pid, 'SIGKILL')
    fs.rmSync(runtime, { recursive: true, force: true })
  }
})

test('the npm page links nothing a package user cannot open', () => {
  const md = fs.readFileSync(NPM_README, 'utf8')
  const links = [...md.matchAll(/\]\(([^)]+)\)/g)].map((m) => m[1])
  assert.ok(links.length > 0)
  for (const link of links) assert.match(link, /^https:\/\//, link)
  assert.doesNotMatch(md, /SPEC|§|\.\.\/shared/)
})
