'use strict'
// `sharedFile`: limiters in different processes sharing one file. Real
// processes (child_process.fork), real SIGKILLs, real files. (The npm
// page's node:cluster server runs in readme.test.js.)

const test = require('node:test')
const assert = require('node:assert/strict')
const { fork } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TokenBucket, FixedWindow, SlidingWindow, Limiter, Quotas, ManualClock } = require('..')

const linux = process.platform === 'linux'
const SLOW = 1 / 3600 // one token an hour: no refill during a test

function build (kind, file) {
  switch (kind) {
    case 'bucket': return new TokenBucket(50, SLOW, { maxKeys: 1000, sharedFile: file })
    case 'window': return new FixedWindow(50, '1h', { maxKeys: 1000, sharedFile: file })
    case 'multi': return new Limiter({ burst: '1000/s', slow: new TokenBucket(50, SLOW).rule }, { maxKeys: 1000, sharedFile: file })
  }
  throw new Error(kind)
}

// A child that holds the bucket on a file until told to exit (and keeps it
// referenced until then: a limiter the garbage collector frees lets go of
// the file).
if (process.env.RATOMIC_SHARED_HOLD) {
  const limiter = build('bucket', process.env.RATOMIC_SHARED_HOLD)
  limiter.allow('a')
  process.send('ready')
  process.on('message', () => process.exit(limiter.peek('a').allowed ? 0 : 1))
} else if (process.env.RATOMIC_SHARED_CHILD) {
  // A child: builds `kind` on `file`, waits for 'go', makes `calls` calls on
  // `keys` keys and reports each grant as it happens, then 'done'.
  const { kind, file, keys, calls } = JSON.parse(process.env.RATOMIC_SHARED_CHILD)
  const limiter = build(kind, file)
  // A grant is reported before the next call, so a kill loses at most one.
  // The pipe is a non-blocking socket: when the parent falls behind, a write
  // fails with EAGAIN (or writes part), and is retried until it is whole.
  const report = (line) => {
    const bytes = Buffer.from(line)
    for (let at = 0; at < bytes.length;) {
      try {
        at += fs.writeSync(1, bytes, at)
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e
      }
    }
  }
  process.on('message', () => {
    for (let n = 0; n < calls; n++) {
      const key = `k${(n * 7919 + process.pid) % keys}`
      if (limiter.allow(key).allowed) report(key + '\n')
    }
    process.exit(0)
  })
  process.send({ ready: true })
} else {
  const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-shm-'))

  function child (spec) {
    return fork(__filename, [], { env: { ...process.env, RATOMIC_SHARED_CHILD: JSON.stringify(spec) }, stdio: ['ignore', 'pipe', 'inherit', 'ipc'] })
  }

  // Runs children, starting them together; `onGrant(child, key)` sees each grant.
  function run (children, onGrant = () => {}) {
    return new Promise((resolve, reject) => {
      let ready = 0
      let ended = 0
      for (const c of children) {
        c.on('error', reject)
        c.on('message', (m) => {
          if (m.ready && ++ready === children.length) for (const d of children) d.send('go')
        })
        require('node:readline').createInterface({ input: c.stdout }).on('line', (key) => onGrant(c, key))
        // 'close': exited and its stdout read to the end. A child that was
        // not killed must have run to the end: a crash would lose grants.
        c.on('close', (code, signal) => {
          if (!c.killed && code !== 0) reject(new Error(`child ${c.pid} ended with ${signal || `exit code ${code}`}`))
          if (++ended === children.length) resolve()
        })
      }
    })
  }

  for (const kind of ['bucket', 'window', 'multi']) {
    test(`8 processes on one key of a shared ${kind} get exactly its limit`, { skip: !linux }, async () => {
      const file = path.join(tmp(), `${kind}.shm`)
      build(kind, file) // created once, before the race
      let total = 0
      await run(Array.from({ length: 8 }, () => child({ kind, file, keys: 1, calls: 200 })), () => { total++ })
      assert.equal(total, 50)
      assert.equal(build(kind, file).allow('k0').allowed, false)
    })
  }

  test('children SIGKILLed mid-traffic leave the file usable, nothing over-granted', { skip: !linux }, async () => {
    const file = path.join(tmp(), 'kill.shm')
    const keys = 20
    const granted = new Map()
    let kills = 0
    for (let round = 0; round < 4; round++) {
      const victims = [0, 1].map(() => child({ kind: 'bucket', file, keys, calls: 1e6 }))
      const survivor = child({ kind: 'bucket', file, keys, calls: 300 })
      await run([...victims, survivor], (c, key) => {
        granted.set(key, (granted.get(key) || 0) + 1)
        if (victims.includes(c) && c.exitCode === null && !c.killed) {
          c.kill('SIGKILL')
          kills++
        }
      })
    }
    for (const [k, n] of granted) assert.ok(n <= 50, `${k}: ${n}`)
    const limiter = build('bucket', file)
    for (let k = 0; k < keys; k++) {
      while (limiter.allow(`k${k}`).allowed) granted.set(`k${k}`, (granted.get(`k${k}`) || 0) + 1)
    }
    assert.equal(granted.size, keys)
    // Each kill may lose one grant made but not yet reported: never more.
    let total = 0
    for (const [k, n] of granted) {
      assert.ok(n <= 50, k)
      total += n
    }
    assert.ok(total <= 50 * keys && total + kills >= 50 * keys, `${total} granted, ${kills} kills`)
    assert.equal(limiter.gc(), 0)
    assert.equal(limiter.size, keys)
  })

  test('a file that does not fit is a clear error', { skip: !linux }, () => {
    const dir = tmp()
    const file = path.join(dir, 'rule.shm')
    const first = build('bucket', file) // in use while the others are refused
    assert.ok(first.allow('a').allowed)
    const invalid = (message) => ({ name: 'RangeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message })
    assert.throws(() => new TokenBucket(60, SLOW, { maxKeys: 1000, sharedFile: file }), invalid(/different rule/))
    assert.throws(() => build('window', file), invalid(/different rule/))
    const link = path.join(dir, 'link.shm')
    fs.symlinkSync(file, link)
    assert.throws(() => build('bucket', link), invalid(/symbolic link/))
    const junk = path.join(dir, 'junk.shm')
    fs.writeFileSync(junk, Buffer.alloc(8192, 7), { mode: 0o600 })
    assert.throws(() => build('bucket', junk), invalid(/not a ratomic/))
    const open = path.join(dir, 'open.shm')
    fs.copyFileSync(file, open)
    fs.chmodSync(open, 0o644)
    assert.throws(() => build('bucket', open), invalid(/other users/))
    assert.equal(fs.statSync(file).mode & 0o777, 0o600)
    assert.equal(first.peek('a').remaining, 48) // what would be left after one more
    assert.throws(() => new TokenBucket(5, 1, { sharedFile: 42 }), { name: 'TypeError', message: /sharedFile/ })
  })

  test('a shared limiter answers as one in process', { skip: !linux }, () => {
    // A shared file reads the host's monotonic clock (no other is
    // accepted), so both sides run on it, at rates no test lasts long
    // enough to refill: their answers agree in everything but the waits
    // (read microseconds apart).
    let seed = 7
    const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648 }
    const dir = tmp()
    const builders = [
      (o) => new TokenBucket(5, SLOW, { maxKeys: 64, ...o }),
      (o) => new SlidingWindow(5, '1h', { maxKeys: 64, ...o }),
      (o) => new Limiter({ a: '4/h', b: new FixedWindow(9, '1h').rule }, { maxKeys: 64, ...o })
    ]
    const seen = (d) => d === undefined
      ? d
      : [d.allowed, d.remaining, d.limit, (d.entries || []).map((x) => [x.name, x.allowed, x.remaining, x.limit])]
    builders.forEach((b, i) => {
      const local = b({})
      const shared = b({ sharedFile: path.join(dir, `parity-${i}.shm`) })
      for (let n = 0; n < 400; n++) {
        const key = `k${Math.floor(rand() * 4)}`
        const cost = Math.floor(rand() * 4)
        const op = rand()
        const [x, y] = op < 0.6
          ? [local.allow(key, cost), shared.allow(key, cost)]
          : op < 0.9 ? [local.peek(key, cost), shared.peek(key, cost)] : [local.reset(key), shared.reset(key)]
        assert.deepEqual(seen(y), seen(x), `${n}: ${key} ${cost}`)
      }
    })
  })

  test('a clock of its own is refused on a shared file', { skip: !linux }, () => {
    // Issue 35: a ManualClock with a shared file was accepted, and one
    // process's times then locked a key in the others' for 653 s.
    const file = path.join(tmp(), 'clock.shm')
    const refused = { name: 'RangeError', code: 'ERR_RATOMIC_INVALID_ARGUMENT', message: /monotonic clock/ }
    assert.throws(() => new TokenBucket(5, 1, { clock: new ManualClock(), sharedFile: file }), refused)
    assert.throws(() => new TokenBucket(5, 1, { clock: () => 0, sharedFile: file }), refused)
    assert.throws(() => new Limiter({ a: '5/min' }, { clock: new ManualClock(), sharedFile: file }), refused)
    assert.throws(() => new Quotas({ clock: new ManualClock(), sharedFile: file }), refused)
    assert.equal(fs.existsSync(file), false, 'a refused limiter makes no file')
    assert.ok(new TokenBucket(5, 1, { sharedFile: file }).allow('k').allowed)
  })

  test('a new limit takes the file once its old users have exited', { skip: !linux }, async () => {
    // Issue 36: changing a limit with an existing file was refused even with
    // no process using it, and a server's workers died of it in a loop.
    const file = path.join(tmp(), 'limits.shm')
    const old = fork(__filename, [], {
      env: { ...process.env, RATOMIC_SHARED_HOLD: file },
      stdio: ['ignore', 'pipe', 'inherit', 'ipc']
    })
    await new Promise((resolve) => old.once('message', resolve))
    assert.throws(() => new TokenBucket(60, SLOW, { maxKeys: 1000, sharedFile: file }), (e) => {
      for (const part of ['in use with a different rule', 'token bucket 50 per', 'token bucket 60 per', `rm -- '${file}'`]) {
        assert.ok(e.message.includes(part), `${part} missing from: ${e.message}`)
      }
      return e.code === 'ERR_RATOMIC_INVALID_ARGUMENT'
    })
    old.send('exit')
    await new Promise((resolve) => old.once('exit', resolve))
    const fresh = new TokenBucket(60, SLOW, { maxKeys: 1000, sharedFile: file })
    let n = 0
    for (let i = 0; i < 70; i++) if (fresh.allow('a').allowed) n++
    assert.equal(n, 60, 'made anew: key a is full')
  })

  test('Quotas share their buckets through a file', { skip: !linux }, () => {
    const file = path.join(tmp(), 'quotas.shm')
    const a = new Quotas({ maxKeys: 64, sharedFile: file })
    const b = new Quotas({ maxKeys: 64, sharedFile: file })
    let n = 0
    for (const l of [a, b, a, b, a]) if (l.allow('acme', '3/min').allowed) n++
    assert.equal(n, 3)
  })
}
