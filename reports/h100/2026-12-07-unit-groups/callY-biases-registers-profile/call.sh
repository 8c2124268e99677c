#!/usr/bin/env bash
# Call Y: persistent_block's unit groups at 8fe3a17 (biases in shared memory, fewer live registers): the block GPU tests, the SASS of
# the GRU f32 unit-group kernels, issue 20's H 128 forward swept again, and Nsight Compute's stall reasons and
# per-instruction stall samples of the GRU (T 64, N 64, f32) at two unit-group configs and the row layout's best.
set -uo pipefail
export SHAPETUNE_SOURCE_DIR=$PWD
L=$OUT/logs; mkdir -p $L x/new; S=$OUT/summary.txt
tar -C x/new -xJf build-gpu90/bundle.tar.xz || exit 2
B=x/new
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $B/shapetune --version; ncu --version | tail -1; } > $S 2>&1
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 ))s" >> $S; }
timeout 100 $B/tests/shapetune_gpu_tests --gtest_filter='Dtypes/RnnVariants.PersistentBlock*' > $L/gpu-tests.log 2>&1
at "gpu tests: $(grep -E '^\[  (PASSED|FAILED)' $L/gpu-tests.log | tr '\n' ' ')" $?
grep -E '^\[  FAILED|Failure' $L/gpu-tests.log | cut -c1-200 | head -20 >> $S
cuobjdump -sass $B/shapetune 2>/dev/null | awk '/Function :/ {p = ($3 ~ /group_kernelIfLNS1_4CellE1ELi1ELi(24|0)E/)} p' > $L/gru-f32-group.sass
at "sass lines $(wc -l < $L/gru-f32-group.sass)" $?
timeout 80 $B/shapetune sweep build-gpu90/rnn128f.yaml --db $L/rnn.db --variant persistent_block,cudnn --budget 60 --seed 20261253 --counters none -v > $L/sweep-rnn128.log 2>&1
at "rnn128 sweep" $?
grep -E "^\[[0-9]+/" $L/sweep-rnn128.log | cut -c1-230 >> $S
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum"
for c in "k_split=4,register_quads=24,project=0,unit_groups=1" "k_split=4,register_quads=0,project=0,unit_groups=1" "k_split=1,register_quads=24,project=0,unit_groups=0"; do
  n=$(echo $c | tr -dc '0-9'); 
  timeout 90 ncu --clock-control none --kernel-name regex:"group_kernel|block_kernel" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --metrics "$M" -o $L/p$n $B/shapetune-bench build-gpu90/rnn128f.yaml --variant persistent_block \
    --all-configs --benchmark_filter="gru.forward/f32/T=64.*rows_per_block=1,$c" --min-samples 6 --max-samples 6 > $L/ncu-$n.out 2>&1
  at "ncu $c" $?
  ncu -i $L/p$n.ncu-rep --page raw --csv > $L/raw-$n.csv 2>&1
  ncu -i $L/p$n.ncu-rep --page source --csv --print-source sass > $L/source-$n.csv 2>&1
  echo "$c: $(wc -l < $L/source-$n.csv) source lines" >> $S
  python3 - $L/raw-$n.csv >> $S <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) >= 3:
    h, v = rows[0], rows[2]
    keep = [(k.replace('smsp__average_warps_issue_stalled_', '').replace('_per_issue_active.ratio', ''), x) for k, x in zip(h, v)
            if 'issue_stalled' in k or 'duration' in k or 'inst_executed.sum' == k.split('smsp__')[-1]]
    print('  ' + ' '.join(f'{k} {x}' for k, x in keep if x not in ('0', '0.00', '')))
PY
done
xz -9 $L/rnn.db; tar -C $OUT -cJf $OUT/logs.tar.xz logs && rm -rf $L; cat $S
