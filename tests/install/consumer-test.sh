#!/usr/bin/env bash
# The installed package, as another project sees it: installs a built shapetune into a temporary
# prefix, builds examples/dispatch_consumer against it as a project of its own, and runs it on a
# committed H200 database. It copies files and builds one .cpp: `cmake --install` never builds, so
# shapetune is not rebuilt (and the test fails if the build it installs is incomplete).
#   tests/install/consumer-test.sh BUILD_DIR [CMAKE [CXX_COMPILER]]
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=$(cd "$1" && pwd)
cmake=${2:-cmake}
cxx=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/shapetune-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A step's output only when it fails.
quietly() {
  if ! "$@" >"$work/step.log" 2>&1; then
    cat "$work/step.log"
    echo "FAILED: $*"
    exit 1
  fi
}
quietly "$cmake" --install "$build_dir" --prefix "$work/prefix"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
quietly "$cmake" -S "$source_dir/examples/dispatch_consumer" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release ${cxx:+"-DCMAKE_CXX_COMPILER=$cxx"}
quietly "$cmake" --build "$work/build"

# The MLP's GEMMs, swept on an H200. Expected answers as `shapetune winners --db` shows them.
db=$source_dir/reports/h200/2026-12-01-cublaslt-replay-at-a8e3136/mlp.db
# Hidden devices: the lookup alone, against the database's device, on any machine.
export CUDA_VISIBLE_DEVICES=
failures=0
expect() {
  local expected=$1
  shift
  local out
  if ! out=$("$work/build/dispatch_consumer" "$db" "$@" 2>&1); then
    printf 'dispatch_consumer %s failed:\n%s\n' "$*" "$out"
    failures=$((failures + 1))
    return
  fi
  for part in "$expected" "no CUDA device"; do
    if [[ $out != *"$part"* ]]; then
      printf 'dispatch_consumer %s\n  expected: %s\n  got:\n%s\n' "$*" "$part" "$out"
      failures=$((failures + 1))
      return
    fi
  done
  printf '%s\n' "$out" | head -2
}
expect $'gemm_bias_relu.nn/f32/m=10000,n=256,k=784 on NVIDIA H200|sm_90|132SM|140GiB: exact\n  variant cublaslt{algo=0}' \
  gemm_bias_relu.nn f32 m=10000 n=256 k=784
expect $': exact\n  variant smem_tiled{tile=16,pad=0}' gemm.tn f32 m=784 n=256 k=128
expect $': nearest (tuned for gemm.tn/f32/m=784,n=256,k=128)\n  variant smem_tiled{tile=16,pad=0}' \
  gemm.tn f32 k=128 m=700 n=256
expect ": fallback" gemm.nn f16 m=4096 n=4096 k=4096
[ "$failures" = 0 ]
