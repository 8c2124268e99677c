// Where a QKV projection's C [M, 3 D] (D = heads x head_dim, M = batch x seq) goes instead of
// row-major: straight into the heads-split layout attention reads, so no transpose pass follows.
// Column j D + h head_dim + d of row b seq + s lands in dst[j][((b heads + h) seq + s) head_dim + d]
// (j = 0, 1, 2: Q, K, V). Both tensor-core GEMMs (tensor_core.cu, wgmma_sm90a.cu) write it.
// Host-safe: the catalogue (compiled by g++) includes this header through theirs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::gemm {

template <typename T>
struct HeadSplitOutput {
  T* dst[3] = {nullptr, nullptr, nullptr};
  std::int64_t seq = 0;
  int heads = 0, head_dim = 0;
};

// The element of output (row, col). Divides in 32 bits (the entry points keep rows and columns
// below 2^31): 64-bit divisions, four per element, made the epilogue cost more than the GEMM at
// D = 128. A run of columns stays contiguous within one head.
template <typename T>
__device__ __forceinline__ T* head_split_at(const HeadSplitOutput<T>& out, std::int64_t row, std::int64_t col) {
  const unsigned head_dim = static_cast<unsigned>(out.head_dim), seq = static_cast<unsigned>(out.seq);
  const unsigned width = static_cast<unsigned>(out.heads) * head_dim;
  const auto column = static_cast<unsigned>(col), r = static_cast<unsigned>(row);
  const unsigned which = column >= 2 * width ? 2 : column >= width ? 1 : 0;
  const unsigned within = column - which * width;
  const unsigned head = within / head_dim, d = within - head * head_dim;
  const unsigned batch = r / seq, position = r - batch * seq;
  // Selected, not indexed: a run-time index into the kernel parameter's array made the compiler
  // copy the whole parameter block to the stack (112 bytes a thread in the wgmma GEMM).
  T* const base = which == 0 ? out.dst[0] : which == 1 ? out.dst[1] : out.dst[2];
  return base + ((static_cast<std::size_t>(batch) * out.heads + head) * seq + position) * head_dim + d;
}

}  // namespace shapetune::kernels::gemm
