'use strict'
// Every Node version package.json's `engines` declares must satisfy every
// locked package's own `engines`: otherwise `npm ci` warns EBADENGINE (or,
// with the engine-strict of .npmrc, fails) on a Node version we claim to
// support. Run by run-tests.sh after `npm ci`; this machine tests one Node
// version, this check covers the whole declared range.
const semver = require('semver')
const { engines } = require('../package.json')
const lock = require('../package-lock.json')

const declared = engines.node
const bad = []
for (const [path, entry] of Object.entries(lock.packages)) {
  const wanted = entry.engines && entry.engines.node
  if (path === '' || !wanted) continue
  if (!semver.subset(declared, wanted)) bad.push(`${path}@${entry.version} needs node ${wanted}`)
}
if (bad.length > 0) {
  console.error(`package.json declares node ${JSON.stringify(declared)}, but some locked packages need more:`)
  for (const b of bad) console.error(`  ${b}`)
  console.error('narrow "engines", or pin those packages with "overrides"')
  process.exit(1)
}
console.log(`every locked package runs on node ${declared}`)
