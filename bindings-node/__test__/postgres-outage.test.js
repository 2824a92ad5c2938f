'use strict'
// ratomic/postgres when the server goes away under a limiter: a pg Pool
// emits 'error' when an idle connection of its fails (a server restart,
// pg_terminate_backend, a cut network), a Client when its connection fails
// between queries, and an EventEmitter's 'error' with no listener ends the
// process. Each scenario runs in a child process (postgres-outage-child.js)
// so a crash is seen as that process's exit; its connections are found by
// their application_name and terminated from another connection, or the
// whole server (a cluster of this test's own) is stopped at once and
// started again on the same port.
const test = require('node:test')
const { spawnChild } = require('./outage-harness')
const assert = require('node:assert/strict')
const { Pool } = require('pg')
const { PostgresTokenBucket, PostgresLimiter, migrate } = require('../postgres')
const { startPostgres } = require('./postgres-server.js')

const url = process.env.RATOMIC_POSTGRES_URL
assert.ok(url, 'RATOMIC_POSTGRES_URL: run these tests with bindings-node/run-tests.sh (it starts a server)')
const admin = new Pool({ connectionString: url, max: 1 })
test.after(() => admin.end())
test.before(() => migrate(admin))

const CODE = 'RATOMIC_POSTGRES_CLIENT_ERROR'

// The child, and `send(command)`: its JSON reply, or a rejection saying how
// it exited (its exit code, its stderr) if it exits first.
function child(kind, childUrl) {
  return spawnChild('postgres-outage-child.js', { URL: childUrl, KIND: kind })
}

// Terminates every backend of `app` from the admin connection; how many.
async function terminate(app) {
  const { rows } = await admin.query(
    // In the select list, never in WHERE: the planner may call a function
    // there on rows the other condition rejects (the admin's own backend).
    'SELECT count(*) FILTER (WHERE t)::int AS n FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = $1) s',
    [app]
  )
  return rows[0].n
}

