#!/usr/bin/env bash
# bench/targets.py's attention and recurrent judges on made-up sweep databases (exit 1 whenever a
# target fails or is not measured): the "never slower than cudnn_sdpa" rule is not measured where no
# problem has a cudnn_sdpa candidate (it passed there before: a rule that could not fail), fails
# where the table's winner is slower, and the QKV projection's head-split rule takes the faster of
# packed_head_split and wgmma_head_split against split; where naive is the fastest, the table picks
# it (said, not judged, where it is the fastest nowhere). Issue 20's per-step floor: each rung's
# barriers plus the FLOPs at the ceiling, from this database's ceilings or --ceilings' of the same
# device, "not measured" without them.
set -euo pipefail
judge="$(dirname "$0")/../../bench/targets.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import sqlite3, sys
d = sys.argv[1]
def db(name, candidates, kept=None, ceilings=(), flops=1e12):
    # candidates: (problem key, variant, baseline, us[, config]); kept: the winner a table kept over a
    # faster candidate; ceilings: (device, name, value)
    c = sqlite3.connect(f"{d}/{name}.db")
    c.execute("CREATE TABLE ceilings (device_key TEXT, name TEXT, value REAL)")
    c.execute("CREATE TABLE winners (device_key TEXT, primitive TEXT, dtype TEXT, shape_key TEXT, variant TEXT, "
              "config_key TEXT, median_us REAL, flops REAL, bytes REAL)")
    c.execute("CREATE TABLE candidates (problem_key TEXT, variant TEXT, config_key TEXT, baseline INTEGER, status TEXT, "
              "stop_reason TEXT, median_us REAL, first_mismatch TEXT)")
    c.executemany("INSERT INTO ceilings VALUES (?, ?, ?)", ceilings)
    best = {}
    for key, variant, baseline, us, *config in candidates:
        config = config[0] if config else "c=1"
        c.execute("INSERT INTO candidates VALUES (?, ?, ?, ?, 'ok', 'ci', ?, NULL)", (key, variant, config, baseline, us))
        if key not in best or us < best[key][1]:
            best[key] = (variant, us, config)
    for key, (variant, us, config) in best.items():
        primitive, dtype, shape = key.split("/")
        variant, us = kept or (variant, us)
        c.execute("INSERT INTO winners VALUES ('gpu', ?, ?, ?, ?, ?, ?, ?, 0)", (primitive, dtype, shape, variant, config,
                                                                               us, flops))
    c.commit()
att = "attention.causal.split/f16/B=8,H=16,S=2048,hd=64"
qkv = "qkv_projection/tf32/B=64,S=128,H=4,hd=256"
db("no-cudnn", [(att, "flash_wgmma", 0, 175.0),
                (qkv, "split", 1, 456.0), (qkv, "packed_head_split", 0, 776.0), (qkv, "wgmma_head_split", 0, 267.0)])
db("cudnn-faster", [(att, "flash_wgmma", 0, 175.0), (att, "cudnn_sdpa", 1, 160.0)], kept=("flash_wgmma", 175.0))
db("cudnn-slower", [(att, "flash_wgmma", 0, 175.0), (att, "cudnn_sdpa", 1, 190.0),
                    (qkv, "split", 1, 100.0), (qkv, "packed_head_split", 0, 120.0)])
tiny = "attention.causal.split/f16/B=1,H=1,S=1,hd=64"  # where naive's one launch may win
db("naive-picked", [(tiny, "naive", 0, 3.0), (tiny, "flash_mma", 0, 4.0), (tiny, "cudnn_sdpa", 1, 8.0)])
db("naive-passed-over", [(tiny, "naive", 0, 3.0), (tiny, "flash_mma", 0, 4.0)], kept=("flash_mma", 4.0))
db("naive-loses", [(tiny, "naive", 0, 14.0), (tiny, "flash_mma", 0, 2.0), (att, "naive", 0, 700.0),
                   (att, "flash_wgmma", 0, 175.0)])
# Issue 20's floor, T 10 and 1e9 FLOPs a problem: 2 us a step at 50 TFLOP/s, plus the barriers.
gru = "gru.forward/f32/T=10,N=4,D=8,H=16"
lstm = "lstm.backward/f32/T=10,N=4,D=8,H=16"
block = "gru.forward/tf32/T=10,N=4,D=8,H=16"
alone = "gru.forward/f32/T=10,N=4,D=8,H=17"  # cuDNN did not run: the floor is judged all the same
ceilings = [("gpu", "grid_barrier", 1e-6), ("gpu", "fp32_fma", 50e12), ("gpu", "tensor_tf32", 100e12),
            ("gpu", "cluster_barrier_8", 0.2e-6), ("gpu", "cluster_barrier_16", 0.3e-6),
            ("gpu", "launch_overhead_graph", 0.5e-6), ("other gpu", "grid_barrier", 9e-6)]
