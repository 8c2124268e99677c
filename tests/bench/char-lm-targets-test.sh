#!/usr/bin/env bash
# bench/char_lm_targets.py on made-up runner and peer results: every target met (exit 0, and the
# tuned run's recurrent layers shown with their resolution), a step slower than 2x eager (exit 1,
# MISSED), a parity check missed (exit 1), and a directory with no configuration (exit 2).
set -euo pipefail
judge="$(dirname "$0")/../../bench/char_lm_targets.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
def timing(ms):
    return {"median_step_ms": ms, "p10_step_ms": ms * 0.99, "p90_step_ms": ms * 1.01, "warmup_steps": 50, "timed_steps": 150}
def config(name, tuned_ms, parity_ok=True):
    os.makedirs(f"{d}/{name}/c")
    tuned = {"resolutions": [
        {"op": "lstm layer 0", "problem": "lstm.backward/f32/T=64,N=64,D=512,H=512", "variant": "persistent_stepwise",
         "config": "forward=2", "source": "exact"},
        {"op": "head", "problem": "gemm_bias.nt/f32/m=4096,n=155,k=512", "variant": "mma_sync", "config": "tile=1",
         "source": "exact"}],
        "timing_suite": timing(tuned_ms)}
    parity = [{"check": "loss after step 1", "ok": parity_ok},
              {"check": "validation bits per character after step 100", "ok": True, "runner": 2.9788, "torch": 2.9788,
               "relative_difference": 0.0}]
    torch = {"modes": {"eager": {"timing_suite": timing(6.0), "parity": parity},
                       "cuda_graph": {"timing_suite": timing(3.4), "parity": []}}}
    for file, value in (("tuned", tuned), ("library", {"timing_suite": timing(3.6)}), ("torch", torch)):
        json.dump(value, open(f"{d}/{name}/c/{file}.json", "w"))
config("good", 2.9)
config("slow", 3.2)
config("unequal", 2.9, parity_ok=False)
os.makedirs(f"{d}/empty")
PY
expect() {  # expect CODE DIR PATTERN
  set +e; out=$(python3 "$judge" "$dir/$2" 2>&1); code=$?; set -e
  [ "$code" = "$1" ] || { echo "FAIL: $2 exited $code, expected $1"; echo "$out"; exit 1; }
  grep -q -- "$3" <<<"$out" || { echo "FAIL: $2: no '$3' in"; echo "$out"; exit 1; }
}
expect 0 good "| >= 2x faster than PyTorch eager | 2.900 ms vs 6.000 ms (p10 5.940, p90 6.060) (2.07x) | met |"
expect 0 good "| (tuned recurrent layers) | lstm layer 0: persistent_stepwise{forward=2} (exact) | shown |"
expect 1 slow "(1.88x) | MISSED |"
expect 1 unequal "(missed: eager: loss after step 1) | MISSED |"
expect 2 empty "no configuration directory"
echo "char_lm_targets.py: 5 checks passed"
