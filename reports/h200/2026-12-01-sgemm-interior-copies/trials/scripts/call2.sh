#!/usr/bin/env bash
# Call 2: SASS of warp_tiled_async tile 0 (nn); Nsight Compute per-instruction stall samples of it
# and of cuBLAS's SGEMM at 4096^3; a bench of both.
set -u
cd "$(dirname "$0")/.."
b=build-gpu
tar -C $b -xJf $b/bundle.tar.xz
cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
$ncu --version | tail -1
$cuobjdump -sass $b/shapetune-bench > /tmp/all.sass 2>&1
python3 - <<'PY'
import re, os
s = open('/tmp/all.sass').read()
parts = re.split(r'\n\s*(?=Function : )', s)
for p in parts:
    head = p.split('\n', 1)[0]
    if 'warp_tiled_async_kernelILi0ELb1ELb0' in head:
        open(os.environ['OUT'] + '/async0-nn.sass', 'w').write(p)
        print(head[:90], p.count('\n'))
PY
run_ncu() {  # name kernel-regex case-filter
  timeout 150 $ncu --kernel-name "regex:$2" --launch-count 1 --cache-control all --clock-control none \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section Occupancy --section ComputeWorkloadAnalysis -f -o /tmp/$1 \
    $b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 6 --max-samples 6 --time-cap 0.01 \
    --benchmark_filter="$3" > /tmp/$1.log 2>&1
  echo "ncu $1 rc=$?"; tail -3 /tmp/$1.log
  $ncu --import /tmp/$1.ncu-rep --page details > $OUT/$1-details.txt 2>&1
  $ncu --import /tmp/$1.ncu-rep --page source --csv --print-source sass > /tmp/$1-source.csv 2>&1
  echo "source csv lines: $(wc -l < /tmp/$1-source.csv)"; head -c 600 /tmp/$1-source.csv; echo
}
run_ncu ours warp_tiled_async 'warp_tiled_async.tile=0./iter'
run_ncu cublas 'gemm|xmma|cutlass' 'cublas/iter'
tar -C /tmp -cJf $OUT/source-csv.tar.xz ours-source.csv cublas-source.csv ours.log cublas.log
for f in ours cublas; do
  echo "== $f"; grep -E "^ +(Duration|Registers Per Thread|Grid Size|Block Size|Shared Memory Configuration Size|Static Shared Memory Per Block|Dynamic Shared Memory Per Block|Issued Warp Per Scheduler|Warp Cycles Per Issued Instruction|Achieved Occupancy|Executed Ipc Active) " $OUT/$f-details.txt
  grep -E "^  [a-z_]+\.[a-z]+ *$|Function Name|  void|^  [A-Za-z_0-9]+.*\(" $OUT/$f-details.txt | head -2
done
$b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 10 --benchmark_filter='(warp_tiled_async.tile=0.|cublas)/iter' 2>&1 | grep -E "^gemm"
