// Types of `ratomic/fastify`: a plugin registered with `fastify.register`.
import type { RateLimitOptions, ipKeyGenerator as IpKeyGenerator } from './express'

/** The plugin: `await fastify.register(ratomicFastify, { limit: 100, windowMs: 60_000 })`. */
declare function ratomicFastify(fastify: any, options?: RateLimitOptions<any, any>): Promise<void>
declare namespace ratomicFastify {
  /** As `ratomic/express`'s: the default client key from an address, for a `keyGenerator`. */
  const ipKeyGenerator: typeof IpKeyGenerator
}
export = ratomicFastify
