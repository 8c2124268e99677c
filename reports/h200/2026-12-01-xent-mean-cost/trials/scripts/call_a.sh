#!/usr/bin/env bash
# Trial call A: xent + MLP GPU tests on the new mean; residual bf16 register configs vs the ring; xent f32 register configs.
cd "$(dirname "$0")/.."
tar -C build-gpu -xJf build-gpu/bundle.tar.xz
export SHAPETUNE_SOURCE_DIR=$PWD SHAPETUNE_FASHION_MNIST=$PWD/data/fashion-mnist
timeout 200 build-gpu/tests/shapetune_gpu_tests --gtest_filter='*SoftmaxXent*:*Mlp*' > $OUT/gpu-tests.log 2>&1; echo "tests rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) *\]|tests? ran' $OUT/gpu-tests.log
timeout 300 build-gpu/shapetune-bench scratch/trial.yaml --all-configs --min-samples 30 \
  --benchmark_filter='(fused_register\{.*round_h=0|fused_ring\{block_size=256,packs_per_thread=2,stages=2,round_h=0|fused_register_row\{threads_per_row=(16|32),)' \
  --benchmark_out=$OUT/bench.json --benchmark_out_format=json > $OUT/bench.log 2>&1; echo "bench rc=$?"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/bench.json"))
for b in d["benchmarks"]:
    print("%-130s %9.2f us  p10 %9.2f p90 %9.2f" % (b["name"][:130], b["real_time"] * (1e6 if b.get("time_unit") == "s" else 1e-3 if b.get("time_unit") == "ns" else 1), b.get("p10_us", 0), b.get("p90_us", 0)))
PY
