#!/usr/bin/env bash
# Everything a GPU box should prove, in one call: device, GPU and CPU tests, the ceilings,
# the quick sweep and its `shapetune check` (plus any shape files given as arguments), winners and exports, the PyTorch
# peer numbers measured on the same GPU in the same run, and the issues' targets judged from
# all of it (bench/targets.py). Prints a short summary last; full logs and the database go to
# $OUT (default ./gpu-check-out).
#
#   scripts/gpu-check.sh [--no-tests] [--no-quick] [--peers softmax,memory_bound] [--sweep-timeout S]
#                        [--budget S] [--shard K/N] [--halving shapes/RACE.yaml] [--mlp] [shapes/FILE.yaml ...]
# (--budget: `shapetune sweep --budget` for each FILE; --sweep-timeout kills a FILE's sweep;
# --shard: each FILE's shard K of N only, so a file too long for one call is swept over N calls,
# whose databases (each with its own ceilings) `shapetune merge` joins for `bench/targets.py`;
# --halving: sweep RACE.yaml exhaustively, then with --strategy halving, and compare the two
# with bench/strategy_check.py. --mlp: sweep shapes/mlp.yaml, train the MLP 15 epochs with the
# tuned and the library dispatch, run bench/peers/mlp_torch.py, judge with bench/mlp_targets.py;
# the data comes from data/fashion-mnist (carry it) or Debian's package.)
#
# --scale-out: only the scale-out proof (and nothing else): shapes/quick.yaml swept once unsharded, as two
# --shard processes side by side on the one GPU (merged, and merged again to show nothing changes), and with
# --devices 0,0 (two workers on one GPU) with one worker killed (kill -9) mid-run; the winners compared
# with bench/compare_winners.py. The databases come back in $OUT/scale-out/.
#
# A device call is limited to 10 minutes, so a long run is split over calls: e.g. one call with
# the tests and the quick sweep, one with `--no-tests --no-quick shapes/memory_bound_targets.yaml`.
#
# GPU_TESTS_TIMEOUT (seconds, default 300) bounds the GPU test step; GPU_TESTS_FILTER (a
# --gtest_filter pattern) runs only those GPU tests, for a quick look at one family.
#
# Binaries come from $BUILD_DIR (default build-gpu: scripts/build-for-gpu-box.sh makes it on a
# CPU machine, statically linked against yaml-cpp and SQLite, so only CUDA's libraries are
# needed here, and packs it into build-gpu/bundle.tar.xz, unpacked here). Set BUILD_DIR=build
# to use a local build instead.
set -uo pipefail
cd "$(dirname "$0")/.."
tests=1 quick=1 mlp=0 scale_out=0 peers=softmax sweep_timeout=300 budget=() shard=() files=() halving=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-tests) tests=0 ;;
    --no-quick) quick=0 ;;
    --peers) peers=$2; shift ;;
    --sweep-timeout) sweep_timeout=$2; shift ;;
    --budget) budget=(--budget "$2"); shift ;;
    --shard) shard=(--shard "$2"); shift ;;
    --halving) halving+=("$2"); shift ;;
    --mlp) mlp=1 ;;
    --scale-out) scale_out=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done
out=${OUT:-$PWD/gpu-check-out}
build=${BUILD_DIR:-build-gpu}
# A carried bundle (scripts/build-for-gpu-box.sh) unpacks over the build directory.
if [ -f "$build/bundle.tar.xz" ]; then
  tar -C "$build" -xJf "$build/bundle.tar.xz" || { echo "gpu-check: cannot unpack $build/bundle.tar.xz" >&2; exit 2; }
