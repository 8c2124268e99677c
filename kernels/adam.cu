#include "kernels/adam.cuh"
#include "kernels/common/grid.cuh"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace shapetune::kernels::adam {
namespace {

constexpr int kFloatsPerPack = 4;
// A range's scalar head and tail together never exceed this; one thread updates each.
constexpr int kMaxEdges = 2 * (kFloatsPerPack - 1);
// Grid-stride loops cover the rest: more blocks than this add nothing but scheduling.
constexpr std::int64_t kMaxBlocks = 65536;

// The step's constants, folded in double on the host so that each reaches float rounded once.
struct Coefficients {
  float one_minus_beta1;
  float one_minus_beta2;
  float step_size;                  // lr / (1 - beta1^t)
  float inv_sqrt_bias_correction2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float decay;  // lr * weight_decay
};

Coefficients coefficients_of(const Hyperparameters& h) {
  const double bias_correction1 = 1 - std::pow(h.beta1, h.step);
  const double bias_correction2 = 1 - std::pow(h.beta2, h.step);
  return {static_cast<float>(1 - h.beta1),
          static_cast<float>(1 - h.beta2),
          static_cast<float>(h.lr / bias_correction1),
          static_cast<float>(1 / std::sqrt(bias_correction2)),
          static_cast<float>(h.eps),
          static_cast<float>(h.lr * h.weight_decay)};
}

// m and v written as steps toward g and g^2 (m + (1 - b1)(g - m)) use only 1 - beta, rounded
// once from double. The textbook b * m + (1 - b) * g would also carry float(beta)'s own error,
// which compounds: 0.999f is 1.3e-8 off, 1.3e-6 of v after 100 steps.
__device__ __forceinline__ void update(float& p, float g, float& m, float& v, const Coefficients& c) {
  m = fmaf(c.one_minus_beta1, g - m, m);
  v = fmaf(c.one_minus_beta2, fmaf(g, g, -v), v);
  const float denominator = fmaf(sqrtf(v), c.inv_sqrt_bias_correction2, c.eps);
  // Decay and gradient step are summed first, so p (~1) is rounded once against the small update.
  p -= fmaf(c.decay, p, c.step_size * (m / denominator));
}

__device__ __forceinline__ void update(float4& p, const float4& g, float4& m, float4& v, const Coefficients& c) {
  update(p.x, g.x, m.x, v.x, c);
  update(p.y, g.y, m.y, v.y, c);
  update(p.z, g.z, m.z, v.z, c);
  update(p.w, g.w, m.w, v.w, c);
}

__host__ __device__ __forceinline__ Buffers shifted(const Buffers& b, std::int64_t offset) {
  return {b.params + offset, b.grads + offset, b.exp_avg + offset, b.exp_avg_sq + offset};
}

__device__ __forceinline__ void update_element(const Buffers& b, std::int64_t i, const Coefficients& c) {
  float p = b.params[i], m = b.exp_avg[i], v = b.exp_avg_sq[i];
  update(p, b.grads[i], m, v, c);
  b.params[i] = p;
  b.exp_avg[i] = m;
  b.exp_avg_sq[i] = v;
}

// Updates packs first + u * stride (u < kPacks, those below `packs`) of the 16-byte aligned `body`.
// Every load is issued before the first update: 4 * kPacks 16-byte loads in flight per thread.
template <int kPacks>
__device__ __forceinline__ void update_packs(const Buffers& body, std::int64_t first, std::int64_t stride,
                                             std::int64_t packs, const Coefficients& c) {
  float4 p[kPacks], g[kPacks], m[kPacks], v[kPacks];
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t k = first + u * stride;
    if (k < packs) {
      p[u] = reinterpret_cast<const float4*>(body.params)[k];
      g[u] = reinterpret_cast<const float4*>(body.grads)[k];
      m[u] = reinterpret_cast<const float4*>(body.exp_avg)[k];
      v[u] = reinterpret_cast<const float4*>(body.exp_avg_sq)[k];
    }
  }
#pragma unroll
  for (int u = 0; u < kPacks; ++u) {
    const std::int64_t k = first + u * stride;
    if (k < packs) {
      update(p[u], g[u], m[u], v[u], c);
      reinterpret_cast<float4*>(body.params)[k] = p[u];
      reinterpret_cast<float4*>(body.exp_avg)[k] = m[u];
      reinterpret_cast<float4*>(body.exp_avg_sq)[k] = v[u];
    }
  }
}

