#!/usr/bin/env bash
# Builds, on a CPU machine, the binaries scripts/gpu-check.sh runs on a GPU box: Release,
# sm_75 + sm_90, yaml-cpp and SQLite linked statically (the GPU box has no SQLite headers and
# another yaml-cpp), into build-gpu/. The binaries carry the same kernels, so they travel
# stripped in one xz archive, build-gpu/bundle.tar.xz (a device call carries at most 64 MiB);
# gpu-check.sh unpacks it. Carry build-gpu/bundle.tar.xz (and data/fashion-mnist for the MLP).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
BUILD_DIR=build-gpu scripts/build.sh -DSHAPETUNE_STATIC_DEPS=ON "$@"
stage=build-gpu/bundle
rm -rf "$stage" && mkdir -p "$stage/tests"
strip -o "$stage/shapetune" build-gpu/shapetune
strip -o "$stage/shapetune-bench" build-gpu/shapetune-bench
# Debian has no static libbenchmark: shapetune-bench finds this copy beside it ($ORIGIN).
benchmark_lib=$(ldd build-gpu/shapetune-bench | awk '/libbenchmark/ {print $3}')
[ -z "$benchmark_lib" ] || cp -L "$benchmark_lib" "$stage/$(basename "$benchmark_lib")"
strip -o "$stage/tests/shapetune_gpu_tests" build-gpu/tests/shapetune_gpu_tests
strip -o "$stage/tests/shapetune_cpu_tests" build-gpu/tests/shapetune_cpu_tests
# The CPU tests of the parallel sweep run this stand-in for a GPU worker.
strip -o "$stage/tests/shapetune_fixture_sweep" build-gpu/tests/shapetune_fixture_sweep
# One thread and a dictionary larger than any binary: xz then finds each binary's kernels again
# in the next one, so the archive holds them about once.
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB >build-gpu/bundle.tar.xz
rm -rf "$stage"
ls -la build-gpu/bundle.tar.xz
