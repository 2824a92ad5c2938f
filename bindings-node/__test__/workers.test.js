'use strict'
// One process-wide native limiter shared by every worker thread.
const test = require('node:test')
const assert = require('node:assert/strict')
const { Worker } = require('node:worker_threads')
const path = require('node:path')
const { TokenBucket, Limiter, DirectTokenBucket } = require('..')

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads')
const { TokenBucket, FixedWindow, DirectTokenBucket } = require(${JSON.stringify(path.join(__dirname, '..'))})
const { name, kind, capacity, calls } = workerData
// A refill of one token per 1000 s: nothing refills during the test.
const limiter = kind === 'tokenBucket' ? TokenBucket.shared(name, capacity, 1e-3)
  : kind === 'direct' ? DirectTokenBucket.shared(name, capacity, 1e-3)
  : FixedWindow.shared(name, capacity, '1d')
parentPort.postMessage('ready')
parentPort.once('message', () => {
  let granted = 0
  for (let i = 0; i < calls; i++) if ((kind === 'direct' ? limiter.allow() : limiter.allow('hot')).allowed) granted++
  parentPort.postMessage(granted)
})
`

async function hammer(name, kind, capacity, workers, calls) {
  const ws = Array.from({ length: workers }, () => new Worker(WORKER, { eval: true, workerData: { name, kind, capacity, calls } }))
  const ready = ws.map((w) => new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) }))
  await Promise.all(ready)
  const done = ws.map((w) => new Promise((resolve, reject) => { w.once('message', resolve); w.once('error', reject) }))
  for (const w of ws) w.postMessage('go') // start together so the calls really race
  const granted = await Promise.all(done)
  await Promise.all(ws.map((w) => w.terminate()))
  return granted
}

test('four workers hammering one shared token bucket key are granted exactly capacity', async () => {
  const capacity = 10_000
  const granted = await hammer('workers-tb', 'tokenBucket', capacity, 4, 20_000)
  assert.equal(granted.reduce((a, b) => a + b, 0), capacity, `per worker: ${granted}`)
  // The main thread sees the same limiter: the key is empty here too.
  assert.equal(TokenBucket.shared('workers-tb', capacity, 1e-3).allow('hot').allowed, false)
})

test('four workers share a fixed window too', async () => {
  const granted = await hammer('workers-fw', 'fixedWindow', 5_000, 4, 10_000)
  assert.equal(granted.reduce((a, b) => a + b, 0), 5_000)
})

test('four workers share one DirectTokenBucket: a global limit across threads', async () => {
  const granted = await hammer('workers-direct', 'direct', 5_000, 4, 10_000)
  assert.equal(granted.reduce((a, b) => a + b, 0), 5_000, `per worker: ${granted}`)
  assert.equal(DirectTokenBucket.shared('workers-direct', 5_000, 1e-3).allow().allowed, false, 'the main thread sees the same bucket')
})

test('a shared Limiter is one limiter', () => {
  const a = Limiter.shared('workers-multi', { burst: '2/min' })
  const b = Limiter.shared('workers-multi', { burst: '2/min' })
  a.allow('k')
  assert.equal(b.allow('k').remaining, 0)
  assert.deepEqual(b.allow('k').deniedBy, ['burst'])
})
