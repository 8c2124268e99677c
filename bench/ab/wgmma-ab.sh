#!/usr/bin/env bash
# Builds bench/ab/wgmma_ab.cu twice, against kernels/ at REV and against the working tree, into
# OUTDIR/wgmma_ab_old and OUTDIR/wgmma_ab_new (sm_90a). Run both on a Hopper GPU and compare the
# columns: same driver, same shapes, same timing, so only the kernel file differs.
#   bench/ab/wgmma-ab.sh REV [OUTDIR]     (OUTDIR defaults to build-gpu90/ab; carry it to the GPU box)
# The H100 numbers of 2026-12-06 (23db4c7 against 4cb9dec) are in reports/h100/.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bench/ab/wgmma-ab.sh REV [OUTDIR]" >&2; exit 2; }
rev=$1 out=${2:-build-gpu90/ab}
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "error: '$rev' is not a commit here" >&2; exit 2; }
mkdir -p "$out"
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
git archive "$rev" kernels | tar -x -C "$old"
cp bench/ab/wgmma_ab.cu "$old/"
flags=(-O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -lcuda)
# Before the persistent axis (91a123e) wgmma() took no `persistent` argument.
grep -q "bool persistent" "$old/kernels/gemm/wgmma.cuh" || flags+=(-DWGMMA_NO_PERSISTENT)
nvcc "${flags[@]}" -I"$old" "$old/wgmma_ab.cu" "$old/kernels/gemm/wgmma_sm90a.cu" -o "$out/wgmma_ab_old" &
nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -lcuda -I. bench/ab/wgmma_ab.cu kernels/gemm/wgmma_sm90a.cu \
  -o "$out/wgmma_ab_new"
wait
echo "built $out/wgmma_ab_old ($rev) and $out/wgmma_ab_new (working tree)"
