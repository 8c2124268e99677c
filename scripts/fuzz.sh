#!/usr/bin/env bash
# Fuzzes every reader of outside data with libFuzzer under ASan and UBSan: shape files, databases
# (read, and merged into another), IDX files, text corpora, safetensors files, command lines.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60 (CI's fixed budget); each target first replays the inputs in
#                       tests/fuzz/regressions/TARGET (every crash found so far), then fuzzes.
#   TARGET              shape_file, database, merge, idx, char_corpus, safetensors, cli_args (default: all seven)
# Installs clang and its fuzzer runtime from Debian if missing. Builds into build-fuzz/ (or
# $FUZZ_BUILD_DIR). A crash, leak, sanitizer error or time-out stops with exit 1 and leaves the
# input in build-fuzz/crashes/TARGET/; add it to tests/fuzz/regressions/TARGET with a test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(shape_file database merge idx char_corpus safetensors cli_args)
build=${FUZZ_BUILD_DIR:-build-fuzz}

scripts/setup-deps.sh  # yaml-cpp, SQLite, zlib: the readers link them

need=()
command -v clang++-14 >/dev/null || command -v clang++ >/dev/null || need+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || need+=(libclang-rt-14-dev)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "fuzz: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cxx=$(command -v clang++-14 || command -v clang++)

cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" --parallel "$(nproc)"

corpus="$build/corpus"
"$build/make_seeds" "$build/seeds" >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
summary=()
for target in "${targets[@]}"; do
  mkdir -p "$corpus/$target" "$build/crashes/$target"
  seeds=("$build/seeds/$target")
  [ "$target" = shape_file ] && seeds=(shapes)
  [ "$target" = merge ] && seeds=("$build/seeds/database")
  [ "$target" = char_corpus ] && seeds=(docs)  # UTF-8 prose with tables and code
  regressions=tests/fuzz/regressions/$target
  if compgen -G "$regressions/*" >/dev/null; then
    echo "fuzz: $target: replaying $(ls "$regressions" | wc -l) regression inputs"
    "$build/fuzz_$target" -rss_limit_mb=2048 -timeout=10 "$regressions"/* 2>"$build/$target-regressions.log" ||
      { cat "$build/$target-regressions.log" >&2; exit 1; }
  fi
  echo "fuzz: $target: ${seconds}s"
  log="$build/$target.log"
  if ! "$build/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$build/crashes/$target/" "$corpus/$target" "${seeds[@]}" >"$log" 2>&1; then
    tail -60 "$log" >&2
    echo "fuzz: $target FAILED; the input is in $build/crashes/$target/" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  summary+=("$(printf '%-11s %9s runs in %ss, 0 crashes, corpus %s inputs' "$target" "$runs" "$seconds" "$(ls "$corpus/$target" | wc -l)")")
done
printf 'fuzz: %s\n' "${summary[@]}"