// A range of `length` elements at `start`: `head` scalars up to the first 16-byte boundary,
// `packs` float4s, then `tail` scalars. The four buffers share their alignment, so the split of
// params serves all of them.
struct Split {
  std::int64_t head;
  std::int64_t packs;
  std::int64_t tail;

  __host__ __device__ static Split of(const float* start, std::int64_t length) {
    const auto misalignment = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(start) & 15) / sizeof(float));
    std::int64_t head = misalignment == 0 ? 0 : kFloatsPerPack - misalignment;
    head = head < length ? head : length;
    const std::int64_t packs = (length - head) / kFloatsPerPack;
    return {head, packs, length - head - packs * kFloatsPerPack};
  }
  __host__ __device__ int edges() const { return static_cast<int>(head + tail); }
  // Index of the k-th scalar element (head ones first, then tail ones).
  __device__ std::int64_t edge_index(int k) const { return k < head ? k : head + packs * kFloatsPerPack + (k - head); }
};

// ---- v1 ------------------------------------------------------------------------------------
__global__ void scalar_kernel(Buffers tensor, std::int64_t size, Coefficients c) {
  grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    update_element(tensor, i, c);
}

// ---- v2 ------------------------------------------------------------------------------------
template <int kPacks>
__global__ void vec4_kernel(Buffers tensor, Split split, Coefficients c) {
  grid_dependency_sync();
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < split.edges())
    update_element(tensor, split.edge_index(threadIdx.x), c);
  const Buffers body = shifted(tensor, split.head);
  // A block's tile: kPacks rows of blockDim.x consecutive packs, so every load is coalesced.
  const std::int64_t tile = static_cast<std::int64_t>(blockDim.x) * kPacks;
  for (std::int64_t first = blockIdx.x * tile + threadIdx.x; first < split.packs; first += gridDim.x * tile)
    update_packs<kPacks>(body, first, blockDim.x, split.packs, c);
}

// ---- v3 ------------------------------------------------------------------------------------
// The tensors of one launch, passed by value (kernel parameter space: no device allocation and no
// host-to-device copy, so the launch can be captured in a CUDA graph). Every tensor's aligned
// body packs are numbered consecutively across the tensors, and so are its scalar edges, so the
// grid walks one flat range of packs as vec4 walks one tensor, finding each pack's tensor by a
// binary search in the table: a few dozen instructions per 112 bytes moved, far inside the
// issue budget, where per-tensor chunks cost each block a search and a serial prologue per chunk.
// kCapacity: tensors per launch. Two sizes, because the whole table is copied at every launch:
// a model's short list (the MLP's six) should not pay for 14 KiB of parameters.
template <int kCapacity>
struct PackTable {
  std::int64_t first_pack[kCapacity + 1];  // tensor k's body packs are [first_pack[k], first_pack[k + 1])
  std::int64_t body[kCapacity];            // element index of tensor k's first body pack
  std::int64_t offset[kCapacity];          // element index of tensor k's first element
  std::int32_t first_edge[kCapacity + 1];  // tensor k's edge elements are [first_edge[k], first_edge[k + 1])
  int tensors;
};
constexpr int kSmallTable = 32;
constexpr int kLargeTable = kTensorsPerLaunch;
static_assert(sizeof(PackTable<kLargeTable>) < 32000, "kernel parameters are limited to 32764 bytes");

