#!/usr/bin/env bash
# Regenerates the Go code of proto/ (internal/wirepb) with buf and
# protoc-gen-go, run as Go tools of tools/go.mod: nothing to install.
# With --check, it regenerates into a scratch copy and fails if the
# committed code is not current (and runs buf lint).
#
#   scripts/gen-proto.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
export GOWORK=off # the tools module stands alone
buf() { go tool -modfile=tools/go.mod buf "$@"; }
buf lint
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r internal/wirepb "$tmp/before"
  buf generate
  if ! diff -r "$tmp/before" internal/wirepb; then
    cp -r "$tmp/before/." internal/wirepb/
    echo "internal/wirepb is not current: run scripts/gen-proto.sh and commit the result" >&2
    exit 1
  fi
  echo "internal/wirepb is current"
else
  buf generate
fi
