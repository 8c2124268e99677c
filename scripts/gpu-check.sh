#!/usr/bin/env bash
# Everything a GPU box should prove, in one call: device, GPU and CPU tests, the copy ceiling,
# the quick sweep (plus any shape files given as arguments), winners and exports, and the
# PyTorch peer numbers measured on the same GPU in the same run. Prints a short summary last;
# full logs and the database go to $OUT (default ./gpu-check-out).
#
#   scripts/gpu-check.sh [shapes/softmax.yaml ...]
#
# Binaries come from $BUILD_DIR (default build-gpu: scripts/build-for-gpu-box.sh makes it on a
# CPU machine, statically linked against yaml-cpp and SQLite, so only CUDA's libraries are
# needed here). Set BUILD_DIR=build to use a local build instead.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-check-out}
build=${BUILD_DIR:-build-gpu}
work="$out/work"
mkdir -p "$work"
export SHAPETUNE_SOURCE_DIR=$PWD
db="$work/h200.db"
summary="$work/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

run_step() {  # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  note "$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$*")"
  return $rc
}

note "shapetune gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) build $("$build/shapetune" --help | head -n 1 | awk '{print $2}' | tr -d :)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$work/nvidia-smi.csv" 2>&1
run_step devices 60 "$build/shapetune" devices
run_step gpu-tests 240 "$build/tests/shapetune_gpu_tests" --gtest_output=xml:"$work/gpu-tests.xml"
run_step cpu-tests 120 "$build/tests/shapetune_cpu_tests" --gtest_output=xml:"$work/cpu-tests.xml"
run_step ceilings 120 "$build/shapetune" ceilings --db "$db"
run_step sweep-quick 240 "$build/shapetune" sweep shapes/quick.yaml --db "$db"
for extra in "$@"; do
  run_step "sweep-$(basename "$extra" .yaml)" 300 "$build/shapetune" sweep "$extra" --db "$db"
done
run_step winners 60 "$build/shapetune" winners --db "$db"
run_step export-json 60 "$build/shapetune" export --db "$db" --format json -o "$work/winners.json"
run_step export-csv 60 "$build/shapetune" export --db "$db" --format csv -o "$work/winners.csv"
if python3 -c 'import torch' 2>/dev/null; then
  run_step peers-torch 120 python3 bench/peers/softmax_torch.py --json "$work/peers-torch.json"
fi
run_step softmax-targets 60 python3 bench/softmax_targets.py "$db" "$work/peers-torch.json"
# One self-contained file (no -wal/-shm beside it) to bring back and commit.
python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('VACUUM INTO ?', (sys.argv[2],))" "$db" "$out/h200.db"

{
  echo
  echo "== tests"
  grep -h -E '^\[  (PASSED|FAILED|SKIPPED) *\]|tests? ran' "$work/gpu-tests.log" "$work/cpu-tests.log"
  echo "== ceilings"
  tail -n +2 "$work/ceilings.log"
  echo "== winners"
  cat "$work/winners.log"
  [ -f "$work/peers-torch.log" ] && { echo "== torch"; cat "$work/peers-torch.log"; }
  echo "== targets"
  cat "$work/softmax-targets.log"
} >>"$summary"
cp "$summary" "$out/summary.txt"
# At most a few files come back from the GPU box: the logs travel as one archive.
tar -C "$out" -czf "$out/gpu-check-logs.tar.gz" work && rm -rf "$work"
cat "$out/summary.txt"
