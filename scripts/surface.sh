#!/usr/bin/env bash
# The public surface: exported names per public package (an AST walk of
# every non-test file; see scripts/surface/main.go for what counts), and
# the total. .ci/run fails when the total passes the limit.
#
#   scripts/surface.sh            # the table
#   scripts/surface.sh -max 1000  # the table, and fail above 1,000
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./scripts/surface "$@"
