'use strict'
// The 'error' listener ratomic/postgres and ratomic/redis add to a user's
// client that has none (client-errors.js): one warning at once, then at
// most one a minute per kind of client, saying how many it did not write
// since — on an injected clock, so the minute is the test's, not the
// machine's. The outage tests drive it through real servers.
const test = require('node:test')
const assert = require('node:assert/strict')
const { EventEmitter } = require('node:events')
const { clientErrorWatcher, WARN_INTERVAL_MS } = require('../client-errors')

const CODE = 'RATOMIC_TEST_CLIENT_ERROR'

// The warnings with CODE that process.emitWarning writes (on a later tick).
async function warningsOf(run) {
  const seen = []
  const listener = (w) => w.code === CODE && seen.push(w.message)
  process.on('warning', listener)
  try {
    await run()
    await new Promise((r) => setImmediate(r))
    await new Promise((r) => setImmediate(r))
  } finally {
    process.off('warning', listener)
  }
  return seen
}

test('one warning at once, then at most one a minute per kind, counting the ones not written', async () => {
  let t = 1_000
  const watch = clientErrorWatcher(CODE, (kind, what, more) => `${kind}: ${what}${more}`, () => t)
  const pool = new EventEmitter()
  const other = new EventEmitter()
  watch(pool, 'pool')
  watch(other, 'client')
  const at = (ms, client, message) => {
    t = ms
    client.emit('error', new Error(message))
  }
  const got = await warningsOf(async () => {
    at(1_000, pool, 'a')
    at(2_000, pool, 'b')
    at(1_000 + WARN_INTERVAL_MS - 1, pool, 'c')
    at(1_000 + WARN_INTERVAL_MS - 1, other, 'x') // another kind: its own minute
    at(1_000 + WARN_INTERVAL_MS, pool, 'd')
    at(1_000 + WARN_INTERVAL_MS + 1, pool, 'e')
    at(1_000 + 2 * WARN_INTERVAL_MS + 1, pool, 'f')
    at(1_000 + 3 * WARN_INTERVAL_MS + 1, pool, 'g')
  })
  assert.deepEqual(got, [
    'pool: a',
    'client: x',
    'pool: d (2 more since the last warning)',
    'pool: f (1 more since the last warning)',
    'pool: g',
  ])
})

test("a listener of the user's, before or after, silences it; a client is watched once", async () => {
  const t = 0
  const watch = clientErrorWatcher(CODE, (kind, what) => `${kind}: ${what}`, () => t)
  const before = new EventEmitter()
  const theirs = []
  before.on('error', (e) => theirs.push(e.message))
  watch(before, 'pool')
  assert.equal(before.listenerCount('error'), 1, "none added beside the user's")
  const after = new EventEmitter()
  watch(after, 'pool')
  watch(after, 'pool')
  assert.equal(after.listenerCount('error'), 1, 'one listener, however often it is watched')
  after.on('error', (e) => theirs.push(e.message))
  const got = await warningsOf(async () => {
    before.emit('error', new Error('one'))
    after.emit('error', new Error('two'))
  })
  assert.deepEqual(got, [])
  assert.deepEqual(theirs, ['one', 'two'])
})