rnn = [(gru, "persistent_registers", 0, 60.0, "units_per_block=8,batch_groups=2"), (gru, "cudnn", 1, 120.0),
       (lstm, "persistent_stepwise", 0, 100.0, "forward=1,chain_splits=16,products=0"), (lstm, "cudnn", 1, 150.0),
       (lstm, "stepwise", 0, 90.0),
       (block, "persistent_block", 0, 30.0, "rows_per_block=1"), (block, "cudnn", 1, 40.0),
       (alone, "persistent_registers", 0, 50.0, "units_per_block=8,batch_groups=2")]
db("rnn", rnn, ceilings=ceilings, flops=1e9)
db("rnn-no-ceilings", rnn, flops=1e9)
db("ceilings-only", [], ceilings=ceilings)
PY
expect() {  # expect CODE DB PATTERN [FAMILY [JUDGE ARGS...]]
  local want=$1 name=$2 pattern=$3 family=${4:-attention} out code
  shift $(($# < 4 ? $# : 4))
  set +e; out=$(python3 "$judge" "$dir/$name.db" --family "$family" "$@" 2>&1); code=$?; set -e
  [ "$code" = "$want" ] || { echo "FAIL: $name exited $code, expected $want"; echo "$out"; exit 1; }
  grep -qF -- "$pattern" <<<"$out" || { echo "FAIL: $name: no '$pattern' in"; echo "$out"; exit 1; }
  checks=$((checks + 1))
}
checks=0
expect 1 no-cudnn "| 1 attention problems | winner never slower than cudnn_sdpa beyond 1% | cudnn_sdpa measured at none of them | not measured |"
expect 1 no-cudnn "wgmma_head_split 267.00 vs 456.00 us (x1.71); winner wgmma_head_split | PASS |"
expect 1 cudnn-faster "| 1 of 1 attention problems with cudnn_sdpa measured | winner never slower than cudnn_sdpa beyond 1% | attention.causal.split/f16/B=8,H=16,S=2048,hd=64: 175.0 vs 160.0 us | FAIL |"
expect 1 cudnn-slower "| 1 of 1 attention problems with cudnn_sdpa measured | winner never slower than cudnn_sdpa beyond 1% | none slower | PASS |"
expect 1 cudnn-slower "packed_head_split 120.00 vs 100.00 us (x0.83); winner split | FAIL |"
naive="the table picks naive where it truly wins (tiny S), within 1%"
expect 1 cudnn-slower "| 1 attention problems | $naive | naive is the fastest at none of them; naive measured at none of them | not exercised |"
expect 1 naive-loses "| 2 attention problems | $naive | naive is the fastest at none of them; nearest at attention.causal.split/f16/B=8,H=16,S=2048,hd=64: naive 700.00 vs flash_wgmma 175.00 us (4.0x) | not exercised |"
expect 0 naive-picked "| 1 of 1 attention problems where naive is the fastest accurate candidate | $naive | picked at every one | PASS |"
expect 1 naive-passed-over "| $naive | attention.causal.split/f16/B=1,H=1,S=1,hd=64: flash_mma 4.0 vs naive 3.0 us | FAIL |"
floor="persistent step within 2x of its floor (barrier + FLOPs at the ceiling)"
expect 1 rnn "| gru.forward f32 T=10,N=4,D=8,H=16 | $floor | persistent_registers{units_per_block=8,batch_groups=2} 6.00 us a step; floor 3.00 us = 1.00 (a grid barrier) + 2.00 (100.0 MFLOP at fp32_fma 50.0 TFLOP/s): 2.0x the floor; cuDNN 4.0x | PASS |" rnn
expect 1 rnn "| lstm.backward f32 T=10,N=4,D=8,H=16 | $floor | persistent_stepwise{forward=1,chain_splits=16,products=0} 10.00 us a step; floor 3.20 us = 1.20 (forward: a cluster barrier; backward: two graph kernels) + 2.00 (100.0 MFLOP at fp32_fma 50.0 TFLOP/s): 3.1x the floor; cuDNN 4.7x | FAIL |" rnn
expect 1 rnn "| gru.forward tf32 T=10,N=4,D=8,H=16 | $floor | persistent_block{rows_per_block=1} 3.00 us a step; floor 1.00 us = 0.00 (block barriers only) + 1.00 (100.0 MFLOP at tensor_tf32 100.0 TFLOP/s): 3.0x the floor; cuDNN 4.0x | FAIL |" rnn
expect 1 rnn "| gru.forward f32 T=10,N=4,D=8,H=17 | $floor | persistent_registers{units_per_block=8,batch_groups=2} 5.00 us a step; floor 3.00 us = 1.00 (a grid barrier) + 2.00 (100.0 MFLOP at fp32_fma 50.0 TFLOP/s): 1.7x the floor | PASS |" rnn
expect 1 rnn-no-ceilings "| gru.forward f32 T=10,N=4,D=8,H=16 | $floor | no grid_barrier ceiling measured on this device (--ceilings) | not measured |" rnn
expect 1 rnn-no-ceilings "| gru.forward f32 T=10,N=4,D=8,H=16 | $floor | persistent_registers{units_per_block=8,batch_groups=2} 6.00 us a step; floor 3.00 us" rnn --ceilings "$dir/ceilings-only.db"
echo "targets.py (attention, rnn): $checks checks passed"
