'use strict'
// ratomic/redis when the server goes away under a limiter: a node-redis
// client emits 'error' when its connection fails (and at each failed
// reconnect), and an EventEmitter's 'error' with no listener ends the
// process; ioredis only logs one nobody listens to. Each scenario runs in a
// child process (redis-outage-child.js) so a crash is seen as that
// process's exit; its connection is killed from another connection
// (CLIENT KILL), or the whole server (one of this test's own) is killed
// with SIGKILL and started again on the same port.
const test = require('node:test')
const { spawnChild } = require('./outage-harness')
const assert = require('node:assert/strict')
const { createClient } = require('redis')
const { Redis } = require('ioredis')
const { RedisTokenBucket, RedisLimiter } = require('../redis')
const { startRedis } = require('./redis-server')

const CODE = 'RATOMIC_REDIS_CLIENT_ERROR'

// The child, and `send(command)`: its JSON reply, or a rejection saying how
// it exited (its exit code, its stderr) if it exits first.
function child(kind, port) {
  return spawnChild('redis-outage-child.js', { PORT: String(port), KIND: kind })
}

// Kills the child's connection (found by its name) from another one.
async function killConnection(port, app) {
  const admin = createClient({ url: `redis://127.0.0.1:${port}` })
  admin.on('error', () => {})
  await admin.connect()
  try {
    assert.equal(await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes']), 1, `one connection: ${app}'s`)
  } finally {
    admin.destroy()
  }
}

const ok = { allowed: true, source: 'redis' }

// The child's connection killed: the process lives on and the next call
// reaches Redis; `check` is given what the child saw (its warnings, and
// the errors its own listener got, if it added one).
async function afterAKilledConnection(kind, check) {
  const server = await startRedis()
  const c = child(kind, server.port)
  try {
    assert.deepEqual(await c.send('allow'), ok)
    await killConnection(server.port, c.app)
    await c.send('dropped')
    await c.send('ready')
    assert.deepEqual(await c.send('allow'), ok)
    check(await c.send('reports'))
    await c.send('quit')
    assert.deepEqual(await c.exited, { code: 0, signal: null })
  } finally {
    c.proc.kill('SIGKILL')
    await server.stop()
  }
}

// node-redis's 'error' (a pool passes its clients' on) is a warning, not a
// crash; ioredis only logs it.
function reported(kind) {
  return ({ warnings, userErrors }) => {
    assert.deepEqual(userErrors, [])
    if (kind === 'ioredis') return
    assert.ok(warnings.length >= 1, 'the failure is reported')
    assert.equal(warnings[0].code, CODE)
    assert.match(warnings[0].message, /Socket closed unexpectedly/)
    assert.match(warnings[0].message, /client\.on\('error'/)
  }
}

for (const kind of ['node-redis', 'ioredis']) {
  test(`${kind}: the client's connection killed (CLIENT KILL): the process lives on and the next call reaches Redis`, () =>
    afterAKilledConnection(kind, reported(kind)))

  test(`${kind}: redis-server killed (SIGKILL) and started again on its port: calls meanwhile answer by onError, then reach Redis`, async () => {
    let server = await startRedis()
    const port = server.port
    const c = child(kind, port)
    try {
      assert.deepEqual(await c.send('allow'), ok)
      await server.stop()
      await c.send('dropped')
      for (let i = 0; i < 2; i++) assert.deepEqual(await c.send('allowWhileDown'), { allowed: false, source: 'policy' })
      server = await startRedis(port)
      await c.send('ready')
      assert.deepEqual(await c.send('allow'), ok)
      const { warnings } = await c.send('reports')
      if (kind === 'node-redis') {
        assert.ok(warnings.length >= 1)
        assert.equal(warnings[0].code, CODE)
        assert.ok(warnings.length <= 2, `at most one a minute (and one for a kind not seen yet): ${JSON.stringify(warnings)}`)
      }
      await c.send('quit')
      assert.deepEqual(await c.exited, { code: 0, signal: null })
    } finally {
      c.proc.kill('SIGKILL')
      await server.stop()
    }
  })
}

test("node-redis createClientPool: it passes on its connection's 'error'; the process lives on and the next call reaches Redis", () =>
  afterAKilledConnection('node-redis-pool', reported('node-redis-pool')))

for (const kind of ['node-redis-listener', 'node-redis-listener-later']) {
  const when = kind === 'node-redis-listener' ? 'before' : 'after'
  test(`a listener the user added to the node-redis client ${when} building the limiter gets the error, and ratomic says nothing`, () =>
    afterAKilledConnection(kind, ({ warnings, userErrors }) => {
      assert.deepEqual(warnings, [])
      assert.ok(userErrors.length >= 1)
      assert.match(userErrors[0], /Socket closed unexpectedly/)
    }))
}

test("one listener per node-redis client, added once a limiter is built (not by a constructor that throws), none beside the user's, none on ioredis", () => {
  const client = createClient()
  const theirs = createClient()
  const io = new Redis({ lazyConnect: true })
  assert.throws(() => new RedisTokenBucket(5, 1, { client, timeoutMs: 0 }), RangeError)
  assert.equal(client.listenerCount('error'), 0, 'bad input changes nothing')
  new RedisTokenBucket(5, 1, { client })
  new RedisLimiter({ burst: '2/s' }, { client })
  assert.equal(client.listenerCount('error'), 1)
  const mine = () => {}
  theirs.on('error', mine)
  new RedisTokenBucket(5, 1, { client: theirs })
  assert.deepEqual(theirs.listeners('error'), [mine])
  // ioredis only logs an 'error' nobody listens to: left as it is.
  new RedisTokenBucket(5, 1, { client: io })
  assert.equal(io.listenerCount('error'), 0)
})
