#!/usr/bin/env bash
# Builds, on a CPU machine, the binaries scripts/gpu-check.sh runs on a GPU box: Release,
# sm_75 + sm_90, yaml-cpp and SQLite linked statically (the GPU box has no SQLite headers and
# another yaml-cpp), into build-gpu/. The three binaries carry the same kernels, so they travel
# stripped in one xz archive, build-gpu/bundle.tar.xz (about a fifth of their size: a device
# call carries at most 64 MiB); gpu-check.sh unpacks it. Carry build-gpu/bundle.tar.xz.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-gpu scripts/build.sh -DSHAPETUNE_STATIC_DEPS=ON "$@"
stage=build-gpu/bundle
rm -rf "$stage" && mkdir -p "$stage/tests"
strip -o "$stage/shapetune" build-gpu/shapetune
strip -o "$stage/tests/shapetune_gpu_tests" build-gpu/tests/shapetune_gpu_tests
strip -o "$stage/tests/shapetune_cpu_tests" build-gpu/tests/shapetune_cpu_tests
tar -C "$stage" -cf - shapetune tests | xz -T0 -6 >build-gpu/bundle.tar.xz
rm -rf "$stage"
ls -la build-gpu/bundle.tar.xz
