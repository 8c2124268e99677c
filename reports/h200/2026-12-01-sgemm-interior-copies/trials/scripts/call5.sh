#!/usr/bin/env bash
# Call 5 (uncommitted trial tiles 4-7 on bcb2059 + branch-free interior copies): GEMM GPU tests;
# bench of every warp_tiled_async tile against cuBLAS (two rounds); Nsight Compute samples of tile 3.
set -u
cd "$(dirname "$0")/.."
b=build-gpu
tar -C $b -xJf $b/bundle.tar.xz
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
timeout 240 $b/tests/shapetune_gpu_tests --gtest_filter='*GemmVariant*' > $OUT/gpu-tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/gpu-tests.txt | head
for round in 1 2; do
  $b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 10 --benchmark_filter='(warp_tiled_async.tile=..|cublas)/iter' 2>&1 |
    grep -E "^gemm" | awk -v r=$round '{print "r" r, $1, $2, $3}' | sed -e 's/gemm.nn.f32.m=4096,n=4096,k=4096.//' -e 's/.iterations:1.manual_time//'
done > $OUT/bench.txt
cat $OUT/bench.txt
timeout 150 $ncu --kernel-name "regex:warp_tiled_async" --launch-count 1 --cache-control all --clock-control none \
  --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats --section SpeedOfLight \
  -f -o /tmp/t3 $b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 6 --max-samples 6 --time-cap 0.01 \
  --benchmark_filter='warp_tiled_async.tile=3./iter' > /tmp/t3.log 2>&1
echo "ncu rc=$?"
$ncu --import /tmp/t3.ncu-rep --page details > $OUT/t3-details.txt 2>&1
$ncu --import /tmp/t3.ncu-rep --page source --csv --print-source sass > /tmp/t3-source.csv 2>&1
xz -T4 /tmp/t3-source.csv && mv /tmp/t3-source.csv.xz $OUT/
grep -E "^ +(Duration|Registers Per Thread|Issued Warp Per Scheduler|Warp Cycles Per Issued Instruction|Executed Ipc Active|Achieved Occupancy) " $OUT/t3-details.txt
$cuobjdump -sass $b/shapetune-bench > /tmp/all.sass 2>&1
python3 - <<'PY'
import re, os
s = open('/tmp/all.sass').read()
for p in re.split(r'\n\s*(?=Function : )', s):
    head = p.split('\n', 1)[0]
    if 'warp_tiled_async_kernelILi3ELb1ELb0' in head and p.count('\n') > 1000:
        open(os.environ['OUT'] + '/async3-nn.sass', 'w').write(p)
PY
