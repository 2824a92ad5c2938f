'use strict'
// ratomic/redis's leases against a real redis-server, through ioredis and
// node-redis: the option, calls answered from a lease, refunds into it,
// resets that leave other processes' leases alone, and the give-back on
// close() and when the event loop empties.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const crypto = require('node:crypto')
const path = require('node:path')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const { RedisTokenBucket, RedisFixedWindow, RedisLimiter } = require('../redis')
const { startRedis, SLOW_MACHINE_MS } = require('./redis-server')

// A process that should end at once is given this long before the test calls
// it a hang (not a speed requirement).
const HANG_BOUND_MS = 60_000

// 40 tokens, one an hour: nothing refills during a test. lease: 'auto' takes
// at most 40 / 8 = 5; a key's first lease is 2.
const FORTY = [40, 1 / 3600]

// Each call may wait SLOW_MACHINE_MS for Redis: with the 50 ms default a
// loaded machine's stall would be a timeout, and these tests check decisions.
const PATIENT = { timeoutMs: SLOW_MACHINE_MS }

let server
const opened = []

test.before(async () => {
  server = await startRedis()
})

test.after(async () => {
  for (const c of opened) {
    if (typeof c.pipeline === 'function') c.disconnect()
    else if (c.isOpen) await c.destroy()
  }
  await server.stop()
})

const CLIENTS = {
  ioredis: async () => new Redis({ port: server.port, host: '127.0.0.1' }),
  'node-redis': async () => {
    const c = createClient({ socket: { port: server.port, host: '127.0.0.1' } })
    await c.connect()
    return c
  },
}

async function client(kind) {
  const c = await CLIENTS[kind]()
  opened.push(c)
  return c
}

const prefix = () => `t-${crypto.randomUUID().slice(0, 12)}:`

test('the lease option is off, auto or a size; anything else is refused before any round trip', async () => {
  const c = await client('ioredis')
  assert.equal(new RedisTokenBucket('2/s', { client: c }).lease, null, 'off by default')
  assert.equal(new RedisTokenBucket('2/s', { client: c, lease: 'off' }).lease, null)
  assert.equal(new RedisTokenBucket(80, 10, { client: c, lease: 'auto' }).lease, 10)
  assert.equal(new RedisTokenBucket(80, 10, { client: c, lease: 3 }).lease, 3)
  assert.equal(new RedisLimiter({ a: '80/s', b: '16/min' }, { client: c, lease: 'auto' }).lease, 2, 'an eighth of the least')
  assert.equal(new RedisFixedWindow('5/s', { client: c, lease: 'auto' }).lease, null, 'auto: windows lease nothing')
  assert.throws(() => new RedisFixedWindow('5/s', { client: c, lease: 4 }), { code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /token bucket/ })
  assert.throws(() => new RedisTokenBucket('2/s', { client: c, lease: 'sometimes' }), {
    name: 'RangeError',
    message: /invalid lease: "sometimes" \(lease must be "off", "auto" or the most tokens/,
  })
  for (const bad of [0, 1.5, -1, NaN]) {
    assert.throws(() => new RedisTokenBucket('2/s', { client: c, lease: bad }), { name: 'RangeError', message: /invalid lease/ }, String(bad))
  }
  assert.throws(() => new RedisTokenBucket('2/s', { client: c, lease: true }), { name: 'TypeError', message: /lease must be "off", "auto"/ })
  assert.throws(() => new RedisTokenBucket('2/s', { client: c, lease: 'auto', leaseKeys: 0 }), { name: 'RangeError', message: /leaseKeys/ })
})

for (const kind of Object.keys(CLIENTS)) {
  test(`${kind}: a hot key is answered from its lease; close() gives the rest back`, async () => {
    const c = await client(kind)
    const p = prefix()
    const a = new RedisTokenBucket(...FORTY, { client: c, prefix: p, lease: 'auto', ...PATIENT })
    const other = new RedisTokenBucket(...FORTY, { client: c, prefix: p, ...PATIENT }) // no lease: sees the fleet's state
    const remaining = async () => (await other.peek('k', 0)).remaining

    assert.equal((await a.allow('k')).source, 'redis', 'a key seen once takes no lease')
    assert.equal((await a.allow('k')).source, 'redis')
    assert.equal(a.leasesHeld, 1)
    assert.equal(await remaining(), 36, 'two granted, two more leased to this process')
    const d = await a.allow('k')
    assert.equal(d.source, 'lease')
    assert.equal(d.allowed, true)
    assert.equal(d.remaining, 37, 'what the fleet had at the lease\'s round trip plus what the lease still holds')
    await a.refund('k', 1) // into the lease: no round trip
    assert.equal(await remaining(), 36)
    await other.refund('k', 5)
    assert.equal(await remaining(), 36, 'a refund elsewhere stops at the lease\'s end')
    await other.reset('k')
    assert.equal(await remaining(), 36, 'a reset keeps what the leases hold')
    assert.equal(await a.close(), 1, 'one limit took the lease\'s unused tokens back')
    assert.equal(await remaining(), 38, 'the two unused tokens (one refunded into the lease)')
    assert.equal(a.leasesHeld, 0)
    assert.equal(await a.close(), 0, 'nothing held: nothing sent')
  })
}

// A child process holding a lease when its event loop empties.
const CHILD = `
const { createClient } = require('redis')
const { Redis } = require('ioredis')
const { RedisTokenBucket } = require(${JSON.stringify(path.join(__dirname, '..', 'redis.js'))})
const [port, prefix, how] = process.argv.slice(1)
;(async () => {
  const client = how === 'ioredis-closed' ? new Redis({ port: +port, host: '127.0.0.1' }) : createClient({ socket: { port: +port, host: '127.0.0.1' } })
  if (how !== 'ioredis-closed') await client.connect()
  const a = new RedisTokenBucket(40, 1 / 3600, { client, prefix, lease: 'auto', timeoutMs: ${SLOW_MACHINE_MS} })
  await a.allow('k')
  await a.allow('k')
  console.log(a.leasesHeld)
  if (how === 'ioredis-closed') client.disconnect() // its leases cannot go back: they expire
  else client.unref() // the client no longer keeps the loop alive: it empties with the lease held
})()
`

function child(how, p) {
  const out = spawnSync(process.execPath, ['-e', CHILD, String(server.port), p, how], { encoding: 'utf8', timeout: HANG_BOUND_MS })
  assert.equal(out.status, 0, out.stderr)
  return out.stdout.trim()
}

test('when the event loop empties, a limiter still holding leases gives them back', async () => {
  const p = prefix()
  assert.equal(child('node-redis-unref', p), '1')
  const other = new RedisTokenBucket(...FORTY, { client: await client('ioredis'), prefix: p, ...PATIENT })
  assert.equal((await other.peek('k', 0)).remaining, 38, 'two granted; the lease came back as the process ended')
})

test('a process whose client is closed ends at once; its lease waits for its time to pass', async () => {
  const p = prefix()
  assert.equal(child('ioredis-closed', p), '1', 'the process ended (nothing kept it alive)')
  const other = new RedisTokenBucket(...FORTY, { client: await client('ioredis'), prefix: p, ...PATIENT })
  assert.equal((await other.peek('k', 0)).remaining, 36)
})
