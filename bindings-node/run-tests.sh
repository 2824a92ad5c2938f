#!/usr/bin/env bash
# Installs what the Node package needs (npm ci: exactly the lock, no
# fallback), checks that every Node version package.json declares can run
# every locked package, builds the addon from source, checks that the
# committed generated files (index.js, index.d.ts) match a fresh build, and
# runs every test: node --test and tsc on the typings. The ratomic/redis
# tests start their own redis-servers (redis-server from apt, as for the
# Rust, C and Python tests).
set -euo pipefail
cd "$(dirname "$0")"
. ../redis/server.sh
redis_install

echo "== npm ci"
npm ci --no-audit --no-fund
node scripts/check-engines.js

echo "== build (napi build --platform --release)"
committed="$(mktemp -d)"
trap 'rm -rf "$committed"; redis_stop_all' EXIT
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

echo "== tsc (the typings test, index.d.ts) and node --test"
npm test
echo "== bindings-node: all tests passed"
