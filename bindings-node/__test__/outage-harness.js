'use strict'
// What postgres-outage.test.js and redis-outage.test.js share: a child
// process holding a limiter on a client of its own, driven a line at a
// time on stdin, each command answered by one JSON line on stdout. A crash
// is the child's exit, which the parent sees instead of dying with it.
const crypto = require('node:crypto')
const path = require('node:path')
const readline = require('node:readline')
const { spawn } = require('node:child_process')

// (Parent) Starts `script` (a file of this directory) with `env` and an
// APP name of its own; `send(command)` resolves to the child's JSON reply,
// or rejects saying how it exited (its code, its stderr) if it exits first.
function spawnChild(script, env) {
  const app = 'ratomic-outage-' + crypto.randomBytes(6).toString('hex')
  const proc = spawn(process.execPath, [path.join(__dirname, script)], {
    env: { ...process.env, ...env, APP: app },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stderr = ''
  // Writing to a child that has exited: its exit is the answer (below).
  proc.stdin.on('error', () => {})
  proc.stderr.on('data', (b) => (stderr += b))
  const lines = readline.createInterface({ input: proc.stdout })[Symbol.asyncIterator]()
  const exited = new Promise((resolve) => proc.once('close', (code, signal) => resolve({ code, signal })))
  const send = async (command) => {
    proc.stdin.write(command + '\n')
    const next = await Promise.race([lines.next(), exited])
    if (next.done === false) return JSON.parse(next.value)
    // Its output ended: it has exited, or is about to.
    const { code, signal } = await exited
    throw new Error(`the child exited (code ${code}, signal ${signal}) on "${command}":\n${stderr}`)
  }
  return { app, proc, send, exited, stderr: () => stderr }
}

// (Child) What the child saw: the process's warnings, and the errors the
// user's own listener (`mine`, when a scenario adds it) was given.
const warnings = []
const userErrors = []
const mine = (e) => userErrors.push(e.message)
const reports = () => ({ warnings, userErrors })

// (Child) Runs `main`, which builds its client and limiter and returns its
// commands; answers the commands read on stdin (plus `reports`: the
// warnings and the user's errors) until `quit`. A failure of the set-up is
// exit code 2, with its stack on stderr.
function runChild(main) {
  process.on('warning', (w) => warnings.push({ code: w.code, message: w.message }))
  const serve = async () => {
    const commands = { ...(await main()), reports: async () => reports() }
    for await (const line of readline.createInterface({ input: process.stdin })) {
      const reply = await commands[line]()
      process.stdout.write(JSON.stringify(reply) + '\n')
      if (line === 'quit') break
    }
    // Nothing left to read: the process ends once its connections are closed.
    process.stdin.destroy()
  }
  serve().catch((e) => {
    process.stderr.write(`${e && e.stack}\n`)
    process.exit(2)
  })
}

module.exports = { spawnChild, runChild, mine, reports }
