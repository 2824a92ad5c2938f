'use strict'
// Express (and plain `http`) middleware: `app.use(require('ratomic/express').rateLimit(options))`.
// The option names are express-rate-limit's, so moving over is a one-line
// change; `limiter:` takes any ratomic limiter instead of limit/windowMs.

const { resolve, decide, clientKey, checkForwarded, ipKeyGenerator, PROBLEM_CONTENT_TYPE } = require('./http.js')

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

  // Each step runs at once and awaits only what returns a promise (an async
  // skip or keyGenerator, a Redis limiter, an async message): an in-memory
  // limiter with plain options decides in the request's own tick, with no
  // promise made (measured: the async wrapper alone cost a few µs a request).
  function keyed(req, res, next) {
    if (o.keyless) return decided(req, res, next, undefined, false)
    if (o.keyGenerator) {
      const key = o.keyGenerator(req, res)
      return isThenable(key) ? key.then((k) => decided(req, res, next, k, false)) : decided(req, res, next, key, false)
    }
    checkForwarded(o, req, trustProxy)
    const key = clientKey(req.ip !== undefined ? req.ip : req.socket && req.socket.remoteAddress, o.ipv6Subnet)
    return decided(req, res, next, key, true)
  }

  function decided(req, res, next, key, byDefault) {
    const out = decide(o, req, key, byDefault)
    return o.async && !out.failed ? out.then((r) => answer(req, res, next, r)) : answer(req, res, next, out)
  }

  function answer(req, res, next, { decision, fields, problem, status, failed }) {
    for (const [name, value] of fields) res.setHeader(name, value)
    if (decision !== null) req[o.requestPropertyName] = decision
    if (problem === null) return next()
    if (failed) {
      // Not a denial (the limiter could not decide): a generic problem
      // document, whatever handler and message say.
      res.statusCode = status
      return send(res, problem, PROBLEM_CONTENT_TYPE)
    }
    if (o.handler) return o.handler(req, res, next, { ...options, statusCode: o.statusCode })
    res.statusCode = o.statusCode
    if (o.message === undefined) return send(res, problem, PROBLEM_CONTENT_TYPE)
    const m = typeof o.message === 'function' ? o.message(req, res) : o.message
    return isThenable(m) ? m.then((v) => sendMessage(res, v)) : sendMessage(res, m)
  }

  return function ratomicRateLimit(req, res, next) {
    let pending
    try {
      const skip = o.skip ? o.skip(req, res) : false
      pending = isThenable(skip)
        ? skip.then((s) => (s ? next() : keyed(req, res, next)))
        : skip
          ? next()
          : keyed(req, res, next)
    } catch (e) {
      return next(e)
    }
    // An error in a step that was awaited goes to Express's error handling.
    if (isThenable(pending)) return pending.then(undefined, next)
    return pending
  }
}

// Express's `trust proxy` (false by default); with no app (plain `http`), nothing is trusted.
function trustProxy(req) {
  return req.app && typeof req.app.get === 'function' ? req.app.get('trust proxy') : false
}

function isThenable(v) {
  return v !== null && typeof v === 'object' && typeof v.then === 'function'
}

function sendMessage(res, m) {
  if (typeof m === 'string') return send(res, m, 'text/plain; charset=utf-8')
  return send(res, JSON.stringify(m), 'application/json')
}

function send(res, body, type) {
  res.setHeader('Content-Type', type)
  res.setHeader('Content-Length', Buffer.byteLength(body))
  res.end(body)
}

module.exports = { rateLimit, ipKeyGenerator, default: rateLimit }