test('a Pool whose idle connection is terminated: the process lives on, warned, and the next call reaches PostgreSQL', async () => {
  const c = child('pool', url)
  try {
    assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
    assert.equal(await terminate(c.app), 1, 'the Pool held one idle connection')
    await c.send('dropped')
    assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
    const { warnings, userErrors } = await c.send('reports')
    assert.deepEqual(userErrors, [])
    assert.ok(warnings.length >= 1, 'the failure is reported')
    assert.equal(warnings[0].code, CODE)
    assert.match(warnings[0].message, /terminating connection due to administrator command/)
    assert.match(warnings[0].message, /pool\.on\('error'/)
    await c.send('quit')
    assert.deepEqual(await c.exited, { code: 0, signal: null })
  } finally {
    c.proc.kill('SIGKILL')
  }
})

test('a Client whose connection is terminated: the process lives on; calls answer by onError from then on (a Client does not reconnect)', async () => {
  const c = child('client', url)
  try {
    assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
    assert.equal(await terminate(c.app), 1)
    await c.send('dropped')
    assert.deepEqual(await c.send('allow'), { allowed: false, source: 'policy' })
    assert.deepEqual(await c.send('allow'), { allowed: false, source: 'policy' })
    const { warnings } = await c.send('reports')
    assert.ok(warnings.length >= 1)
    assert.equal(warnings[0].code, CODE)
    assert.match(warnings[0].message, /does not reconnect.*pg Pool/s)
    await c.send('quit')
    assert.deepEqual(await c.exited, { code: 0, signal: null })
  } finally {
    c.proc.kill('SIGKILL')
  }
})

for (const kind of ['pool-listener', 'pool-listener-later']) {
  const when = kind === 'pool-listener' ? 'before' : 'after'
  test(`a listener the user added to the Pool ${when} building the limiter gets the error, and ratomic says nothing`, async () => {
    const c = child(kind, url)
    try {
      assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
      assert.equal(await terminate(c.app), 1)
      await c.send('dropped')
      assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
      const { warnings, userErrors } = await c.send('reports')
      assert.deepEqual(warnings, [])
      assert.ok(userErrors.length >= 1)
      assert.match(userErrors[0], /terminating connection due to administrator command/)
      await c.send('quit')
      assert.deepEqual(await c.exited, { code: 0, signal: null })
    } finally {
      c.proc.kill('SIGKILL')
    }
  })
}

test('the server stopped at once (pg_ctl stop -m immediate) and started again: calls meanwhile answer by onError, then reach PostgreSQL', async () => {
  const server = await startPostgres()
  const own = new Pool({ connectionString: server.url, max: 1 })
  let c
  try {
    await migrate(own)
    await own.end()
    c = child('pool', server.url)
    assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
    server.stop()
    await c.send('dropped')
    for (let i = 0; i < 3; i++) assert.deepEqual(await c.send('allow'), { allowed: false, source: 'policy' })
    server.start()
    assert.deepEqual(await c.send('allow'), { allowed: true, source: 'postgres' })
    const { warnings } = await c.send('reports')
    assert.ok(warnings.length >= 1)
    assert.equal(warnings[0].code, CODE)
    await c.send('quit')
    assert.deepEqual(await c.exited, { code: 0, signal: null })
  } finally {
    if (c !== undefined) c.proc.kill('SIGKILL')
    server.remove()
  }
})

test('one listener per client, added once a limiter is built (not by a constructor that throws), none beside the user\'s', async () => {
  const pool = new Pool({ connectionString: url })
  const theirs = new Pool({ connectionString: url })
  try {
    assert.throws(() => new PostgresTokenBucket(5, 1, { client: pool, maxInFlight: 0 }), TypeError)
    assert.equal(pool.listenerCount('error'), 0, 'bad input changes nothing')
    new PostgresTokenBucket(5, 1, { client: pool })
    new PostgresLimiter({ burst: '2/s' }, { client: pool })
    assert.equal(pool.listenerCount('error'), 1)
    const mine = () => {}
    theirs.on('error', mine)
    new PostgresTokenBucket(5, 1, { client: theirs })
    assert.deepEqual(theirs.listeners('error'), [mine])
  } finally {
    await pool.end()
    await theirs.end()
  }
})

// Polls `ready` (a state another session reaches) for at most a minute.
async function waitUntil(what, ready) {
  for (let i = 0; i < 1200; i++) {
    if (await ready()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  assert.fail(`never: ${what}`)
}

test("calls waiting behind a statement whose connection dies are answered by the breaker it opened, not sent", async () => {
  // One statement out (maxInFlight 1), blocked on a row lock another
  // session holds; three allows wait to share the next. Its connection dies
  // (pg_terminate_backend of that backend only), which opens the breaker
  // (breakerThreshold 1): the three are answered by the policy then, as a
  // call made then would be, instead of being sent (on a crashed server
  // each would wait out another timeout; here the Pool's other connection
  // would carry them and the lock is gone, so the server would grant them).
  const app = 'ratomic-breaker-' + Math.random().toString(16).slice(2, 10)
  const pool = new Pool({ connectionString: url, max: 2, application_name: app })
  pool.on('error', () => {}) // the terminated connection's: expected
  // The lock's own connection (admin's one is for watching).
  const lockPool = new Pool({ connectionString: url, max: 1 })
  const locker = await lockPool.connect()
  const waits = async () =>
    (await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [app])).rows[0].n
  try {
    const pg = new PostgresTokenBucket('100/h', { client: pool, prefix: app, onError: 'deny', breakerThreshold: 1, denyCache: 0, maxInFlight: 1 })
    assert.equal((await pg.allow('k')).source, 'postgres')
    await locker.query('BEGIN')
    await locker.query('SELECT 1 FROM ratomic_v1_state WHERE prefix = $1 FOR UPDATE', [app])
    const first = pg.allow('k')
    await waitUntil('the first statement waits for the lock', async () => (await waits()) === 1)
    const rest = [pg.allow('k'), pg.allow('k'), pg.allow('k')]
    const { rows } = await admin.query(
      "SELECT count(*) FILTER (WHERE t)::int AS n FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock') s",
      [app]
    )
    assert.equal(rows[0].n, 1)
    const d0 = await first
    await locker.query('ROLLBACK') // the lock goes: a statement sent now would be answered
    assert.deepEqual([d0.allowed, d0.source], [false, 'policy'])
    for (const d of await Promise.all(rest)) assert.deepEqual([d.allowed, d.source], [false, 'policy'])
    const check = new PostgresTokenBucket('100/h', { client: admin, prefix: app })
    assert.equal((await check.peek('k', 0)).remaining, 99, 'none of them reached the server')
  } finally {
    locker.release()
    await lockPool.end()
    await pool.end()
  }
})
