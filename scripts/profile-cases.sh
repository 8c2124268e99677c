#!/usr/bin/env bash
# Nsight Compute on single shapetune-bench cases, one launch of the named kernel each: the stall
# reasons, scheduler, occupancy and memory sections that the sweep's CUPTI counters do not have.
# For a GPU box call (ncu works there), after or instead of gpu-check:
#
#   scripts/profile-cases.sh SHAPES.yaml KERNEL_REGEX CASE_REGEX [CASE_REGEX ...]
#
# CASE_REGEX is a Google Benchmark filter on the case names shapetune-bench prints (PROBLEM_KEY/
# VARIANT{CONFIG}/iterations:1/manual_time; '.' for the braces), e.g.
#   'f32/rows=8192,classes=32000/fused_ring_row.consumer_warps=16,chunk_bytes=32768,blocks_per_sm=1.'
# A config-less variant needs its end marked without '$' (the suffix follows it), e.g.
#   'gemm.nn/f32/m=4096,n=4096,k=4096/cublas/iterations', with a KERNEL_REGEX the library's
#   kernel matches.
# Each case's .ncu-rep, its details page as text and a digest go to $OUT/profile (default
# ./profile-out/profile); the digest of every case is printed last.
#
# NCU_SECTIONS adds sections to the default ones (e.g. "ComputeWorkloadAnalysis InstructionStats":
# pipe utilisation and instruction mix), NCU_METRICS adds metrics, comma-separated (e.g.
# "smsp__inst_executed.sum,smsp__inst_executed_pipe_xu.sum"); their values join the digest.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then sed -n '2,19p' "$0"; exit 2; fi
file=$1 kernel=$2
shift 2
out=${OUT:-$PWD/profile-out}/profile
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
if [ ! -x "$build/shapetune-bench" ] && [ -f "$build/bundle.tar.xz" ]; then
  tar -C "$build" -xJf "$build/bundle.tar.xz" || { echo "profile-cases: cannot unpack the bundle" >&2; exit 2; }
fi
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$ncu" ] || { echo "profile-cases: no ncu on this machine" >&2; exit 2; }
extra=()
for section in ${NCU_SECTIONS:-}; do extra+=(--section "$section"); done
[ -n "${NCU_METRICS:-}" ] && extra+=(--metrics "$NCU_METRICS")
digest="$out/digest.txt"
: >"$digest"
i=0
for case in "$@"; do
  i=$((i + 1))
  report="$out/case$i"
  # One sample: the case's first launch of the kernel (its verification) is the one profiled.
  "$ncu" --kernel-name "regex:$kernel" --launch-count 1 --cache-control all --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section LaunchStats "${extra[@]}" -f -o "$report" \
    "$build/shapetune-bench" "$file" --all-configs --min-samples 6 --max-samples 6 --time-cap 0.01 \
    --benchmark_filter="$case" >"$report.log" 2>&1
  echo "rc=$? ncu on $case" >>"$report.log"
  "$ncu" --import "$report.ncu-rep" --page details >"$report.txt" 2>&1
  "$ncu" --import "$report.ncu-rep" --page raw >"$report.raw.txt" 2>&1
  {
    echo "== case $i: $case"
    grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp|Dynamic Shared Memory Per Block|Grid Size|Block Size) " "$report.txt"
    grep -E "stall|Stall" "$report.txt" | head -12
    # The added metrics, and the busiest pipe when ComputeWorkloadAnalysis was asked for.
    metrics=${NCU_METRICS:-}
    for metric in ${metrics//,/ }; do grep -E "^ +$metric " "$report.txt"; done
    grep -E "is the highest-utilized pipeline" "$report.txt"
    # Cycles per issued instruction each stall reason costs, largest first.
    grep -E "smsp__average_warps?_issue_stalled_[a-z_]+_per_issue_active.ratio " "$report.raw.txt" |
      awk '{print $NF, $1}' | sort -rn | head -8
  } >>"$digest"
done
cat "$digest"
