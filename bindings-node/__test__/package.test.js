'use strict'
// The package as npm ships it: the main package carries no binary, one
// platform package per target of napi.targets carries it, and a platform
// with no binary to load gets a message that says what to do.
// (run-tests.sh installs the packed tarballs in a fresh project and runs
// the READMEs there.)
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')

const DIR = path.join(__dirname, '..')
const pkg = require('../package.json')

// The napi-rs names of the targets (`npm/<name>/`), in napi.targets' order.
const PLATFORMS = ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'linux-arm64-musl', 'darwin-x64', 'darwin-arm64', 'win32-x64-msvc']

test('one platform package per target, each at the main package\'s version', () => {
  assert.equal(pkg.napi.targets.length, PLATFORMS.length)
  assert.deepEqual(fs.readdirSync(path.join(DIR, 'npm')).sort(), [...PLATFORMS].sort())
  for (const p of PLATFORMS) {
    const sub = require(`../npm/${p}/package.json`)
    assert.equal(sub.name, `ratomic-${p}`)
    assert.equal(sub.version, pkg.version)
    assert.deepEqual(sub.files, [`ratomic.${p}.node`, 'LICENSE-MIT', 'LICENSE-APACHE'])
    assert.equal(sub.os[0], p.split('-')[0])
  }
})

test('the license texts packed are the repository\'s', () => {
  for (const f of ['LICENSE-MIT', 'LICENSE-APACHE']) {
    assert.equal(fs.readFileSync(path.join(DIR, f), 'utf8'), fs.readFileSync(path.join(DIR, '..', f), 'utf8'), f)
  }
})

test('the main package carries no binary', () => {
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--silent'], { cwd: DIR, encoding: 'utf8' })
  assert.equal(r.status, 0, r.stderr)
  const files = JSON.parse(r.stdout)[0].files.map((f) => f.path)
  assert.deepEqual(files.filter((f) => f.endsWith('.node')), [])
  for (const f of ['ratomic.js', 'native.js', 'index.js', 'ratomic.d.ts', 'express.js', 'redis.js', 'README.md', 'LICENSE-MIT', 'LICENSE-APACHE']) {
    assert.ok(files.includes(f), `${f} is packed`)
  }
  assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('npm/') || f.startsWith('__test__/')))
})

test('a platform package that is installed but fails to load says so, not "install again"', () => {
  // The package's JavaScript in node_modules/ratomic, beside a
  // node_modules/ratomic-<platform> whose binary is not a shared library.
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-broken-binary-'))
  try {
    const libc = process.platform === 'linux' ? (process.report.getReport().header.glibcVersionRuntime ? '-gnu' : '-musl') : ''
    const here = `${process.platform}-${process.arch}${process.platform === 'win32' ? '-msvc' : libc}`
    const main = path.join(root, 'node_modules', 'ratomic')
    const platform = path.join(root, 'node_modules', `ratomic-${here}`)
    fs.mkdirSync(main, { recursive: true })
    fs.mkdirSync(platform, { recursive: true })
    for (const f of pkg.files.filter((f) => f.endsWith('.js')).concat('package.json')) {
      fs.copyFileSync(path.join(DIR, f), path.join(main, f))
    }
    const file = `ratomic.${here}.node`
    fs.writeFileSync(path.join(platform, 'package.json'), JSON.stringify({ name: `ratomic-${here}`, version: pkg.version, main: file }))
    fs.writeFileSync(path.join(platform, file), 'not a shared library')
    const r = spawnSync(process.execPath, ['-e', `
      try { require('ratomic') } catch (e) {
        console.log(JSON.stringify({ code: e.code, message: e.message }))
      }
    `], { cwd: root, encoding: 'utf8', env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: '' } })
    assert.equal(r.status, 0, r.stderr)
    const e = JSON.parse(r.stdout)
    assert.equal(e.code, 'ERR_RATOMIC_NO_BINARY')
    assert.ok(e.message.includes(`the package ratomic-${here} is installed but its native addon failed to load`), e.message)
    assert.doesNotMatch(e.message, /--omit=optional|npm has a bug/)
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
})

test('a missing binary says what to do, not napi-rs\'s npm-bug message', () => {
  // The JavaScript of the package, alone in a directory outside the
  // repository: no ratomic.<platform>.node beside it, no platform package.
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'ratomic-no-binary-'))
  try {
    for (const f of pkg.files.filter((f) => f.endsWith('.js')).concat('package.json')) {
      fs.copyFileSync(path.join(DIR, f), path.join(copy, f))
    }
    const r = spawnSync(process.execPath, ['-e', `
      try { require(${JSON.stringify(copy)}) } catch (e) {
        console.log(JSON.stringify({ code: e.code, message: e.message, cause: Boolean(e.cause) }))
      }
    `], { encoding: 'utf8', env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: '' } })
    assert.equal(r.status, 0, r.stderr)
    const e = JSON.parse(r.stdout)
    assert.equal(e.code, 'ERR_RATOMIC_NO_BINARY')
    assert.equal(e.cause, true)
    assert.doesNotMatch(e.message, /npm has a bug|package-lock/)
    // This machine's platform as napi-rs names it (CI: linux-x64-gnu).
    const libc = process.platform === 'linux' ? (process.report.getReport().header.glibcVersionRuntime ? '-gnu' : '-musl') : ''
    const here = `${process.platform}-${process.arch}${process.platform === 'win32' ? '-msvc' : libc}`
    assert.ok(e.message.includes(`no native addon for this platform (${here})`), e.message)
    if (PLATFORMS.includes(here)) {
      assert.ok(e.message.includes(`the package ratomic-${here}, an optional dependency`), e.message)
      assert.match(e.message, /--omit=optional/)
    } else {
      assert.ok(e.message.includes(`Prebuilt binaries ship for ${PLATFORMS.join(', ')}`), e.message)
    }
    assert.match(e.message, /`npm ci && npm run build` in its bindings-node directory/)
    assert.match(e.message, /https:\/\/github\.com\/ratomic\/ratomic/)
    assert.match(e.message, /npm run pack:local/)
  } finally {
    fs.rmSync(copy, { recursive: true, force: true })
  }
})

test('the platforms the message lists are the ones published', () => {
  const src = fs.readFileSync(path.join(DIR, 'native.js'), 'utf8')
  const listed = JSON.parse(src.match(/const PREBUILT = (\[[^\]]*\])/)[1].replace(/'/g, '"'))
  assert.deepEqual(listed, PLATFORMS)
})
