'use strict'
// Loads the native addon through the loader napi-rs generates (index.js),
// which looks for `ratomic.<platform>.node` beside it (a build from source),
// then for the platform package (`ratomic-linux-x64-gnu`, ...), an optional
// dependency of this one. When neither is there, the generated loader's
// message blames an npm bug and says to delete package-lock.json, which
// sends the user the wrong way: this file replaces it with one that says
// what is missing and what to do.

// The platforms whose binaries are published (package.json's napi.targets),
// by the names of their packages' suffixes.
const PREBUILT = ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'linux-arm64-musl', 'darwin-x64', 'darwin-arm64', 'win32-x64-msvc']

// This machine's platform, named as napi-rs names it.
function platform() {
  const base = `${process.platform}-${process.arch}`
  if (process.platform === 'win32') return `${base}-msvc`
  if (process.platform !== 'linux') return base
  let glibc = false
  try {
    glibc = Boolean(process.report.getReport().header.glibcVersionRuntime)
  } catch {
    // No report: say gnu, the common case.
    glibc = true
  }
  return `${base}-${glibc ? 'gnu' : 'musl'}`
}

// Whether the platform package is installed (resolvable), though it failed to load.
function installed(name) {
  try {
    require.resolve(`${name}/package.json`)
    return true
  } catch {
    return false
  }
}

// The innermost message of a loader error (napi-rs chains each place it tried as `cause`).
function innermost(e) {
  let m = e && e.message
  for (let c = e && e.cause; c; c = c.cause) if (typeof c.message === 'string') m = c.message
  return m
}

function missingBinary(cause) {
  const here = platform()
  if (installed(`ratomic-${here}`)) {
    // There, but it did not load (a libc too old, a damaged file, another version): reinstalling
    // with optional dependencies would not help; say what failed.
    const error = new Error(
      `ratomic: the package ratomic-${here} is installed but its native addon failed to load: ${innermost(cause)}. ` +
        'Check that it matches the version of ratomic and this system (its libc), or build from source ' +
        '(https://github.com/ratomic/ratomic, bindings-node: `npm ci && npm run build`). The full error is this error\'s `cause`.',
    )
    error.code = 'ERR_RATOMIC_NO_BINARY'
    error.cause = cause
    return error
  }
  const prebuilt = PREBUILT.includes(here)
  const error = new Error(
    `ratomic: no native addon for this platform (${here}) could be loaded. ` +
      (prebuilt
        ? `Its prebuilt binary is the package ratomic-${here}, an optional dependency of ratomic: ` +
          'install again without --omit=optional / --no-optional (or add ratomic-' + here + ' to your dependencies). '
        : `Prebuilt binaries ship for ${PREBUILT.join(', ')}; this platform is not one of them. `) +
      'To build it from source (needs Rust, https://rustup.rs): clone https://github.com/ratomic/ratomic, ' +
      'run `npm ci && npm run build` in its bindings-node directory, then `npm run pack:local -- <dir>` there, ' +
      'and `npm install <dir>/ratomic-*.tgz` in your project. The error of each place tried is this error\'s `cause`.',
  )
  error.code = 'ERR_RATOMIC_NO_BINARY'
  error.cause = cause
  return error
}

try {
  module.exports = require('./index.js')
} catch (e) {
  // Only the loader's "found nothing to load" errors; any other failure
  // (an addon that loaded and threw) is passed on as it is.
  if (e && typeof e.message === 'string' && /^(Cannot find native binding|Failed to load native binding)/.test(e.message)) {
    throw missingBinary(e)
  }
  throw e
}
