'use strict'
// A real redis-server for the tests: a free 127.0.0.1 port, no persistence,
// stopped by the test that started it (run-tests.sh installs redis-server
// with apt, as the Rust, C and Python test scripts do).
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

// Resolves once the server answers PING with PONG.
function pong(port) {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1')
    let got = ''
    const done = (ok) => {
      c.destroy()
      resolve(ok)
    }
    c.once('error', () => done(false))
    c.on('data', (b) => {
      got += b
      if (got.includes('\r\n')) done(got.startsWith('+PONG'))
    })
    c.once('connect', () => c.write('PING\r\n'))
  })
}

/** Starts one redis-server; `stop()` kills it (after SIGCONT, should a test have frozen it). */
async function startRedis() {
  if (spawnSync('redis-server', ['--version']).status !== 0) {
    throw new Error('redis-server is not installed (bindings-node/run-tests.sh installs it with apt)')
  }
  const port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-redis-'))
  const proc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
    { stdio: 'ignore' }
  )
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  for (let i = 0; i < 500 && proc.exitCode === null; i++) {
    if (await pong(port)) {
      return {
        port,
        proc,
        url: `redis://127.0.0.1:${port}`,
        async stop() {
          if (proc.exitCode === null && proc.signalCode === null) {
            proc.kill('SIGCONT')
            proc.kill('SIGKILL')
            await exited
          }
          fs.rmSync(dir, { recursive: true, force: true })
        },
      }
    }
    await new Promise((r) => setTimeout(r, 10))
  }
  proc.kill('SIGKILL')
  throw new Error(`redis-server on port ${port} did not start`)
}

// A Redis call's deadline for tests that run many requests at once on a
// loaded CI machine: the decisions, not the 50 ms default timeout, are what
// those tests check.
const SLOW_MACHINE_MS = 10_000

module.exports = { startRedis, SLOW_MACHINE_MS }
