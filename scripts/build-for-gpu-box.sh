#!/usr/bin/env bash
# Builds, on a CPU machine, the binaries scripts/gpu-check.sh runs on a GPU box: Release,
# sm_75 + sm_90, yaml-cpp and SQLite linked statically (the GPU box has no SQLite headers and
# another yaml-cpp), into build-gpu/. Carry build-gpu/shapetune and build-gpu/tests/*_tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-gpu scripts/build.sh -DSHAPETUNE_STATIC_DEPS=ON "$@"
ls -la build-gpu/shapetune build-gpu/tests/shapetune_gpu_tests build-gpu/tests/shapetune_cpu_tests
