'use strict'
// The middleware writes a request's header fields and problem body from
// templates made once per policy out of core's own output (http.js): for
// any decision, what it writes must be what core writes — every draft,
// with and without the legacy fields, one limit or many, allowed or
// denied, waits on whole seconds and a nanosecond either side, counts and
// waits past the range the templates format themselves (core formats those).
const test = require('node:test')
const assert = require('node:assert/strict')
const { gate, writeFields, problemBody, policyOf } = require('../http.js')
const { TokenBucket, FixedWindow, Limiter, Stack, DirectTokenBucket, Quotas, ManualClock } = require('ratomic')

// A deterministic stream of numbers (xorshift), so a failure can be replayed.
function numbers(seed) {
  let x = seed
  return () => {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    return (x >>> 0) / 2 ** 32
  }
}

// Waits that round to whole seconds in every way: exact, a nanosecond
// either side, sub-millisecond, large, and past the templates' range.
function wait(rand) {
  const s = Math.floor(rand() * 5000)
  switch (Math.floor(rand() * 7)) {
    case 0: return s * 1000
    case 1: return s * 1000 + 1e-6
    case 2: return Math.max(0, s * 1000 - 1e-6)
    case 3: return rand() * 3
    case 4: return rand() * 1e8
    case 5: return 9e9 + rand() * 1e12
    default: return rand() * 1e6
  }
}

function count(rand, limit) {
  return rand() < 0.05 ? 1e15 + Math.floor(rand() * 1e6) : Math.floor(rand() * (limit + 1))
}

function decision(rand, limit, allowed) {
  return { allowed, remaining: count(rand, limit), limit, retryAfterMs: allowed ? 0 : Math.max(1e-6, wait(rand)), resetAfterMs: wait(rand) }
}

function written(g, p, d) {
  const out = []
  writeFields(p, d, (target, name, value) => target.push([name, value]), out)
  return out
}

const clock = new ManualClock()
const LIMITERS = {
  TokenBucket: () => new TokenBucket('100/min', { clock }),
  FixedWindow: () => new FixedWindow(7, 3_600_000, { clock }),
  DirectTokenBucket: () => new DirectTokenBucket('5/s', { clock }),
  Limiter: () => new Limiter({ burst: '10/s', daily: { algorithm: 'fixedWindow', rate: '1000/day' }, 'ten/hour': '10/h' }, { clock }),
  Stack: () => new Stack({ ip: new TokenBucket('10/s', { clock }), global: new DirectTokenBucket('100/s', { clock }) }),
}

for (const [kind, make] of Object.entries(LIMITERS)) {
  for (const draft of ['draft-11', 'draft-7', 'draft-6', false]) {
    for (const legacy of [false, true]) {
      test(`${kind}, ${draft}${legacy ? ', legacy' : ''}: what the middleware writes is what core writes`, () => {
        const limiter = make()
        const g = gate({ face: 'test', limiter, name: 'api', draft, legacy, onLimiterError: () => {} })
        const p = g.template
        assert.ok(p.t !== null, 'the templates are trusted')
        const options = { ...(g.multi ? {} : { name: 'api' }), legacy, ...(draft === false ? {} : { draft }) }
        const drop = (fields) => (draft === false ? fields.filter(([n]) => !n.startsWith('RateLimit')) : fields)
        const rand = numbers(0x9e3779b9 ^ kind.length ^ String(draft).length ^ (legacy ? 7 : 0))
        for (let i = 0; i < 2000; i++) {
          const allowed = rand() < 0.5
          const d = decision(rand, 1000, allowed)
          if (g.multi) {
            const names = limiter.names
            d.entries = names.map((name, j) => {
              const ok = allowed || (j !== 0 && rand() < 0.5)
              return { name, ...decision(rand, 1000, ok) }
            })
            d.deniedBy = d.entries.filter((e) => !e.allowed).map((e) => e.name)
          }
          assert.deepEqual(written(g, p, d), drop(limiter.headers(d, options)), JSON.stringify(d))
          if (!allowed) assert.equal(problemBody(p, d), g.multi ? limiter.problem(d) : limiter.problem(d, { name: 'api' }), JSON.stringify(d))
        }
      })
    }
  }
}

test('Quotas: the templates of each quota are core\'s', () => {
  const quotas = new Quotas({ clock })
  const g = gate({ face: 'test', limiter: quotas, quota: (req) => req.quota, draft: 'draft-11', legacy: true, onLimiterError: () => {} })
  const rand = numbers(12345)
  for (const quota of ['10/s', '100/min', { capacity: 5, refillPerSec: 0.5 }]) {
    const p = policyOf(g, quotas, 'default', quota)
    for (let i = 0; i < 500; i++) {
      const d = decision(rand, 100, rand() < 0.5)
      assert.deepEqual(written(g, p, d), quotas.headers(d, quota, { legacy: true }), JSON.stringify([quota, d]))
      if (!d.allowed) assert.equal(problemBody(p, d), quotas.problem(d, quota))
    }
  }
})

test('fields left out (standardHeaders false, addHeaders) are left out of both paths', () => {
  const limiter = new TokenBucket('10/s', { clock })
  const g = gate({ face: 'test', limiter, draft: 'draft-6', legacy: true, drop: { allowed: ['x-ratelimit-reset'], denied: ['retry-after', 'ratelimit-policy'] }, onLimiterError: () => {} })
  const names = (d) => written(g, g.template, d).map(([n]) => n)
  const ok = { allowed: true, remaining: 3, limit: 10, retryAfterMs: 0, resetAfterMs: 700 }
  const no = { allowed: false, remaining: 0, limit: 10, retryAfterMs: 100, resetAfterMs: 1000 }
  const far = { ...no, resetAfterMs: 1e13 }
  assert.deepEqual(names(ok), ['RateLimit-Policy', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'X-RateLimit-Limit', 'X-RateLimit-Remaining'])
  const denied = ['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']
  assert.deepEqual(names(no), denied)
  assert.deepEqual(names(far), denied, 'formatted by core, the same fields left out')
})
