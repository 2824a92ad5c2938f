'use strict'
// A real redis-server for the tests: a free 127.0.0.1 port, no persistence,
// stopped by the test that started it (run-tests.sh installs redis-server
// with apt, as the Rust, C and Python test scripts do).
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')

// A free 127.0.0.1 port below the kernel's ephemeral range, as
// scripts/free-port.sh picks them: a port in that range can be taken as the
// local end of any outgoing connection (a test client's) between this check
// and redis-server's bind, which then fails.
async function freePort() {
  let [low, high] = [32768, 60999]
  try {
    ;[low, high] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
  } catch {}
  const pick = () => (low - 10000 >= 1000 ? 10000 + Math.floor(Math.random() * (low - 10000)) : high + 1 + Math.floor(Math.random() * (65535 - high)))
  for (let i = 0; i < 200; i++) {
    const port = pick()
    const free = await new Promise((resolve) => {
      const s = net.createServer()
      s.once('error', () => resolve(false))
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
    })
    if (free) return port
  }
  throw new Error('no free loopback port below the ephemeral range')
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

/**
 * Starts one redis-server (on `port` if given: a test that killed one
 * starts it again where its clients reconnect); `stop()` kills it (after
 * SIGCONT, should a test have frozen it).
 */
async function startRedis(port) {
  if (spawnSync('redis-server', ['--version']).status !== 0) {
    throw new Error('redis-server is not installed (bindings-node/run-tests.sh installs it with apt)')
  }
  if (port === undefined) port = await freePort()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-redis-'))
  const proc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
    { stdio: 'ignore' }
  )
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  // Up to 30 s: a loaded machine can take seconds to start a process.
  const deadline = performance.now() + 30_000
  while (performance.now() < deadline && proc.exitCode === null) {
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

// Before a test kills or stops the server: one call through `client` that
// waits as long as a loaded machine needs, so the client is connected, the
// script loaded, and the server seen to answer. The limiters under test keep
// their short timeoutMs, which must fire once the server is gone; a first
// call of their own could time out on a busy machine instead.
async function answered(client, prefix) {
  const { RedisTokenBucket } = require('../redis')
  const patient = new RedisTokenBucket('5/s', { client, prefix, timeoutMs: SLOW_MACHINE_MS })
  const d = await patient.allow('warm-up')
  if (d.source !== 'redis') throw new Error(`the warm-up call was decided by ${d.source}, not by Redis`)
}

module.exports = { startRedis, freePort, answered, SLOW_MACHINE_MS }
