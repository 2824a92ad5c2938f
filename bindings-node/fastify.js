'use strict'
// A Fastify plugin: `fastify.register(require('ratomic/fastify'), options)`,
// with the options of `ratomic/express` (express-rate-limit's names).

const { resolve, decide, clientKey, checkForwarded, ipKeyGenerator, PROBLEM_CONTENT_TYPE } = require('./http.js')

// Fastify's `trustProxy`, as a request shows it: `request.ips` exists only
// when some proxy is trusted (false: none; undefined: some, how many unknown).
function trusted(request) {
  return request.ips === undefined ? false : undefined
}

/**
 * Limits every request of the instance it is registered on (not
 * encapsulated: it applies to the routes of the registering scope), keyed by
 * `request.ip` (which honours Fastify's `trustProxy`) unless `keyGenerator`
 * says otherwise (a DirectTokenBucket: no key, every request together).
 */
async function ratomicFastify(fastify, options) {
  const o = resolve(options, 'ratomic/fastify')
  // With nothing to await (an in-memory limiter, no skip, keyGenerator,
  // handler or message function: the common set-up), a callback hook that
  // decides in the request's own tick: no promise a request, as ratomic/express.
  if (!o.async && !o.skip && !o.keyGenerator && !o.handler && typeof o.message !== 'function') {
    fastify.addHook('onRequest', (request, reply, done) => {
      if (!o.keyless) checkForwarded(o, request, trusted)
      const key = o.keyless ? undefined : clientKey(request.ip, o.ipv6Subnet)
      const { decision, fields, problem, status, failed } = decide(o, request, key, true)
      for (const [name, value] of fields) reply.header(name, value)
      if (decision !== null) request[o.requestPropertyName] = decision
      if (problem === null) return done()
      if (failed) return reply.code(status).type(PROBLEM_CONTENT_TYPE).send(problem)
      // An answer from the hook: reply.send, and no done().
      if (o.message !== undefined) return reply.code(o.statusCode).send(o.message)
      return reply.code(o.statusCode).type(PROBLEM_CONTENT_TYPE).send(problem)
    })
    return
  }
  fastify.addHook('onRequest', async (request, reply) => {
    if (o.skip && (await o.skip(request, reply))) return
    if (!o.keyless && !o.keyGenerator) checkForwarded(o, request, trusted)
    const key = o.keyless ? undefined : o.keyGenerator ? await o.keyGenerator(request, reply) : clientKey(request.ip, o.ipv6Subnet)
    const { decision, fields, problem, status, failed } = await decide(o, request, key, !o.keyless && !o.keyGenerator)
    for (const [name, value] of fields) reply.header(name, value)
    if (decision !== null) request[o.requestPropertyName] = decision
    if (problem === null) return
    if (failed) return reply.code(status).type(PROBLEM_CONTENT_TYPE).send(problem)
    if (o.handler) return o.handler(request, reply, undefined, { ...options, statusCode: o.statusCode })
    if (o.message !== undefined) {
      const m = typeof o.message === 'function' ? await o.message(request, reply) : o.message
      return reply.code(o.statusCode).send(m)
    }
    return reply.code(o.statusCode).type(PROBLEM_CONTENT_TYPE).send(problem)
  })
}

// Not encapsulated (what fastify-plugin does): the hook reaches the
// routes of the scope that registers the plugin.
ratomicFastify[Symbol.for('skip-override')] = true
ratomicFastify[Symbol.for('fastify.display-name')] = 'ratomic'

module.exports = ratomicFastify
module.exports.default = ratomicFastify
module.exports.ratomicFastify = ratomicFastify
module.exports.ipKeyGenerator = ipKeyGenerator
