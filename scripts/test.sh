#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test.
# Without a GPU the GPU tests are reported as skipped; on a GPU box they run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh "$@"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 1200
