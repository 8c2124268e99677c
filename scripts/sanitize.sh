#!/usr/bin/env bash
# Builds the CPU tests with AddressSanitizer and UndefinedBehaviorSanitizer on all host code and
# runs them (CI does, after scripts/test.sh). Builds into build-asan/ (or $BUILD_DIR). Device code
# is not what is checked (no kernel runs here) and is most of the build time, so it is compiled to
# PTX only (virtual architectures: nvcc runs no ptxas). Host code at -O1 with line tables only
# (-g1), as ASan's documentation suggests: a sanitized test file compiled in 11 s instead of 25 at
# RelWithDebInfo's -O2 -g, and the reports keep their file:line stacks.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-asan}
scripts/setup-deps.sh
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHAPETUNE_SANITIZE=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELWITHDEBINFO=-O1 -Xcompiler=-g1 -DNDEBUG" \
  -DCMAKE_CUDA_ARCHITECTURES=75-virtual -DSHAPETUNE_SM90A_ARCHITECTURES=90a-virtual "$@"
cmake --build "$build_dir" --parallel "$(nproc)" --target shapetune_cpu_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The CPU tests share nothing on disk or in ports, so they run side by side, one per core.
ctest --test-dir "$build_dir" --output-on-failure --timeout 1200 -L cpu -j "$(nproc)"