// The last k < tensors with first[k] <= i: the owner of item i, past any tensor without items
// (whose first equals its successor's).
template <typename Index, std::size_t kEntries>
__device__ __forceinline__ int owner(const Index (&first)[kEntries], int tensors, std::int64_t i) {
  int low = 0, high = tensors - 1;
  while (low < high) {
    const int mid = (low + high + 1) / 2;
    if (first[mid] <= i)
      low = mid;
    else
      high = mid - 1;
  }
  return low;
}

// __grid_constant__: the table is read in place from parameter space, even at run-time indices
// (without it, each thread would copy the table to local memory). kPacks is tunable because it
// sets the registers: every pack of all four buffers is loaded before the first is updated.
template <int kPacks, int kCapacity>
__global__ void multi_tensor_kernel(Buffers buffers, const __grid_constant__ PackTable<kCapacity> table,
                                    Coefficients c) {
  grid_dependency_sync();
  const int tensors = table.tensors;
  // Edge elements: one thread each, the grid's first threads.
  const std::int64_t thread = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (thread < table.first_edge[tensors]) {
    const int t = owner(table.first_edge, tensors, thread);
    const std::int64_t k = thread - table.first_edge[t];
    const std::int64_t head = table.body[t] - table.offset[t];
    const std::int64_t tail_start = table.body[t] + kFloatsPerPack * (table.first_pack[t + 1] - table.first_pack[t]);
    update_element(buffers, k < head ? table.offset[t] + k : tail_start + (k - head), c);
  }

  const std::int64_t packs = table.first_pack[tensors];
  const std::int64_t tile = static_cast<std::int64_t>(blockDim.x) * kPacks;
  for (std::int64_t first = blockIdx.x * tile + threadIdx.x; first < packs; first += gridDim.x * tile) {
    float4 p[kPacks], g[kPacks], m[kPacks], v[kPacks];
    std::int64_t at[kPacks];  // element index of pack u
#pragma unroll
    for (int u = 0; u < kPacks; ++u) {
      const std::int64_t k = first + static_cast<std::int64_t>(u) * blockDim.x;
      if (k < packs) {
        const int t = owner(table.first_pack, tensors, k);
        at[u] = table.body[t] + kFloatsPerPack * (k - table.first_pack[t]);
        p[u] = *reinterpret_cast<const float4*>(buffers.params + at[u]);
        g[u] = *reinterpret_cast<const float4*>(buffers.grads + at[u]);
        m[u] = *reinterpret_cast<const float4*>(buffers.exp_avg + at[u]);
        v[u] = *reinterpret_cast<const float4*>(buffers.exp_avg_sq + at[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kPacks; ++u) {
      const std::int64_t k = first + static_cast<std::int64_t>(u) * blockDim.x;
      if (k < packs) {
        update(p[u], g[u], m[u], v[u], c);
        *reinterpret_cast<float4*>(buffers.params + at[u]) = p[u];
        *reinterpret_cast<float4*>(buffers.exp_avg + at[u]) = m[u];
        *reinterpret_cast<float4*>(buffers.exp_avg_sq + at[u]) = v[u];
      }
    }
  }
}

// ---- host side -----------------------------------------------------------------------------
unsigned blocks_for(std::int64_t work_items, std::int64_t per_block) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((work_items + per_block - 1) / per_block, 1, kMaxBlocks));
}

bool same_alignment(const Buffers& b) {
  const auto phase = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) & 15; };
  return phase(b.grads) == phase(b.params) && phase(b.exp_avg) == phase(b.params) &&
         phase(b.exp_avg_sq) == phase(b.params);
}

bool valid_sizes(const std::vector<std::int64_t>& sizes) {
  return std::all_of(sizes.begin(), sizes.end(), [](std::int64_t s) { return s >= 0; });
}

// Where each tensor starts in the buffers.
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> offsets(sizes.size());
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    offsets[k] = offset;
    offset += sizes[k];
  }
  return offsets;
}

