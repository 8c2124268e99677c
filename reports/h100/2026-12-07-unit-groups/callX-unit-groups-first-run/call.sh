#!/usr/bin/env bash
# Call X: persistent_block's unit groups (4e64919) on the GPU: the block rung's GPU tests, the SASS spill
# count of the unit-group kernels, issue 20's H 128 forward problems swept (block, cluster, cuDNN), then
# shapes/rnn_targets.yaml into the same table with PyTorch's nn.LSTM/nn.GRU, judged.
set -uo pipefail
export SHAPETUNE_SOURCE_DIR=$PWD
C=build-gpu90/cj
L=$OUT/logs; mkdir -p $L x/new; S=$OUT/summary.txt
tar -C x/new -xJf build-gpu90/bundle.tar.xz || exit 2
B=x/new
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $B/shapetune --version
  python3 -c "import torch; print('torch', torch.__version__, torch.backends.cudnn.version())"; } > $S 2>&1
at() { echo "$1 rc=$2 at $(( $(date +%s) - T0 ))s" >> $S; }
timeout 150 $B/tests/shapetune_gpu_tests --gtest_filter='Dtypes/RnnVariants.PersistentBlock*' > $L/gpu-tests.log 2>&1
at "gpu tests: $(grep -E '^\[  (PASSED|FAILED)' $L/gpu-tests.log | tr '\n' ' ')" $?
grep -E '^\[  FAILED|Failure' $L/gpu-tests.log | cut -c1-200 | head -20 >> $S
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass $B/shapetune 2>/dev/null | awk '/Function :/ {f=$3} f ~ /group_kernel/ && /LDL|STL/ {n[f]++} END {for (k in n) print n[k], k}' \
    | sort -k2 > $L/group-spills.txt
  at "sass spill lines of $(wc -l < $L/group-spills.txt) group kernels" $?
else echo "no cuobjdump" >> $S; fi
timeout 100 $B/shapetune sweep build-gpu90/rnn128f.yaml --db $L/rnn.db --variant persistent_block,persistent_cluster,cudnn --budget 80 --seed 20261251 --counters none -v > $L/sweep-rnn128.log 2>&1
at "rnn128 sweep" $?
grep -E "^\[[0-9]+/" $L/sweep-rnn128.log | cut -c1-230 >> $S
timeout 250 $B/shapetune sweep shapes/rnn_targets.yaml --db $L/rnn.db --budget 220 --seed 20261252 --counters none > $L/sweep-rnn.log 2>&1
at "rnn targets sweep" $?
grep -E "^\[[0-9]+/" $L/sweep-rnn.log | cut -c1-200 >> $S
timeout 90 python3 bench/peers/rnn_torch.py --shapes '64,64,128,128;64,64,128,256;32,32,128,128;128,64,256,512' \
  --dtypes f32,tf32 --samples 20 --json $L/rnn-torch.json > $L/peers-rnn.log 2>&1
at "rnn peers" $?
python3 bench/targets.py $L/rnn.db --peers $L/rnn-torch.json --family rnn > $L/targets-rnn.md 2>&1
grep -E "FAIL|PASS" $L/targets-rnn.md | cut -c1-250 >> $S
xz -9 $L/rnn.db; xz -9 $L/sweep-rnn128.log; tar -C $OUT -cJf $OUT/logs.tar.xz logs && rm -rf $L; cat $S
