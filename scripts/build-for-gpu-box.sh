#!/usr/bin/env bash
# Builds, on a CPU machine, the binaries scripts/gpu-check.sh runs on a GPU box: Release,
# sm_75 + sm_90, yaml-cpp and SQLite linked statically (the GPU box has no SQLite headers and
# another yaml-cpp), into build-gpu/. The binaries carry the same kernels, so they travel
# stripped in one xz archive, build-gpu/bundle.tar.xz (a device call carries at most 64 MiB);
# gpu-check.sh unpacks it. Carry build-gpu/bundle.tar.xz.
#
# --sm90-only: an H200-only bundle (sm_90 SASS, no PTX, no sm_75) of shapetune, shapetune-bench
# (scripts/profile-cases.sh runs it) and the GPU tests, in build-gpu90/ (about 11 MB against 26):
# it leaves room in the 64 MiB carry for Fashion-MNIST, which the MLP and logreg tests and targets
# need; with data/fashion-mnist here it also writes build-gpu90/fashion-mnist.tar.xz (the IDX
# files, 26 MB against 30 gzipped), which gpu-check.sh unpacks. Carry both and run
# BUILD_DIR=build-gpu90 scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu sm90_only=0
if [ "${1:-}" = --sm90-only ]; then
  build=build-gpu90 sm90_only=1
  shift
  set -- -DCMAKE_CUDA_ARCHITECTURES=90-real "$@"
fi
scripts/setup-deps.sh
BUILD_DIR=$build scripts/build.sh -DSHAPETUNE_STATIC_DEPS=ON "$@"
stage=$build/bundle
rm -rf "$stage" && mkdir -p "$stage/tests"
strip -o "$stage/shapetune" $build/shapetune
strip -o "$stage/tests/shapetune_gpu_tests" $build/tests/shapetune_gpu_tests
strip -o "$stage/shapetune-bench" $build/shapetune-bench
# Debian has no static libbenchmark: shapetune-bench finds this copy beside it ($ORIGIN).
benchmark_lib=$(ldd $build/shapetune-bench | awk '/libbenchmark/ {print $3}')
[ -z "$benchmark_lib" ] || cp -L "$benchmark_lib" "$stage/$(basename "$benchmark_lib")"
if [ $sm90_only = 0 ]; then
  strip -o "$stage/tests/shapetune_cpu_tests" $build/tests/shapetune_cpu_tests
  # The CPU tests of the parallel sweep run this stand-in for a GPU worker.
  strip -o "$stage/tests/shapetune_fixture_sweep" $build/tests/shapetune_fixture_sweep
fi
# One thread and a dictionary larger than any binary: xz then finds each binary's kernels again
# in the next one, so the archive holds them about once.
if [ $sm90_only = 1 ] && compgen -G "data/fashion-mnist/*-ubyte.gz" >/dev/null; then
  mkdir -p "$stage/fashion-mnist"
  for f in data/fashion-mnist/*-ubyte.gz; do gzip -dc "$f" >"$stage/fashion-mnist/$(basename "$f" .gz)"; done
  tar -C "$stage/fashion-mnist" -cf - . | xz -9e -T2 >$build/fashion-mnist.tar.xz
  rm -rf "$stage/fashion-mnist"
  ls -la $build/fashion-mnist.tar.xz
fi
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB >$build/bundle.tar.xz
rm -rf "$stage"
ls -la $build/bundle.tar.xz
