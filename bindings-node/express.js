'use strict'
// Express (and plain `http`) middleware: `app.use(require('ratomic/express').rateLimit(options))`.
// The option names are express-rate-limit's, so moving over is a one-line
// change; `limiter:` takes any ratomic limiter instead of limit/windowMs.

const { resolve, decide, clientKey, ipKeyGenerator, PROBLEM_CONTENT_TYPE } = require('./http.js')

/**
 * Connect-style middleware limiting each client (by default its address:
 * `req.ip`, which honours Express's own `trust proxy` setting, else the
 * socket's peer address; IPv6 grouped by `ipv6Subnet` bits). Every response
 * carries the IETF `RateLimit-Policy` and `RateLimit` fields; a denial is
 * `statusCode` (429) with `Retry-After` and an RFC 9457 problem body, or what
 * `handler` / `message` make of it. A DirectTokenBucket limits every request
 * together, with no key.
 */
function rateLimit(options) {
  const o = resolve(options)
  return async function ratomicRateLimit(req, res, next) {
    try {
      if (o.skip && (await o.skip(req, res))) return next()
      const key = o.keyless
        ? undefined
        : o.keyGenerator
          ? await o.keyGenerator(req, res)
          : clientKey(req.ip !== undefined ? req.ip : req.socket && req.socket.remoteAddress, o.ipv6Subnet)
      const { decision, fields, problem } = o.async ? await decide(o, req, key) : decide(o, req, key)
      for (const [name, value] of fields) res.setHeader(name, value)
      if (decision !== null) req[o.requestPropertyName] = decision
      if (problem === null) return next()
      if (o.handler) return o.handler(req, res, next, { ...options, statusCode: o.statusCode })
      res.statusCode = o.statusCode
      let body = problem
      let type = PROBLEM_CONTENT_TYPE
      if (o.message !== undefined) {
        const m = typeof o.message === 'function' ? await o.message(req, res) : o.message
        body = typeof m === 'string' ? m : JSON.stringify(m)
        type = typeof m === 'string' ? 'text/plain; charset=utf-8' : 'application/json'
      }
      res.setHeader('Content-Type', type)
      res.setHeader('Content-Length', Buffer.byteLength(body))
      res.end(body)
    } catch (e) {
      next(e)
    }
  }
}

module.exports = { rateLimit, ipKeyGenerator, default: rateLimit }
