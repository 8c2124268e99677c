#!/usr/bin/env bash
# bench/targets.py's attention judge on made-up sweep databases (exit 1 whenever a target fails or is
# not measured): the "never slower than cudnn_sdpa" rule is not measured where no problem has a
# cudnn_sdpa candidate (it passed there before: a rule that could not fail), fails where the table's
# winner is slower, and the QKV projection's head-split rule takes the faster of packed_head_split
# and wgmma_head_split against split.
set -euo pipefail
judge="$(dirname "$0")/../../bench/targets.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import sqlite3, sys
d = sys.argv[1]
def db(name, candidates, kept=None):  # kept: the winner a table kept over a faster candidate
    c = sqlite3.connect(f"{d}/{name}.db")
    c.execute("CREATE TABLE ceilings (name TEXT, value REAL)")
    c.execute("CREATE TABLE winners (primitive TEXT, dtype TEXT, shape_key TEXT, variant TEXT, config_key TEXT, "
              "median_us REAL, flops REAL, bytes REAL)")
    c.execute("CREATE TABLE candidates (problem_key TEXT, variant TEXT, config_key TEXT, baseline INTEGER, status TEXT, "
              "stop_reason TEXT, median_us REAL, first_mismatch TEXT)")
    best = {}
    for key, variant, baseline, us in candidates:
        c.execute("INSERT INTO candidates VALUES (?, ?, 'c=1', ?, 'ok', 'ci', ?, NULL)", (key, variant, baseline, us))
        if key not in best or us < best[key][1]:
            best[key] = (variant, us)
    for key, (variant, us) in best.items():
        primitive, dtype, shape = key.split("/")
        variant, us = kept or (variant, us)
        c.execute("INSERT INTO winners VALUES (?, ?, ?, ?, 'c=1', ?, 1e12, 0)", (primitive, dtype, shape, variant, us))
    c.commit()
att = "attention.causal.split/f16/B=8,H=16,S=2048,hd=64"
qkv = "qkv_projection/tf32/B=64,S=128,H=4,hd=256"
db("no-cudnn", [(att, "flash_wgmma", 0, 175.0),
                (qkv, "split", 1, 456.0), (qkv, "packed_head_split", 0, 776.0), (qkv, "wgmma_head_split", 0, 267.0)])
db("cudnn-faster", [(att, "flash_wgmma", 0, 175.0), (att, "cudnn_sdpa", 1, 160.0)], kept=("flash_wgmma", 175.0))
db("cudnn-slower", [(att, "flash_wgmma", 0, 175.0), (att, "cudnn_sdpa", 1, 190.0),
                    (qkv, "split", 1, 100.0), (qkv, "packed_head_split", 0, 120.0)])
PY
expect() {  # expect CODE DB PATTERN
  set +e; out=$(python3 "$judge" "$dir/$2.db" --family attention 2>&1); code=$?; set -e
  [ "$code" = "$1" ] || { echo "FAIL: $2 exited $code, expected $1"; echo "$out"; exit 1; }
  grep -qF -- "$3" <<<"$out" || { echo "FAIL: $2: no '$3' in"; echo "$out"; exit 1; }
}
expect 1 no-cudnn "| 1 attention problems | winner never slower than cudnn_sdpa beyond 1% | cudnn_sdpa measured at none of them | not measured |"
expect 1 no-cudnn "wgmma_head_split 267.00 vs 456.00 us (x1.71); winner wgmma_head_split | PASS |"
expect 1 cudnn-faster "| 1 of 1 attention problems with cudnn_sdpa measured | winner never slower than cudnn_sdpa beyond 1% | attention.causal.split/f16/B=8,H=16,S=2048,hd=64: 175.0 vs 160.0 us | FAIL |"
expect 1 cudnn-slower "| 1 of 1 attention problems with cudnn_sdpa measured | winner never slower than cudnn_sdpa beyond 1% | none slower | PASS |"
expect 1 cudnn-slower "packed_head_split 120.00 vs 100.00 us (x0.83); winner split | FAIL |"
echo "targets.py (attention): 5 checks passed"
