#!/usr/bin/env bash
# Call 6 (uncommitted trial tiles 4-7 on bcb2059 + branch-free interior copies: tile 3 over 2 and 3
# stages, k_run 2): GEMM variant tests; bench of every warp_tiled_async tile against cuBLAS, 3 rounds.
set -u
cd "$(dirname "$0")/.."
b=build-gpu
tar -C $b -xJf $b/bundle.tar.xz
timeout 240 $b/tests/shapetune_gpu_tests --gtest_filter='*GemmVariant*' > $OUT/gpu-tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/gpu-tests.txt | head
for round in 1 2 3; do
  $b/shapetune-bench scratch/sgemm.yaml --all-configs --min-samples 10 --benchmark_filter='(warp_tiled_async.tile=[03-7].|cublas)/iter' 2>&1 |
    grep -E "^gemm" | awk -v r=$round '{print "r" r, $1, $2, $3}' | sed -e 's/gemm.nn.f32.m=4096,n=4096,k=4096.//' -e 's/.iterations:1.manual_time//'
done > $OUT/bench.txt
cat $OUT/bench.txt
