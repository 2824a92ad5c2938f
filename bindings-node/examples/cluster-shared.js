'use strict'
// A node:cluster HTTP server whose workers share one rate limit through a
// file: 100 requests a minute per client for the whole service, not per
// worker. Run: node examples/cluster-shared.js (PORT, default 3000).
//
// RATOMIC_EXAMPLE_FILE, _WORKERS and _LIMIT override the file, the number
// of workers and the limit (the test uses them); PORT=0 picks a free port.

const cluster = require('node:cluster')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const { TokenBucket } = require('ratomic')

// A runtime directory the service owns (a tmpfs), not a world-writable /tmp path.
const file = process.env.RATOMIC_EXAMPLE_FILE ||
  path.join(process.env.XDG_RUNTIME_DIR || os.tmpdir(), 'myapp-limits.shm')
const workers = Number(process.env.RATOMIC_EXAMPLE_WORKERS || os.availableParallelism())
const limit = process.env.RATOMIC_EXAMPLE_LIMIT || '100/min'

if (cluster.isPrimary) {
  // Every worker builds the same limiter on the same file.
  for (let i = 0; i < workers; i++) cluster.fork()
  let reported = false
  cluster.on('listening', (_, address) => {
    if (!reported && process.send) process.send({ listening: address.port })
    reported = true
  })
  process.on('SIGTERM', () => {
    for (const w of Object.values(cluster.workers)) w.kill()
    process.exit(0)
  })
} else {
  const limiter = TokenBucket.fromRate(limit, { maxKeys: 100_000, sharedFile: file })
  http.createServer((req, res) => {
    const d = limiter.allow(req.socket.remoteAddress)
    res.setHeader('x-worker', String(cluster.worker.id))
    for (const [name, value] of limiter.headers(d)) res.setHeader(name, value)
    res.statusCode = d.allowed ? 200 : 429
    res.end(d.allowed ? 'hello\n' : 'too many requests\n')
  }).listen(Number(process.env.PORT ?? 3000), '127.0.0.1')
}
