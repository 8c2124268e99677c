// Empirical ceilings of the device, measured with the same timing method as the kernels
// (reports compare against these, never against datasheet numbers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "harness/measure.hpp"

namespace shapetune {

struct MeasuredCeiling {
  std::string name;    // "dram_copy_memcpy"
  double value = 0;    // in `unit`
  std::string unit;    // "B/s"
  std::string method;  // one line: what was timed and how the value follows from it
  TimingStats timing;
};

// Device-memory bandwidth three ways over `bytes` of source (bytes read + bytes written per
// second): cudaMemcpy device-to-device, a 16-byte-per-thread copy kernel, a 4-byte one.
std::vector<MeasuredCeiling> measure_memory_ceilings(Measurer&, std::int64_t bytes);

// The best of the memory ceilings: what "% of copy bandwidth" is measured against.
constexpr const char* kCopyCeilingName = "dram_copy_best";

// The FP32 FMA rate (FLOP/s, 2 per FMA) of a kernel of independent FMA chains, four blocks of
// 256 threads per SM: `fp32_fma`, the roof of f32 problems in reports.
MeasuredCeiling measure_fma_ceiling(Measurer&);

// cuBLAS GEMM at n x n x n (FLOP/s, 2 n^3 per GEMM), through the same wrapper as the cuBLAS
// baseline: `tensor_f16`, `tensor_bf16` (cublasGemmEx, fp32 accumulation) and `tensor_tf32`
// (fp32 tensors, TF32 products), the roofs of those dtypes in reports; and `sgemm_fp32`
// (cublasSgemm, CUDA cores), a reference only. A dtype the device has no tensor cores for, or
// that cuBLAS refuses, is left out with a line in `skipped`.
std::vector<MeasuredCeiling> measure_gemm_ceilings(Measurer&, std::int64_t n, std::vector<std::string>& skipped);

// Seconds per launch of an empty kernel (unit "s"): `launch_overhead_stream`, `launches`
// launches back to back on a stream between two events; `launch_overhead_graph`, the same
// launches captured into one CUDA graph and replayed.
std::vector<MeasuredCeiling> measure_launch_ceilings(Measurer&, int launches);

// Seconds per grid-wide barrier (unit "s"): `grid_barrier`, `rounds` barriers back to back in one
// cooperative launch of one block per SM. The per-step floor of a persistent RNN.
MeasuredCeiling measure_grid_barrier(Measurer&, int rounds);

// Seconds per cluster barrier (unit "s"): `cluster_barrier_C` for C = 2, 4, 8, 16 blocks, `rounds`
// barriers back to back in one cluster of C blocks of 128 threads. The per-step floor of the
// persistent_cluster RNN. Off compute capability 9.0 (no sm_90a kernel), or where a size cannot
// be placed, that size is left out with a line in `skipped`.
std::vector<MeasuredCeiling> measure_cluster_barriers(Measurer&, int rounds, std::vector<std::string>& skipped);

}  // namespace shapetune