// Registers per thread can forbid a block size: refuse it before launching, as the sweep records
// refusals as unsupported configs (and a failed launch would also break a graph capture).
template <typename Kernel>
cudaError_t check_block_fits(Kernel kernel, int block_size) {
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return block_size > attributes.maxThreadsPerBlock ? cudaErrorLaunchOutOfResources : cudaSuccess;
}

// The checks every entry point shares; cudaSuccess when the launch may go ahead.
cudaError_t check_arguments(const std::vector<std::int64_t>& sizes, const Hyperparameters& h, int block_size) {
  if (invalid_reason(h) != nullptr || !valid_sizes(sizes) || block_size < 1) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The vectorized kernels give each edge element one thread of a block.
cudaError_t check_vector_arguments(const Buffers& b, const std::vector<std::int64_t>& sizes, const Hyperparameters& h,
                                   int block_size) {
  if (cudaError_t e = check_arguments(sizes, h, block_size); e != cudaSuccess) return e;
  if (block_size < kMaxEdges) return cudaErrorInvalidValue;
  return same_alignment(b) ? cudaSuccess : cudaErrorNotSupported;
}

template <int kPacks>
cudaError_t launch_vec4(const Buffers& b, const std::vector<std::int64_t>& sizes, const Coefficients& c, int block_size,
                        cudaStream_t stream) {
  auto kernel = vec4_kernel<kPacks>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  const std::vector<std::int64_t> offsets = offsets_of(sizes);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 0) continue;
    const Buffers tensor = shifted(b, offsets[k]);
    const Split split = Split::of(tensor.params, sizes[k]);
    kernel<<<blocks_for(split.packs, std::int64_t{block_size} * kPacks), block_size, 0, stream>>>(tensor, split, c);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// The table of tensors [first, first + count) of `sizes`; the four buffers share params' alignment.
template <int kCapacity>
PackTable<kCapacity> pack_table(const Buffers& b, const std::vector<std::int64_t>& sizes,
                                const std::vector<std::int64_t>& offsets, std::size_t first, int count) {
  PackTable<kCapacity> table{};
  table.tensors = count;
  for (int k = 0; k < count; ++k) {
    const std::int64_t offset = offsets[first + k];
    const Split split = Split::of(b.params + offset, sizes[first + k]);
    table.offset[k] = offset;
    table.body[k] = offset + split.head;
    table.first_pack[k + 1] = table.first_pack[k] + split.packs;
    table.first_edge[k + 1] = table.first_edge[k] + split.edges();
  }
  return table;
}

template <int kPacks, int kCapacity>
cudaError_t launch_multi_tensor(const Buffers& b, const std::vector<std::int64_t>& sizes, const Coefficients& c,
                                int block_size, cudaStream_t stream) {
  auto kernel = multi_tensor_kernel<kPacks, kCapacity>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  const std::vector<std::int64_t> offsets = offsets_of(sizes);
  for (std::size_t first = 0; first < sizes.size(); first += kCapacity) {
    const int count = static_cast<int>(std::min<std::size_t>(kCapacity, sizes.size() - first));
    const PackTable<kCapacity> table = pack_table<kCapacity>(b, sizes, offsets, first, count);
    const std::int64_t packs = table.first_pack[count], edges = table.first_edge[count];
    if (packs == 0 && edges == 0) continue;
    // Blocks for the packs (grid-stride beyond kMaxBlocks), and at least enough threads for the edges.
    const unsigned blocks =
        std::max(blocks_for(packs, std::int64_t{block_size} * kPacks), blocks_for(edges, block_size));
    kernel<<<blocks, block_size, 0, stream>>>(b, table, c);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <int kPacks>
cudaError_t launch_multi_tensor(const Buffers& b, const std::vector<std::int64_t>& sizes, const Coefficients& c,
                                int block_size, cudaStream_t stream) {
  if (sizes.size() <= static_cast<std::size_t>(kSmallTable))
    return launch_multi_tensor<kPacks, kSmallTable>(b, sizes, c, block_size, stream);
  return launch_multi_tensor<kPacks, kLargeTable>(b, sizes, c, block_size, stream);
}

}  // namespace

const char* invalid_reason(const Hyperparameters& h) {
  if (!(h.beta1 >= 0 && h.beta1 < 1)) return "beta1 must be in [0, 1)";
  if (!(h.beta2 >= 0 && h.beta2 < 1)) return "beta2 must be in [0, 1)";
  if (!(h.step >= 1)) return "step must be >= 1";
  return nullptr;
}

std::vector<std::int64_t> tensor_sizes(std::int64_t n, std::int64_t tensors) {
  if (tensors < 1 || tensors > n || tensors > kMaxTensors)
    throw std::invalid_argument("adam tensor_sizes: cannot split " + std::to_string(n) + " parameters into " +
                                std::to_string(tensors) + " tensors");
  constexpr std::int64_t kWeightShares = 1000, kBiasShares = 1;
  const std::int64_t total_shares = (tensors + 1) / 2 * kWeightShares + tensors / 2 * kBiasShares;
  const std::int64_t extra = n - tensors;  // beyond the one element every tensor holds
  // floor(extra * shares / total_shares) without the product: both factors can be large.
  const auto share_of = [&](std::int64_t shares) {
    return extra / total_shares * shares + extra % total_shares * shares / total_shares;
  };
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(tensors));
  std::int64_t shares_so_far = 0, extra_so_far = 0;
  for (std::int64_t k = 0; k < tensors; ++k) {
    shares_so_far += k % 2 == 0 ? kWeightShares : kBiasShares;
    const std::int64_t extra_through_k = share_of(shares_so_far);
    sizes[static_cast<std::size_t>(k)] = 1 + extra_through_k - extra_so_far;
    extra_so_far = extra_through_k;
  }
  return sizes;
}

cudaError_t scalar(const Buffers& b, const std::vector<std::int64_t>& sizes, const Hyperparameters& h, int block_size,
                   cudaStream_t stream) {
  if (cudaError_t e = check_arguments(sizes, h, block_size); e != cudaSuccess) return e;
  const Coefficients c = coefficients_of(h);
  const std::vector<std::int64_t> offsets = offsets_of(sizes);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 0) continue;
    scalar_kernel<<<blocks_for(sizes[k], block_size), block_size, 0, stream>>>(shifted(b, offsets[k]), sizes[k], c);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t vec4(const Buffers& b, const std::vector<std::int64_t>& sizes, const Hyperparameters& h, int block_size,
                 int packs_per_thread, cudaStream_t stream) {
  if (cudaError_t e = check_vector_arguments(b, sizes, h, block_size); e != cudaSuccess) return e;
  const Coefficients c = coefficients_of(h);
  switch (packs_per_thread) {
    case 1: return launch_vec4<1>(b, sizes, c, block_size, stream);
    case 2: return launch_vec4<2>(b, sizes, c, block_size, stream);
    case 4: return launch_vec4<4>(b, sizes, c, block_size, stream);
    case 8: return launch_vec4<8>(b, sizes, c, block_size, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t multi_tensor(const Buffers& b, const std::vector<std::int64_t>& sizes, const Hyperparameters& h,
                         int block_size, int packs_per_thread, cudaStream_t stream) {
  if (cudaError_t e = check_vector_arguments(b, sizes, h, block_size); e != cudaSuccess) return e;
  const Coefficients c = coefficients_of(h);
  switch (packs_per_thread) {
    case 1: return launch_multi_tensor<1>(b, sizes, c, block_size, stream);
    case 2: return launch_multi_tensor<2>(b, sizes, c, block_size, stream);
    case 4: return launch_multi_tensor<4>(b, sizes, c, block_size, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace shapetune::kernels::adam
