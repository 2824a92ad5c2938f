// Types of `ratomic/fastify`: a plugin registered with `fastify.register`.
import type { RateLimitOptions } from './express'

/** The plugin: `await fastify.register(ratomicFastify, { limit: 100, windowMs: 60_000 })`. */
declare function ratomicFastify(fastify: any, options?: RateLimitOptions<any, any>): Promise<void>
export = ratomicFastify
