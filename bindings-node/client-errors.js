'use strict'
// Internal (not an entry point): the 'error' listener ratomic/postgres and
// ratomic/redis add to a client of the user's that has none.
//
// A pg Pool or Client and a node-redis client emit 'error' when a
// connection fails between calls (a server restart, a killed connection, a
// cut network), and an EventEmitter's 'error' with no listener throws: the
// process exits. So a limiter built on a client with no 'error' listener
// adds one (once per client), which warns (process.emitWarning) unless a
// listener of the user's is there by then: it never replaces theirs, and
// says nothing once they handle it.

// Milliseconds between two warnings of one kind (the first is written at
// once): a server restart fails every connection at once, and a client that
// keeps reconnecting fails at each attempt.
const WARN_INTERVAL_MS = 60_000

/**
 * A function `watch(client, kind)` that adds such a listener to `client`;
 * its warnings have `code` and the text `messageOf(kind, what, more)`
 * (`what`: the error's message, `more`: how many were not written since the
 * last one, as a sentence's end, or ''), at most one a minute per kind.
 * `now` reads the time in milliseconds (tests give their own).
 */
function clientErrorWatcher(code, messageOf, now = () => performance.now()) {
  const watched = new WeakSet()
  // Per kind: when it last warned, and how many it has not since.
  const warned = new Map()

  function warn(kind, err) {
    const at = now()
    const last = warned.get(kind)
    if (last !== undefined && at - last.at < WARN_INTERVAL_MS) {
      last.since++
      return
    }
    const more = last !== undefined && last.since > 0 ? ` (${last.since} more since the last warning)` : ''
    warned.set(kind, { at, since: 0 })
    const what = String(err && err.message !== undefined ? err.message : err)
    process.emitWarning(messageOf(kind, what, more), { type: 'RatomicWarning', code })
  }

  return function watch(client, kind) {
    if (typeof client.on !== 'function' || typeof client.listenerCount !== 'function' || watched.has(client)) return
    if (client.listenerCount('error') > 0) return
    watched.add(client)
    client.on('error', (err) => {
      // A listener added since is the user's: theirs to report.
      if (client.listenerCount('error') === 1) warn(kind, err)
    })
  }
}

module.exports = { clientErrorWatcher, WARN_INTERVAL_MS }