fi
work="$out/work"
mkdir -p "$work"
export SHAPETUNE_SOURCE_DIR=$PWD
# Fashion-MNIST for the MLP runner and its GPU tests: carried beside the tree (or as the xz of its
# IDX files that build-for-gpu-box.sh --sm90-only writes), else Debian's.
if [ -f "$build/fashion-mnist.tar.xz" ] && [ ! -f data/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  mkdir -p data/fashion-mnist && tar -C data/fashion-mnist -xJf "$build/fashion-mnist.tar.xz" &&
    gzip -1f data/fashion-mnist/*-ubyte || echo "gpu-check: cannot unpack $build/fashion-mnist.tar.xz" >&2
fi
[ -f data/fashion-mnist/train-images-idx3-ubyte.gz ] && export SHAPETUNE_FASHION_MNIST=${SHAPETUNE_FASHION_MNIST:-$PWD/data/fashion-mnist}
mnist=${SHAPETUNE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
db="$work/sweep.db"  # named for what it holds, not the device (the device is recorded in it)
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
if [ $scale_out = 1 ]; then
  so="$out/scale-out"
  mkdir -p "$so"
  sweep=("$build/shapetune" sweep shapes/quick.yaml --seed 20261204)
  same_hash() { python3 bench/compare_winners.py --dump-hash "$1" | cut -d' ' -f1; }
  run_step so-unsharded 300 "${sweep[@]}" --db "$so/unsharded.db"
  t0=$SECONDS
  timeout 300 "${sweep[@]}" --shard 1/2 --db "$so/shard-1.db" >"$work/so-shard-1.log" 2>&1 &
  first=$!
  timeout 300 "${sweep[@]}" --shard 2/2 --db "$so/shard-2.db" >"$work/so-shard-2.log" 2>&1
  rc2=$?
  wait $first
  note "$(printf '%-22s rc=%-3s %4ss  %s' so-two-shards "$?,$rc2" "$((SECONDS - t0))" "${sweep[*]} --shard 1/2 and 2/2 side by side")"
  run_step so-merge 60 "$build/shapetune" merge "$so/merged.db" "$so/shard-1.db" "$so/shard-2.db"
  h1=$(same_hash "$so/merged.db")
  run_step so-merge-again 60 "$build/shapetune" merge "$so/merged.db" "$so/shard-2.db" "$so/shard-1.db" "$so/merged.db"
  h2=$(same_hash "$so/merged.db")
  note "merge twice (and with itself): $([ "$h1" = "$h2" ] && echo "every row unchanged" || echo "CHANGED") ($h1)"
  run_step so-compare-shards 60 python3 bench/compare_winners.py "$so/unsharded.db" "$so/merged.db"
  t0=$SECONDS
  timeout 400 "${sweep[@]}" --devices 0,0 --db "$so/devices.db" >"$work/so-devices.log" 2>&1 &
  parallel=$!
  sleep 30
  victim=$(pgrep -o -f "$so/devices.db.parts/shard-")
  if [ -n "$victim" ]; then
    note "killing worker $victim (kill -9) after 30 s: $(tr '\0' ' ' </proc/"$victim"/cmdline)"
    kill -9 "$victim"
  else
    note "no worker to kill after 30 s"
  fi
  wait $parallel
  note "$(printf '%-22s rc=%-3s %4ss  %s' so-devices "$?" "$((SECONDS - t0))" "${sweep[*]} --devices 0,0")"
  run_step so-compare-devices 60 python3 bench/compare_winners.py "$so/unsharded.db" "$so/devices.db"
  for db_file in "$so"/*.db; do  # self-contained files (no -wal/-shm) to bring back
    python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('VACUUM INTO ?', (sys.argv[2],))" "$db_file" "$db_file.vacuum" &&
      mv "$db_file.vacuum" "$db_file"
  done
  rm -rf "$so"/*.db-wal "$so"/*.db-shm "$so/devices.db.parts"
  xz -T0 "$so"/*.db
  {
    echo
    for step in so-unsharded so-shard-1 so-shard-2 so-devices; do
      echo "== $step (last lines)"
      tail -n 4 "$work/$step.log"
    done
    for step in so-merge so-merge-again; do echo "== $step"; cat "$work/$step.log"; done
    for step in so-compare-shards so-compare-devices; do
      echo "== $step"
      grep -v '^same ' "$work/$step.log"
    done
  } >>"$summary"
  cp "$summary" "$out/summary.txt"
  tar -C "$out" -czf "$out/gpu-check-logs.tar.gz" work && rm -rf "$work"
  cat "$out/summary.txt"
  exit 0
fi
if [ $tests = 1 ]; then
  run_step gpu-tests "${GPU_TESTS_TIMEOUT:-300}" "$build/tests/shapetune_gpu_tests" --gtest_output=xml:"$work/gpu-tests.xml" \
    ${GPU_TESTS_FILTER:+--gtest_filter="$GPU_TESTS_FILTER"}
  # The H200-only bundle (build-for-gpu-box.sh --sm90-only) carries no CPU tests: they ran where it was built.
  if [ -x "$build/tests/shapetune_cpu_tests" ]; then
    run_step cpu-tests 120 "$build/tests/shapetune_cpu_tests" --gtest_output=xml:"$work/cpu-tests.xml"
  else
    note "cpu-tests              skipped: $build has no tests/shapetune_cpu_tests (an H200-only bundle)"
  fi
fi
run_step ceilings 120 "$build/shapetune" ceilings --db "$db"
# The progress line (plain, in the log) and the events a tool reads come with it.
[ $quick = 1 ] && run_step sweep-quick 240 "$build/shapetune" sweep shapes/quick.yaml --db "$db" \
  --json-progress "$work/quick-events.jsonl"
# NVTX: Nsight Systems is not on the GPU box, so Nsight Compute shows the ranges around the kernels
# it profiles (two kernels of one problem, in the sweep's GPU worker).
if [ $quick = 1 ] && command -v ncu >/dev/null; then
  run_step nvtx 180 ncu --nvtx --target-processes all --clock-control none -c 2 --metrics gpu__time_duration.sum \
    "$build/shapetune" sweep shapes/quick.yaml --primitive softmax --db "$work/nvtx.db" --no-progress
fi
# What a user's CI would run next: the quick sweep's winners verified and timed again.
[ $quick = 1 ] && run_step check-quick 240 "$build/shapetune" check shapes/quick.yaml --db "$db"
for extra in "${files[@]}"; do
  run_step "sweep-$(basename "$extra" .yaml)" "$sweep_timeout" "$build/shapetune" sweep "$extra" --db "$db" "${budget[@]}" \
    "${shard[@]}"
done
for race in "${halving[@]}"; do
  name=$(basename "$race" .yaml)
  run_step "sweep-$name-exhaustive" "$sweep_timeout" "$build/shapetune" sweep "$race" --db "$db"
  run_step "sweep-$name-halving" "$sweep_timeout" "$build/shapetune" sweep "$race" --db "$db" --strategy halving
  run_step "strategy-$name" 60 python3 bench/strategy_check.py "$db"
done
if [ $mlp = 1 ]; then
  # --hot: in training the weights and activations stay in L2 from one launch to the next.
  run_step sweep-mlp "$sweep_timeout" "$build/shapetune" sweep shapes/mlp.yaml --db "$db" --hot
  for dispatch in tuned library; do
    run_step "train-mlp-$dispatch" 300 "$build/shapetune" train mlp --db "$db" --data "$mnist" --dispatch $dispatch \
      --results "$work/train-mlp-$dispatch.json"
  done
  run_step train-mlp-adam-after-graph 300 "$build/shapetune" train mlp --db "$db" --data "$mnist" --adam-after-graph \
    --results "$work/train-mlp-adam-after-graph.json"
  # Other seeds: how much of the accuracy is seed noise (the target is judged on seed 1).
  seed_runs=()
  for seed in 2 3 4 5; do
    run_step "seed-mlp-$seed" 120 "$build/shapetune" train mlp --db "$db" --data "$mnist" --seed $seed \
      --results "$work/seed-mlp-$seed.json"
    seed_runs+=(--seed-run "$work/seed-mlp-$seed.json")
  done
  python3 -c 'import torch' 2>/dev/null &&
    run_step peers-mlp 400 python3 bench/peers/mlp_torch.py --data "$mnist" --epochs 15 --json "$work/peers-mlp.json"
  run_step mlp-targets 60 python3 bench/mlp_targets.py "$work/train-mlp-tuned.json" "$work/train-mlp-library.json" \
    "$work/peers-mlp.json" "${seed_runs[@]}" --adam-after-graph "$work/train-mlp-adam-after-graph.json"
fi
run_step winners 60 "$build/shapetune" winners --db "$db"
run_step export-json 60 "$build/shapetune" export --db "$db" --format json -o "$work/winners.json"
run_step export-csv 60 "$build/shapetune" export --db "$db" --format csv -o "$work/winners.csv"
peer_args=()
if python3 -c 'import torch' 2>/dev/null; then
  for family in ${peers//,/ }; do
    run_step "peers-$family" 180 python3 "bench/peers/${family}_torch.py" --json "$work/peers-$family.json"
    peer_args+=(--peers "$work/peers-$family.json")
  done
fi
run_step targets 60 python3 bench/targets.py "$db" "${peer_args[@]}"
# One self-contained file (no -wal/-shm beside it) to bring back and commit.
python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('VACUUM INTO ?', (sys.argv[2],))" "$db" "$out/sweep.db"

{
  echo
  if [ $tests = 1 ]; then
    echo "== tests"
    grep -h -E '^\[  (PASSED|FAILED|SKIPPED) *\]|tests? ran' "$work/gpu-tests.log" "$work/cpu-tests.log"
  fi
  echo "== ceilings"
  tail -n +2 "$work/ceilings.log"
  [ -f "$work/check-quick.log" ] && { echo "== check (quick)"; tail -n 1 "$work/check-quick.log"; }
  if [ -f "$work/quick-events.jsonl" ]; then
    echo "== progress (quick): events by kind, the last progress event, warnings"
    grep -o '"event": "[a-z_]*"' "$work/quick-events.jsonl" | sort | uniq -c
    grep '"event": "progress"' "$work/quick-events.jsonl" | tail -n 1
    grep -E '^(progress|warning):' "$work/sweep-quick.log" | tail -n 6
  fi
  [ -f "$work/nvtx.log" ] && { echo "== nvtx (ncu)"; grep -i -E 'nvtx|shapetune' "$work/nvtx.log" | head -n 12; }
  echo "== winners"
  cat "$work/winners.log"
  for log in "$work"/peers-*.log; do
    [ -f "$log" ] && { echo "== torch ($(basename "$log" .log))"; cat "$log"; }
  done
  for log in "$work"/strategy-*.log; do
    [ -f "$log" ] && { echo "== strategies ($(basename "$log" .log))"; cat "$log"; }
  done
  echo "== targets"
  cat "$work/targets.log"
  for log in "$work"/train-mlp-tuned.log "$work"/train-mlp-library.log "$work/mlp-targets.log"; do
    [ -f "$log" ] && { echo "== $(basename "$log" .log)"; cat "$log"; }
  done
} >>"$summary"
cp "$summary" "$out/summary.txt"
# At most a few files come back from the GPU box: the logs travel as one archive.
tar -C "$out" -czf "$out/gpu-check-logs.tar.gz" work && rm -rf "$work"
cat "$out/summary.txt"
