'use strict'
// A PostgreSQL cluster a test owns, to stop and start again (the shared one
// run-tests.sh starts serves the other test files meanwhile): initdb in a
// temp dir as the cluster's unprivileged owner (initdb refuses root), on a
// free 127.0.0.1 port, as postgres/server.sh and the Rust tests' Server do.
// run-tests.sh exports RATOMIC_PG_BIN and RATOMIC_PG_USER; run alone, the
// binaries are looked for where Debian puts them.
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { freePort } = require('./redis-server.js')

function pgBin() {
  if (process.env.RATOMIC_PG_BIN) return process.env.RATOMIC_PG_BIN
  const root = '/usr/lib/postgresql'
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin', 'initdb'))) : []
  if (versions.length === 0) throw new Error('initdb not found: run these tests with bindings-node/run-tests.sh (it installs PostgreSQL)')
  return path.join(root, versions.sort((a, b) => Number(a) - Number(b)).pop(), 'bin')
}

function pgUser() {
  if (process.env.RATOMIC_PG_USER !== undefined) return process.env.RATOMIC_PG_USER
  return process.getuid() === 0 ? 'postgres' : ''
}

// Runs a PostgreSQL program as the cluster's owner.
function asOwner(program, args) {
  const bin = path.join(pgBin(), program)
  const user = pgUser()
  return user ? execFileSync('runuser', ['-u', user, '--', bin, ...args], { stdio: 'pipe' }) : execFileSync(bin, args, { stdio: 'pipe' })
}

/** Starts a cluster of the caller's own; `stop()` (immediate), `start()` again on the same port, `remove()`. */
async function startPostgres() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-pg-'))
  const user = pgUser()
  if (user) {
    fs.chmodSync(dir, 0o755)
    execFileSync('chown', [user, dir])
  }
  const data = path.join(dir, 'data')
  asOwner('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8'])
  const port = await freePort()
  const server = {
    port,
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    /** Every server process stops at once (`pg_ctl stop -m immediate`), as in a crash. */
    stop() {
      asOwner('pg_ctl', ['-D', data, '-m', 'immediate', 'stop'])
    },
    /** Starts it (again) on its port; returns once it accepts connections. */
    start() {
      const opts = `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir} -c fsync=off`
      asOwner('pg_ctl', ['-D', data, '-l', path.join(dir, 'log'), '-w', '-t', '60', '-o', opts, 'start'])
    },
    remove() {
      try {
        server.stop()
      } catch {}
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  server.start()
  return server
}

module.exports = { startPostgres }
