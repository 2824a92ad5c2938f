'use strict'
// Nothing user code can reach may crash the process (issue 11): no native
// handle on the public objects, no path to the native module through the
// package, and the memory native code writes decisions into cannot dangle.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const ratomic = require('..')

const DIR = path.join(__dirname, '..')

// Runs `code` in a child process (a crash must not take the test runner down).
function run(code) {
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', code], { encoding: 'utf8', timeout: 60_000 })
  return { status: r.status, signal: r.signal, out: r.stdout.trim(), err: r.stderr }
}

test('the package exports the public API only', () => {
  assert.deepEqual(Object.keys(ratomic).sort(), [
    'BaseLimiter', 'CoarseClock', 'DirectTokenBucket', 'FixedWindow', 'Limiter', 'ManualClock', 'PROBLEM_CONTENT_TYPE', 'Quotas', 'SlidingWindow', 'Stack', 'TokenBucket',
  ])
})

test('no limiter exposes a native handle', () => {
  const { TokenBucket, Limiter, Stack, Quotas, DirectTokenBucket } = ratomic
  const tb = new TokenBucket(1, 1)
  const l = new Limiter({ a: '1/s' })
  const d = new DirectTokenBucket(1, 1)
  const s = new Stack({ tb, l, d })
  for (const obj of [tb, l, l.select(['a']), s, new Quotas(), d]) {
    assert.deepEqual(Object.getOwnPropertyNames(obj), [])
    for (let p = Object.getPrototypeOf(obj); p !== Object.prototype; p = Object.getPrototypeOf(p)) {
      for (const name of Object.getOwnPropertyNames(p)) assert.ok(!name.startsWith('_'), `${p.constructor.name}.${name}`)
    }
    assert.equal(obj._native, undefined)
  }
})

test('the native module is not reachable through the package', () => {
  // Self-reference by name resolves through package.json's `exports`.
  assert.equal(require('ratomic'), ratomic)
  assert.throws(() => require('ratomic/index.js'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' })
  assert.throws(() => require('ratomic/src/hot.rs'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' })
})

// Issue 11's exploit: bind a function to a buffer, transfer the buffer away,
// call the function. It wrote into freed memory (a glibc abort).
test('the issue 11 exploit (transfer the decision buffer, then call) cannot crash', () => {
  const r = run(`
    const { TokenBucket } = require(${JSON.stringify(DIR)})
    const limiter = new TokenBucket(10, 1)
    let blocked = false
    try {
      const buf = new Float64Array(256)
      const allow = limiter._native.bindAllow(buf)
      structuredClone(buf.buffer, { transfer: [buf.buffer] })
      globalThis.gc()
      for (let i = 0; i < 1e5; i++) allow('k')
    } catch (e) {
      blocked = e instanceof TypeError
    }
    console.log(blocked && limiter.allow('k').allowed)
  `)
  assert.deepEqual([r.status, r.signal, r.out], [0, null, 'true'], r.err)
})

test('even the native module, loaded by its path, cannot be made to write into freed memory', () => {
  const r = run(`
    const native = require(${JSON.stringify(path.join(DIR, 'index.js'))})
    const { TokenBucket } = require(${JSON.stringify(DIR)})
    const tb = new TokenBucket(1e9, 1e9)
    const hot = native.hotPath()
    // Detach and transfer the buffer the hot functions write into, and collect it.
    const moved = structuredClone(hot.out.buffer, { transfer: [hot.out.buffer] })
    const again = native.hotPath()
    structuredClone(again.out.buffer, { transfer: [again.out.buffer] })
    globalThis.gc()
    const mine = new native.NativeKeyed({ algorithm: 'tokenBucket', capacity: 5, refillPerSec: 1 })
    for (let i = 0; i < 1e5; i++) { hot.allowKeyed(mine.id, 'k'); hot.opKeyed(1, mine.id, 'k', 1) }
    const direct = new native.NativeDirect({ algorithm: 'tokenBucket', capacity: 5, refillPerSec: 1 })
    for (let i = 0; i < 1e5; i++) { hot.allowDirect(direct.id); hot.opDirect(1, direct.id, 1) }
    let forged = 0
    for (const id of [mine.id + 1000, 4294967295, -1, 0.5, NaN]) {
      try { hot.allowKeyed(id, 'k') } catch (e) { forged++ }
      try { hot.allowDirect(id) } catch (e) { forged++ }
      try { hot.opDirect(3, id, 0) } catch (e) { forged++ }
    }
    // The public API keeps working: its own view of the buffer was not touched.
    const d = tb.allow('k')
    console.log(moved.byteLength > 0, forged, d.allowed, d.limit)
  `)
  assert.deepEqual([r.status, r.signal, r.out], [0, null, 'true 15 true 1000000000'], r.err)
})

test('a worker thread ending leaves the other threads\' limiters working', async () => {
  const { Worker } = require('node:worker_threads')
  for (let i = 0; i < 4; i++) {
    const w = new Worker(`
      const { TokenBucket } = require(${JSON.stringify(DIR)})
      const tb = new TokenBucket(3, 1)
      for (let i = 0; i < 1000; i++) tb.allow('k' + (i % 10))
      require('node:worker_threads').parentPort.postMessage(tb.allow('k0').allowed)
    `, { eval: true })
    assert.equal(await new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) }), false)
    await w.terminate()
  }
  const tb = new ratomic.TokenBucket(2, 1)
  assert.equal(tb.allow('k').remaining, 1)
})
