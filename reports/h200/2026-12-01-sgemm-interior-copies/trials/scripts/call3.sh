#!/usr/bin/env bash
# Call 3: GEMM GPU tests at the interior-copy commit; bench of warp_tiled_async tiles against cuBLAS;
# SASS and per-instruction Nsight Compute samples of tile 0 nn.
set -u
cd "$(dirname "$0")/.."
b=build-gpu
tar -C $b -xJf $b/bundle.tar.xz
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 240 $b/tests/shapetune_gpu_tests --gtest_filter='*Gemm*:-*Wgmma*:*TensorCore*:*Cublas*' > $OUT/gpu-tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests ran" $OUT/gpu-tests.txt | head
$b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 10 --benchmark_out=/dev/null --benchmark_filter='(warp_tiled_async.tile=..|cublas)/iter' 2>&1 | grep -E "^gemm" | awk '{print $1, $2, $3}'
$cuobjdump -sass $b/shapetune-bench > /tmp/all.sass 2>&1
python3 - <<'PY'
import re, os
s = open('/tmp/all.sass').read()
for p in re.split(r'\n\s*(?=Function : )', s):
    head = p.split('\n', 1)[0]
    if 'warp_tiled_async_kernelILi0ELb1ELb0' in head and p.count('\n') > 1000:
        open(os.environ['OUT'] + '/async0-nn.sass', 'w').write(p)
PY
timeout 150 $ncu --kernel-name "regex:warp_tiled_async" --launch-count 1 --cache-control all --clock-control none \
  --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats \
  -f -o /tmp/ours $b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 6 --max-samples 6 --time-cap 0.01 \
  --benchmark_filter='warp_tiled_async.tile=0./iter' > /tmp/ours.log 2>&1
echo "ncu rc=$?"
$ncu --import /tmp/ours.ncu-rep --page details > $OUT/ours-details.txt 2>&1
$ncu --import /tmp/ours.ncu-rep --page source --csv --print-source sass > /tmp/ours-source.csv 2>&1
xz -T4 /tmp/ours-source.csv && mv /tmp/ours-source.csv.xz $OUT/
grep -E "^ +(Duration|Registers Per Thread|Issued Warp Per Scheduler|Warp Cycles Per Issued Instruction|Executed Ipc Active) " $OUT/ours-details.txt
