#!/usr/bin/env bash
# Packs what a release publishes, for this machine only, from a local build
# (`npm ci && npm run build` first): the main package `ratomic` (no binary,
# this platform's package as an optional dependency) and the platform
# package holding the addon built here (`ratomic-linux-x64-gnu`, ...), as two
# tarballs in DEST (default: the current directory). Install both in any
# project: `npm install DEST/ratomic-*.tgz`.
#
# It works on a copy, with napi-rs's own steps (napi artifacts moves the
# binary into its npm/<platform> package; napi pre-publish, which publishes
# nothing here, writes the optionalDependencies); the release workflow runs
# the same steps with every target of napi.targets.
set -euo pipefail
dest="$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)"
cd "$(dirname "$0")/.."

shopt -s nullglob
built=(ratomic.*.node)
if [ "${#built[@]}" -ne 1 ]; then
  echo "pack-local: expected one ratomic.<platform>.node here (run npm run build), found ${#built[@]}" >&2
  exit 1
fi
platform="${built[0]#ratomic.}"
platform="${platform%.node}"
case "$platform" in
  linux-x64-gnu) target=x86_64-unknown-linux-gnu ;;
  linux-arm64-gnu) target=aarch64-unknown-linux-gnu ;;
  linux-x64-musl) target=x86_64-unknown-linux-musl ;;
  linux-arm64-musl) target=aarch64-unknown-linux-musl ;;
  darwin-x64) target=x86_64-apple-darwin ;;
  darwin-arm64) target=aarch64-apple-darwin ;;
  win32-x64-msvc) target=x86_64-pc-windows-msvc ;;
  *) echo "pack-local: $platform is not one of package.json's napi.targets" >&2; exit 1 ;;
esac

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# What the main package publishes, plus the npm/ platform dirs and the build.
npm pack --silent --pack-destination "$stage" >/dev/null
tar -xzf "$stage"/ratomic-*.tgz -C "$stage"
rm "$stage"/ratomic-*.tgz
cp -r npm "$stage/package/"
# A platform package ships the binary under the same licenses as the main
# package (its package.json lists them; napi pre-publish checks they exist).
cp LICENSE-MIT LICENSE-APACHE "$stage/package/npm/$platform/"
cp "${built[0]}" "$stage/package/"
echo "{ \"binaryName\": \"ratomic\", \"targets\": [\"$target\"] }" >"$stage/one-target.json"
npx napi artifacts --cwd "$stage/package" -c ../one-target.json --output-dir . >/dev/null
npx napi pre-publish --cwd "$stage/package" -c ../one-target.json -t npm --no-gh-release --skip-optional-publish >/dev/null
rm "$stage/package/${built[0]}"
(cd "$stage/package" && npm pack --silent --pack-destination "$dest")
(cd "$stage/package/npm/$platform" && npm pack --silent --pack-destination "$dest")
