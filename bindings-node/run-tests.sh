#!/usr/bin/env bash
# Installs what the Node package needs (npm ci: exactly the lock, no
# fallback), checks that every Node version package.json declares can run
# every locked package, builds the addon from source, checks that the
# committed generated files (index.js, index.d.ts) match a fresh build, and
# runs every test: node --test and tsc on the typings. Then it installs the
# packages as a user would: it packs the main package and this platform's
# package (linux-x64-gnu) the way a release does (scripts/pack-local.sh:
# napi artifacts, napi pre-publish without publishing), installs the two tarballs in a fresh
# project outside the repository (offline: local tarballs only) and runs the
# READMEs' examples there. The ratomic/redis tests start their own
# redis-servers (redis-server from apt, as for the Rust, C and Python tests).
set -euo pipefail
cd "$(dirname "$0")"
here="$PWD"
. ../redis/server.sh
redis_install
# ratomic/postgres's tests run against one throwaway PostgreSQL cluster.
. ../postgres/server.sh
pg_install
trap 'redis_stop_all; pg_stop_all' EXIT
pg_start "$(pg_free_port)"
export RATOMIC_POSTGRES_URL=$PG_URL
# For the tests that stop and start a cluster of their own (postgres-server.js).
export RATOMIC_PG_BIN=$pg_bin RATOMIC_PG_USER=$pg_user

echo "== npm ci"
npm ci --no-audit --no-fund
node scripts/check-engines.js

echo "== build (napi build --platform --release)"
committed="$(mktemp -d)"
stage="$(mktemp -d)"
project="$(mktemp -d)"
trap 'rm -rf "$committed" "$stage" "$project"; redis_stop_all; pg_stop_all' EXIT
cp index.js index.d.ts "$committed/"
npm run build

echo "== generated files match the committed ones"
drift=0
for f in index.js index.d.ts; do
  if ! diff -u "$committed/$f" "$f"; then
    echo "ERROR: $f differs from a fresh build: commit the regenerated $f" >&2
    drift=1
  fi
done
[ "$drift" = 0 ]

echo "== cargo test -p ratomic-node --lib (the glue's own unit tests)"
(cd .. && cargo test -q -p ratomic-node --lib)

echo "== tsc (the typings test, index.d.ts) and node --test"
npm test

platform="$(ls ratomic.*.node | sed -n 's/^ratomic\.\(.*\)\.node$/\1/p')"
echo "== packages: the main package and ratomic-$platform, packed as a release packs them"
scripts/pack-local.sh "$stage"
ls "$stage"

echo "== a fresh project outside the repository: npm install the two tarballs, run the READMEs' examples"
(
  cd "$project"
  npm init -y >/dev/null
  npm install --offline --no-audit --no-fund "$stage"/ratomic-*.tgz
  node -e "
const p = require('ratomic/package.json')
if (p.optionalDependencies?.['ratomic-$platform'] !== p.version) throw new Error('the platform package is not an optional dependency: ' + JSON.stringify(p.optionalDependencies))
"
  node -e "
const { TokenBucket } = require('ratomic')
const d = new TokenBucket('5/min').allow('ip:10.0.0.1')
if (d.remaining !== 4) throw new Error('unexpected decision ' + JSON.stringify(d))
console.log('require(\"ratomic\") from the installed package:', JSON.stringify(d))
"
)
(cd "$project" && RATOMIC_INSTALLED="$project" node --test "$here/__test__/readme.test.js")
echo "== bindings-node: all tests passed"
