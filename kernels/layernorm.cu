#include "kernels/layernorm.cuh"

#include "kernels/common/async_copy.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/reductions.cuh"
#include "kernels/common/vector_io.cuh"

namespace shapetune::kernels::layernorm {
namespace {

unsigned grid_for(std::int64_t work_items, std::int64_t per_block) {
  return static_cast<unsigned>((work_items + per_block - 1) / per_block);
}

template <typename T>
__device__ __forceinline__ float normalize(float v, float mean, float rstd, const T* gamma, const T* beta, int c) {
  return (v - mean) * rstd * to_float(gamma[c]) + to_float(beta[c]);
}

// ---- v1 ------------------------------------------------------------------------------------
template <typename T>
__global__ void thread_row_two_pass_kernel(Row<T> p) {
  grid_dependency_sync();
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (row >= p.rows) return;
  const T* x = p.x + row * p.cols;
  T* y = p.y + row * p.cols;
  CompensatedSum sum;
  for (int c = 0; c < p.cols; ++c) sum.add(to_float(x[c]));
  const float mean = sum.sum / p.cols;
  CompensatedSum squares;
  for (int c = 0; c < p.cols; ++c) {
    const float d = to_float(x[c]) - mean;
    squares.add(d * d);
  }
  const float rstd = rsqrtf(squares.sum / p.cols + p.epsilon);
  for (int c = 0; c < p.cols; ++c) y[c] = from_float<T>(normalize(to_float(x[c]), mean, rstd, p.gamma, p.beta, c));
}

// ---- v2, v3 --------------------------------------------------------------------------------
// `group` consecutive threads per row (a warp, or the whole block), scalar strided accesses.
template <typename T>
__device__ __forceinline__ void strided_row(const Row<T>& p, std::int64_t row, int thread, int group, Welford* partials) {
  const T* x = p.x + row * p.cols;
  T* y = p.y + row * p.cols;
  Welford stats;
  for (int c = thread; c < p.cols; c += group) stats.add(to_float(x[c]));
  stats = group_reduce(stats, group, partials, WelfordOp{});
  const float rstd = rsqrtf(stats.m2 / stats.count + p.epsilon);
  for (int c = thread; c < p.cols; c += group)
    y[c] = from_float<T>(normalize(to_float(x[c]), stats.mean, rstd, p.gamma, p.beta, c));
}

template <typename T>
__global__ void warp_row_welford_kernel(Row<T> p) {
  grid_dependency_sync();
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= p.rows) return;  // warp-uniform: the shuffles see whole warps
  strided_row(p, row, threadIdx.x % kWarpSize, kWarpSize, static_cast<Welford*>(nullptr));
}

template <typename T>
__global__ void block_row_welford_kernel(Row<T> p) {
  grid_dependency_sync();
  __shared__ Welford partials[32];
  strided_row(p, blockIdx.x, threadIdx.x, blockDim.x, partials);
}

// ---- shared by v4, v5 and the fused residual kernels -------------------------------------------
// One row's pointers, its split into head/body/tail and whether gamma/beta can be read in packs.
template <typename T>
struct RowView {
  const T* x;
  const T* r;  // residual only
  T* h;        // residual only
  T* y;
  RowSplit split;
  bool params_packed;  // gamma + head and beta + head are 16-byte aligned

  __device__ static RowView of(const ResidualRow<T>& p, std::int64_t row) {
    const std::int64_t offset = row * p.row.cols;
    RowView v{p.row.x + offset, p.r ? p.r + offset : nullptr, p.h ? p.h + offset : nullptr, p.row.y + offset,
              RowSplit::of(p.row.x + offset, p.row.cols), false};
    v.params_packed = ((reinterpret_cast<std::uintptr_t>(p.row.gamma + v.split.head) |
                        reinterpret_cast<std::uintptr_t>(p.row.beta + v.split.head)) & 15) == 0;
    return v;
  }
};

template <typename T>
__device__ __forceinline__ void load_params(const T* gamma, const T* beta, int c, bool packed,
                                            float (&g)[Pack<T>::kCount], float (&b)[Pack<T>::kCount]) {
  if (packed) {
    const Pack<T> gp = load_pack(gamma + c), bp = load_pack(beta + c);
#pragma unroll
    for (int j = 0; j < Pack<T>::kCount; ++j) g[j] = to_float(gp.v[j]), b[j] = to_float(bp.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < Pack<T>::kCount; ++j) g[j] = to_float(gamma[c + j]), b[j] = to_float(beta[c + j]);
  }
}

// The value whose statistics are taken: x, or h = x + r (rounded to T when asked).
template <typename T, bool kResidual>
__device__ __forceinline__ float source_value(T x, T r, bool round_h) {
  if constexpr (!kResidual) {
    return to_float(x);
  } else {
    const float h = to_float(x) + to_float(r);
    return round_h ? to_float(from_float<T>(h)) : h;
  }
}

template <typename T, bool kResidual>
__device__ __forceinline__ void load_source_pack(const RowView<T>& v, int pack, bool round_h,
                                                 float (&out)[Pack<T>::kCount]) {
  constexpr int K = Pack<T>::kCount;
  const int c = v.split.head + pack * K;
  const Pack<T> xp = load_pack(v.x + c);
  Pack<T> rp;
  if constexpr (kResidual) rp = load_pack(v.r + c);
#pragma unroll
  for (int j = 0; j < K; ++j) out[j] = source_value<T, kResidual>(xp.v[j], kResidual ? rp.v[j] : T{}, round_h);
}

template <typename T, bool kResidual>
__device__ __forceinline__ float load_source(const RowView<T>& v, int c, bool round_h) {
  return source_value<T, kResidual>(v.x[c], kResidual ? v.r[c] : T{}, round_h);
}

// kPlainStore: by store_pack_plain (fused_ring, see ring_row_kernel).
template <typename T, bool kPlainStore = false>
__device__ __forceinline__ void store_floats(T* p, const float (&values)[Pack<T>::kCount]) {
  if constexpr (kPlainStore)
    store_pack_plain(p, pack_of_floats<T>(values));
  else
    store_pack(p, pack_of_floats<T>(values));
}

template <typename T>
__device__ __forceinline__ Pack<T> normalized_pack(const RowView<T>& v, const Row<T>& p, int pack, float mean,
                                                   float rstd, const float (&values)[Pack<T>::kCount]) {
  constexpr int K = Pack<T>::kCount;
  float g[K], b[K], out[K];
  load_params(p.gamma, p.beta, v.split.head + pack * K, v.params_packed, g, b);
#pragma unroll
  for (int j = 0; j < K; ++j) out[j] = (values[j] - mean) * rstd * g[j] + b[j];
  return pack_of_floats<T>(out);
}

template <typename T>
__device__ __forceinline__ void write_normalized(const RowView<T>& v, const Row<T>& p, int pack, float mean, float rstd,
                                                 const float (&values)[Pack<T>::kCount]) {
  store_pack(v.y + v.split.head + pack * Pack<T>::kCount, normalized_pack(v, p, pack, mean, rstd, values));
}

// As write_normalized, from deviations d = value - mean that the caller kept from its variance
// pass: the same arithmetic (the subtraction is the one the variance took), one instruction per
// element fewer. The register kernels are instruction-bound in 16-bit types.
template <typename T, bool kPlainStore = false>
__device__ __forceinline__ void write_deviations(const RowView<T>& v, const Row<T>& p, int pack, float rstd,
                                                 const float (&d)[Pack<T>::kCount]) {
  constexpr int K = Pack<T>::kCount;
  float g[K], b[K], out[K];
  load_params(p.gamma, p.beta, v.split.head + pack * K, v.params_packed, g, b);
#pragma unroll
  for (int j = 0; j < K; ++j) out[j] = d[j] * rstd * g[j] + b[j];
  store_floats<T, kPlainStore>(v.y + v.split.head + pack * K, out);
}

// ---- v4 and fused streaming ----------------------------------------------------------------
template <typename T, bool kResidual>
__global__ void vec_welford_kernel(ResidualRow<T> p, int threads_per_row) {
  grid_dependency_sync();
  constexpr int K = Pack<T>::kCount;
  constexpr int kUnroll = 4;  // packs loaded before the first is used
  __shared__ Welford partials[32];
  const RowGroup g = RowGroup::of(p.row.rows, threads_per_row);
  const RowView<T> v = RowView<T>::of(p, g.active ? g.row : 0);

  Welford stats;
  if (g.active) {
    for (int k = g.thread; k < v.split.edges(); k += threads_per_row) {
      const int c = v.split.template edge_index<T>(k);
      const float value = load_source<T, kResidual>(v, c, p.round_h);
      if constexpr (kResidual) v.h[c] = from_float<T>(value);
      stats.add(value);
    }
    for (int base = g.thread; base < v.split.packs; base += kUnroll * threads_per_row) {
      float values[kUnroll][K];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (base + u * threads_per_row < v.split.packs)
          load_source_pack<T, kResidual>(v, base + u * threads_per_row, p.round_h, values[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pack = base + u * threads_per_row;
        if (pack >= v.split.packs) continue;
        if constexpr (kResidual) store_floats(v.h + v.split.head + pack * K, values[u]);
        // Statistics of the pack, then one merge: one division per pack instead of per element.
        Welford local;
        local.count = K;
#pragma unroll
        for (int j = 0; j < K; ++j) local.mean += values[u][j];
        local.mean /= K;
#pragma unroll
        for (int j = 0; j < K; ++j) local.m2 += (values[u][j] - local.mean) * (values[u][j] - local.mean);
        stats = merge(stats, local);
      }
    }
  }
  stats = group_reduce(stats, threads_per_row, partials, WelfordOp{});
  if (!g.active) return;

  const float rstd = rsqrtf(stats.m2 / stats.count + p.row.epsilon);
  // The write pass reads back what pass 1 read (x) or wrote (h): each thread only its own packs
  // and edges, so program order makes its own h stores visible.
  const T* source = kResidual ? v.h : v.x;
  for (int k = g.thread; k < v.split.edges(); k += threads_per_row) {
    const int c = v.split.template edge_index<T>(k);
    v.y[c] = from_float<T>(normalize(to_float(source[c]), stats.mean, rstd, p.row.gamma, p.row.beta, c));
  }
  // One pack at a time: loading kUnroll packs first, as pass 1 does, is no faster here.
  for (int pack = g.thread; pack < v.split.packs; pack += threads_per_row) {
    float values[K];
    to_floats(load_pack(source + v.split.head + pack * K), values);
    write_normalized(v, p.row, pack, stats.mean, rstd, values);
  }
}

// ---- v5 and fused in registers --------------------------------------------------------------
template <typename T, int kPacks, bool kResidual>
__global__ void register_row_kernel(ResidualRow<T> p, int threads_per_row) {
  grid_dependency_sync();
  constexpr int K = Pack<T>::kCount;
  __shared__ float partials[32];
  const RowGroup g = RowGroup::of(p.row.rows, threads_per_row);
  const RowView<T> v = RowView<T>::of(p, g.active ? g.row : 0);
  const bool has_edge = g.active && g.thread < v.split.edges();
  const int edge_col = has_edge ? v.split.template edge_index<T>(g.thread) : 0;

  // The row's only trip through memory: every pack is loaded before any is used.
  float values[kPacks][K];
  float edge = 0.f;
#pragma unroll
  for (int i = 0; i < kPacks; ++i) {
    const int pack = g.thread + i * threads_per_row;
    if (g.active && pack < v.split.packs) load_source_pack<T, kResidual>(v, pack, p.round_h, values[i]);
  }
  if (has_edge) edge = load_source<T, kResidual>(v, edge_col, p.round_h);

  auto in_row = [&](int i) { return g.active && g.thread + i * threads_per_row < v.split.packs; };
  float sum = edge;
#pragma unroll
  for (int i = 0; i < kPacks; ++i)
    if (in_row(i)) {
      // h goes out now: the values become deviations below.
      if constexpr (kResidual) store_floats(v.h + v.split.head + (g.thread + i * threads_per_row) * K, values[i]);
#pragma unroll
      for (int j = 0; j < K; ++j) sum += values[i][j];
    }
  // One division per row instead of two (div.rn is a MUFU and a correction sequence each).
  const float inv_cols = 1.f / static_cast<float>(p.row.cols);
  const float mean = group_reduce(sum, threads_per_row, partials, SumOp{}) * inv_cols;
  float squares = has_edge ? (edge - mean) * (edge - mean) : 0.f;
#pragma unroll
  for (int i = 0; i < kPacks; ++i)
    if (in_row(i)) {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        values[i][j] -= mean;
        squares += values[i][j] * values[i][j];
      }
    }
  const float variance = group_reduce(squares, threads_per_row, partials, SumOp{}) * inv_cols;
  if (!g.active) return;

  const float rstd = rsqrtf(variance + p.row.epsilon);
  if (has_edge) {
    if constexpr (kResidual) v.h[edge_col] = from_float<T>(edge);
    v.y[edge_col] = from_float<T>(normalize(edge, mean, rstd, p.row.gamma, p.row.beta, edge_col));
  }
#pragma unroll
  for (int i = 0; i < kPacks; ++i) {
    const int pack = g.thread + i * threads_per_row;
    if (pack >= v.split.packs) continue;
    write_deviations(v, p.row, pack, rstd, values[i]);
  }
}

// ---- fused ring ------------------------------------------------------------------------------
// fused_register loads, reduces and writes one row per block, so an SM's loads stop while its
// rows reduce, and registers can hold at most one row ahead per block: too few bytes in flight.
// Here persistent blocks walk rows blockIdx.x,
// + gridDim.x, ..., and thread 0 keeps the next `stages` row bodies of x and r on their way into
// a ring of shared-memory slots by bulk copies (TMA), one instruction per row body, each slot
// completing on its own mbarrier: several rows in flight per block at no cost in registers. Each
// thread reads its packs out of the slot into registers, as fused_register holds them; no thread
// reads the slot after the first reduction's barrier, so thread 0 refills it there. The two
// reductions use two partial buffers in turn: one barrier each. It pays for the residual step
// only (two input rows in flight); plain LayerNorm is faster from registers (register_row).

// The sum over the block, the same bits in every thread. `partials` holds one slot per warp; the
// caller alternates two buffers, so one barrier suffices: a buffer is written again only after
// the barrier of the reduction between, which every thread reaches after reading it.
__device__ __forceinline__ float block_sum(float v, float* partials) {
  v = lane_group_reduce(v, kWarpSize, SumOp{});
  if (threadIdx.x % kWarpSize == 0) partials[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarpSize); ++w) total += partials[w];
  return total;
}

// A ring slot: the row body of x, then that of r, slot_packs packs each.
struct RingSlots {
  uint4* data;      // slot 0
  unsigned full;    // shared address of slot 0's mbarrier (8 bytes each)
  int slot_packs;   // packs per row body (the widest any row has)

  __device__ uint4* x(int slot) const { return data + static_cast<std::size_t>(slot) * 2 * slot_packs; }
  __device__ uint4* r(int slot) const { return x(slot) + slot_packs; }
  __device__ unsigned bar(int slot) const { return full + 8u * static_cast<unsigned>(slot); }
};

// Thread 0: the bulk copies of a row's bodies into a slot (nothing past the last row). A row
// without a body still completes its slot's phase (0 bytes expected).
template <typename T>
__device__ __forceinline__ void request_ring_row(const ResidualRow<T>& p, std::int64_t row, const RingSlots& ring, int slot) {
  if (row >= p.row.rows) return;
  const std::int64_t offset = row * p.row.cols;
  const RowSplit split = RowSplit::of(p.row.x + offset, p.row.cols);
  const auto bytes = static_cast<unsigned>(split.packs) * 16u;
  mbarrier_arrive_expect_tx(ring.bar(slot), 2u * bytes);
  if (bytes == 0) return;
  bulk_copy_to_shared(shared_address(ring.x(slot)), p.row.x + offset + split.head, bytes, ring.bar(slot));
  bulk_copy_to_shared(shared_address(ring.r(slot)), p.r + offset + split.head, bytes, ring.bar(slot));
}

template <typename T, int kPacks>
__global__ void ring_row_kernel(ResidualRow<T> p, int stages, int slot_packs) {
  grid_dependency_sync();
  constexpr int K = Pack<T>::kCount;
  // Below sm_90 the mbarrier and bulk-copy wrappers trap; the launch refuses those devices.
  extern __shared__ uint4 ring_storage[];  // the slots, then their mbarriers
  __shared__ float partials[2][32];
  static_assert(static_cast<std::int64_t>(sizeof(partials)) == kRingStaticSharedBytes);
  const RingSlots ring{ring_storage, shared_address(ring_storage + static_cast<std::size_t>(stages) * 2 * slot_packs),
                       slot_packs};
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbarrier_init(ring.bar(s), 1);
    fence_barrier_init();
    for (int s = 0; s < stages; ++s) request_ring_row(p, blockIdx.x + static_cast<std::int64_t>(s) * gridDim.x, ring, s);
  }
  __syncthreads();

  const float inv_cols = 1.f / static_cast<float>(p.row.cols);  // a multiply per statistic, not a division
  int slot = 0;
  unsigned phase = 0;
  for (std::int64_t row = blockIdx.x; row < p.row.rows; row += gridDim.x) {
    const RowView<T> v = RowView<T>::of(p, row);
    const bool has_edge = static_cast<int>(threadIdx.x) < v.split.edges();
    const int edge_col = has_edge ? v.split.template edge_index<T>(threadIdx.x) : 0;
    // Edge elements (at most 14, one per thread) from global memory, requested before the wait.
    const float edge = has_edge ? load_source<T, true>(v, edge_col, p.round_h) : 0.f;
    auto in_row = [&](int i) { return static_cast<int>(threadIdx.x) + i * static_cast<int>(blockDim.x) < v.split.packs; };

    mbarrier_wait(ring.bar(slot), phase);
    const uint4* x_slot = ring.x(slot);
    const uint4* r_slot = ring.r(slot);
    float values[kPacks][K];
    float sum = edge;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      if (!in_row(i)) continue;
      const int pack = threadIdx.x + i * blockDim.x;
      const Pack<T> xp = load_pack(reinterpret_cast<const T*>(x_slot + pack));
      const Pack<T> rp = load_pack(reinterpret_cast<const T*>(r_slot + pack));
#pragma unroll
      for (int j = 0; j < K; ++j) {
        values[i][j] = source_value<T, true>(xp.v[j], rp.v[j], p.round_h);
        sum += values[i][j];
      }
      // h goes out now: the values become deviations below. Plain stores (here and for y), not
      // store_pack: the compiler schedules this kernel's pass loops better around them.
      store_floats<T, true>(v.h + v.split.head + pack * K, values[i]);
    }
    const float mean = block_sum(sum, partials[0]) * inv_cols;
    // Every thread has read its packs of this slot: refill it with the row `stages` steps ahead.
    if (threadIdx.x == 0) request_ring_row(p, row + static_cast<std::int64_t>(stages) * gridDim.x, ring, slot);
    if (++slot == stages) slot = 0, phase ^= 1;

    float squares = has_edge ? (edge - mean) * (edge - mean) : 0.f;
#pragma unroll
    for (int i = 0; i < kPacks; ++i)
      if (in_row(i)) {
#pragma unroll
        for (int j = 0; j < K; ++j) {
          values[i][j] -= mean;
          squares += values[i][j] * values[i][j];
        }
      }
    const float rstd = rsqrtf(block_sum(squares, partials[1]) * inv_cols + p.row.epsilon);

    if (has_edge) {
      v.h[edge_col] = from_float<T>(edge);
      v.y[edge_col] = from_float<T>(normalize(edge, mean, rstd, p.row.gamma, p.row.beta, edge_col));
    }
#pragma unroll
    for (int i = 0; i < kPacks; ++i)
      if (in_row(i)) write_deviations<T, true>(v, p.row, threadIdx.x + i * blockDim.x, rstd, values[i]);
  }
}

// ---- fused, pipelined -----------------------------------------------------------------------
// fused_vec and fused_register go load -> reduce (barriers, no memory traffic) -> write in every
// block, so an SM's loads stop while its rows reduce; with ~37% occupancy too few bytes were in
// flight to cover DRAM latency (bf16 65536 x 4096: 84% of copy bandwidth). Little's law: 4.3 TB/s
// times ~1 us of loaded latency is ~4.3 MB outstanding chip-wide, ~33 KB per SM (132 SMs), half
// of it reads here (x and r in, h and y out). Here a block walks rows with the next stages - 1
// rows' x and r already requested, whatever it is doing: a bf16 4096-wide row's x and r are 16 KB,
// so with 2 stages (32 KB of shared memory, 6 blocks per SM) up to 96 KB per SM is in flight
// and reads never pause for a reduction.
//
// Each thread copies packs threadIdx.x, + blockDim.x, ... of a row and only ever touches those
// slots of a stage, so neither a row's arrival nor a stage's reuse needs a barrier; the only
// barriers are the reduction's two per row.

template <typename T, bool kStreaming>
__device__ __forceinline__ void store_output_pack(T* p, const Pack<T>& pack) {
  if constexpr (kStreaming) {
    store_pack_streaming(p, pack);
  } else {
    store_pack(p, pack);
  }
}

// Once its x and r are read, a pack's slots hold its h as float (the value the statistics and y
// are taken of): the first four in the x slot, the next four (16-bit types) in the r slot.
template <typename T>
__device__ __forceinline__ void keep_floats(uint4* x_slot, uint4* r_slot, const float (&h)[Pack<T>::kCount]) {
  *reinterpret_cast<float4*>(x_slot) = make_float4(h[0], h[1], h[2], h[3]);
  if constexpr (Pack<T>::kCount == 8) *reinterpret_cast<float4*>(r_slot) = make_float4(h[4], h[5], h[6], h[7]);
}

template <typename T>
__device__ __forceinline__ void kept_floats(const uint4* x_slot, const uint4* r_slot, float (&h)[Pack<T>::kCount]) {
  const float4 low = *reinterpret_cast<const float4*>(x_slot);
  h[0] = low.x, h[1] = low.y, h[2] = low.z, h[3] = low.w;
  if constexpr (Pack<T>::kCount == 8) {
    const float4 high = *reinterpret_cast<const float4*>(r_slot);
    h[4] = high.x, h[5] = high.y, h[6] = high.z, h[7] = high.w;
  }
}

// Issues the copies of a row's body (its 16-byte packs) into a stage, then commits them as one
// group; past the last row the group is empty, which keeps one group per row step.
template <typename T>
__device__ __forceinline__ void prefetch_row(const ResidualRow<T>& p, std::int64_t row, uint4* x_slots,
                                             uint4* r_slots) {
  constexpr int K = Pack<T>::kCount;
  if (row < p.row.rows) {
    const std::int64_t offset = row * p.row.cols;
    const RowSplit split = RowSplit::of(p.row.x + offset, p.row.cols);
    const T* x = p.row.x + offset + split.head;
    const T* r = p.r + offset + split.head;
    for (int pack = threadIdx.x; pack < split.packs; pack += blockDim.x) {
      copy_async_16(x_slots + pack, x + pack * K);
      copy_async_16(r_slots + pack, r + pack * K);
    }
  }
  commit_async_copies();
}

// One row whose body has landed in (x_slots, r_slots), with the whole block. Edge elements (at
// most 14, one per thread) are read from global memory, where the body's copies left their lines
// in L2.
template <typename T, bool kStreaming>
__device__ __forceinline__ void normalize_staged_row(const ResidualRow<T>& p, std::int64_t row, uint4* x_slots,
                                                     uint4* r_slots, Welford* partials) {
  constexpr int K = Pack<T>::kCount;
  const RowView<T> v = RowView<T>::of(p, row);
  const int thread = threadIdx.x;
  const bool has_edge = thread < v.split.edges();
  const int edge_col = has_edge ? v.split.template edge_index<T>(thread) : 0;
  const float edge = has_edge ? load_source<T, true>(v, edge_col, p.round_h) : 0.f;

  // Pass 1: h from the staged x and r, written out at once (it needs no statistics) and kept in
  // the stage for the passes below; its sum, pack by pack (short float sums).
  float sum = edge;
  int count = has_edge ? 1 : 0;
  for (int pack = thread; pack < v.split.packs; pack += blockDim.x) {
    const Pack<T> xp = load_pack(reinterpret_cast<const T*>(x_slots + pack));
    const Pack<T> rp = load_pack(reinterpret_cast<const T*>(r_slots + pack));
    float h[K];
#pragma unroll
    for (int j = 0; j < K; ++j) h[j] = to_float(xp.v[j]) + to_float(rp.v[j]);
    const Pack<T> stored = pack_of_floats<T>(h);
    if (p.round_h) to_floats(stored, h);
    store_output_pack<T, kStreaming>(v.h + v.split.head + pack * K, stored);
    keep_floats<T>(x_slots + pack, r_slots + pack, h);
    float pack_sum = 0.f;
#pragma unroll
    for (int j = 0; j < K; ++j) pack_sum += h[j];
    sum += pack_sum;
    count += K;
  }
  if (has_edge) v.h[edge_col] = from_float<T>(edge);

  // Pass 2: squared deviations about this thread's own mean (exact two-pass on its elements);
  // the block merges the (count, mean, m2) triples with Chan's formula: one reduction per row.
  Welford stats;
  stats.count = static_cast<float>(count);
  stats.mean = count > 0 ? sum / stats.count : 0.f;
  float m2 = has_edge ? (edge - stats.mean) * (edge - stats.mean) : 0.f;
  for (int pack = thread; pack < v.split.packs; pack += blockDim.x) {
    float h[K];
    kept_floats<T>(x_slots + pack, r_slots + pack, h);
#pragma unroll
    for (int j = 0; j < K; ++j) m2 += (h[j] - stats.mean) * (h[j] - stats.mean);
  }
  stats.m2 = m2;
  stats = group_reduce(stats, static_cast<int>(blockDim.x), partials, WelfordOp{});
  const float rstd = rsqrtf(stats.m2 / stats.count + p.row.epsilon);

  // Pass 3: y.
  if (has_edge) v.y[edge_col] = from_float<T>(normalize(edge, stats.mean, rstd, p.row.gamma, p.row.beta, edge_col));
  for (int pack = thread; pack < v.split.packs; pack += blockDim.x) {
    float h[K];
    kept_floats<T>(x_slots + pack, r_slots + pack, h);
    store_output_pack<T, kStreaming>(v.y + v.split.head + pack * K,
                                     normalized_pack(v, p.row, pack, stats.mean, rstd, h));
  }
}

template <typename T, int kStages, bool kStreaming>
__global__ void pipelined_kernel(ResidualRow<T> p) {
  grid_dependency_sync();
  extern __shared__ uint4 staged[];  // [kStages][x, r][capacity] packs
  __shared__ Welford partials[32];
  static_assert(static_cast<std::int64_t>(sizeof(partials)) == kPipelinedStaticSharedBytes);
  const int capacity = p.row.cols / Pack<T>::kCount;  // no row's body has more packs
  auto x_slots = [&](int stage) { return staged + 2 * stage * capacity; };
  const std::int64_t stride = gridDim.x;

  std::int64_t row = blockIdx.x;
  for (int stage = 0; stage + 1 < kStages; ++stage)
    prefetch_row(p, row + stage * stride, x_slots(stage), x_slots(stage) + capacity);
  for (int stage = 0; row < p.row.rows; row += stride, stage = (stage + 1) % kStages) {
    // The previous row's stage is free (this thread is done with its slots): the row
    // kStages - 1 steps ahead goes there; then at most that many groups may stay in flight,
    // so this row's has landed.
    const int free_stage = (stage + kStages - 1) % kStages;
    prefetch_row(p, row + (kStages - 1) * stride, x_slots(free_stage), x_slots(free_stage) + capacity);
    wait_async_copies<kStages - 1>();
    normalize_staged_row<T, kStreaming>(p, row, x_slots(stage), x_slots(stage) + capacity, partials);
  }
}

// ---- residual add (unfused chain) ------------------------------------------------------------
template <typename T>
__global__ void residual_add_kernel(const T* __restrict__ x, const T* __restrict__ r, T* __restrict__ h,
                                    std::int64_t n) {
  grid_dependency_sync();
  constexpr int K = Pack<T>::kCount;
  const auto misalignment = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(x) & 15) / sizeof(T));
  const std::int64_t head = misalignment == 0 ? 0 : (K - misalignment < n ? K - misalignment : n);
  const std::int64_t packs = (n - head) / K;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  for (std::int64_t pack = first; pack < packs; pack += stride) {
    const std::int64_t c = head + pack * K;
    const Pack<T> xp = load_pack(x + c), rp = load_pack(r + c);
    Pack<T> out;
#pragma unroll
    for (int j = 0; j < K; ++j) out.v[j] = from_float<T>(to_float(xp.v[j]) + to_float(rp.v[j]));
    store_pack(h + c, out);
  }
  // Head and tail: fewer than 2K elements, taken by the first threads of the grid.
  const std::int64_t tail_start = head + packs * K;
  const std::int64_t edges = head + (n - tail_start);
  if (first < edges) {
    const std::int64_t c = first < head ? first : tail_start + (first - head);
    h[c] = from_float<T>(to_float(x[c]) + to_float(r[c]));
  }
}

template <typename Kernel>
cudaError_t check_block_fits(Kernel kernel, int block_size) {
  cudaFuncAttributes attributes{};
  if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) return e;
  return block_size > attributes.maxThreadsPerBlock ? cudaErrorLaunchOutOfResources : cudaSuccess;
}

template <typename T>
bool same_phase(const ResidualRow<T>& p) {
  const bool xy = same_16_byte_phase(p.row.x, p.row.y);
  if (!p.r) return xy;
  return xy && same_16_byte_phase(p.row.x, p.r) && same_16_byte_phase(p.row.x, p.h);
}

template <typename T, bool kResidual>
cudaError_t launch_vec(const ResidualRow<T>& p, int threads_per_row, int block_size, cudaStream_t stream) {
  if (!same_phase(p)) return cudaErrorNotSupported;
  vec_welford_kernel<T, kResidual><<<grid_for(p.row.rows, block_size / threads_per_row), block_size, 0, stream>>>(
      p, threads_per_row);
  return cudaGetLastError();
}

template <typename T, int kPacks, bool kResidual>
cudaError_t launch_register(const ResidualRow<T>& p, int threads_per_row, int block_size, cudaStream_t stream) {
  auto kernel = register_row_kernel<T, kPacks, kResidual>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  kernel<<<grid_for(p.row.rows, block_size / threads_per_row), block_size, 0, stream>>>(p, threads_per_row);
  return cudaGetLastError();
}

template <typename T, bool kResidual>
cudaError_t dispatch_register(const ResidualRow<T>& p, int threads_per_row, int block_size, int packs_per_thread,
                              cudaStream_t stream) {
  if (!same_phase(p)) return cudaErrorNotSupported;
  switch (packs_per_thread) {
    case 1: return launch_register<T, 1, kResidual>(p, threads_per_row, block_size, stream);
    case 2: return launch_register<T, 2, kResidual>(p, threads_per_row, block_size, stream);
    case 4: return launch_register<T, 4, kResidual>(p, threads_per_row, block_size, stream);
    case 8: return launch_register<T, 8, kResidual>(p, threads_per_row, block_size, stream);
    case 16:
      // 16 packs of 8 halves would be 128 floats per thread: spills, so not built.
      if constexpr (sizeof(T) == 4) return launch_register<T, 16, kResidual>(p, threads_per_row, block_size, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

// Persistent: as many blocks as fit the device at once (more would only queue behind them).
template <typename Kernel>
cudaError_t resident_grid(Kernel kernel, int block_size, std::size_t shared, std::int64_t rows, unsigned* grid) {
  std::int64_t resident = 0;
  if (cudaError_t e = resident_blocks(kernel, block_size, shared, &resident); e != cudaSuccess) return e;
  if (resident == 0) return cudaErrorLaunchOutOfResources;
  *grid = static_cast<unsigned>(rows < resident ? rows : resident);
  return cudaSuccess;
}

template <typename T, int kPacks>
cudaError_t launch_ring(const ResidualRow<T>& p, int block_size, int stages, cudaStream_t stream) {
  auto kernel = ring_row_kernel<T, kPacks>;
  if (cudaError_t e = check_block_fits(kernel, block_size); e != cudaSuccess) return e;
  const int slot_packs = p.row.cols / Pack<T>::kCount;
  const auto shared = static_cast<std::size_t>(ring_dynamic_shared_bytes(p.row.cols, sizeof(T), stages));
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
      e != cudaSuccess)
    return e;
  unsigned grid = 0;
  if (cudaError_t e = resident_grid(kernel, block_size, shared, p.row.rows, &grid); e != cudaSuccess) return e;
  kernel<<<grid, block_size, shared, stream>>>(p, stages, slot_packs);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_ring(const ResidualRow<T>& p, int block_size, int packs_per_thread, int stages,
                         cudaStream_t stream) {
  // Whole warps (the block sum), at least one thread per edge element.
  if (block_size < kWarpSize || block_size > 1024 || block_size % kWarpSize != 0 || stages < 1) return cudaErrorInvalidValue;
  if (!same_phase(p)) return cudaErrorNotSupported;
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess)
    return e;
  if (major < 9) return cudaErrorInvalidValue;  // bulk copies and mbarrier transactions are sm_90's
  switch (packs_per_thread) {
    case 1: return launch_ring<T, 1>(p, block_size, stages, stream);
    case 2: return launch_ring<T, 2>(p, block_size, stages, stream);
    case 4: return launch_ring<T, 4>(p, block_size, stages, stream);
    case 8: return launch_ring<T, 8>(p, block_size, stages, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int kStages, bool kStreaming>
cudaError_t launch_pipelined(const ResidualRow<T>& p, int block_size, cudaStream_t stream) {
  auto kernel = pipelined_kernel<T, kStages, kStreaming>;
  const auto shared = static_cast<int>(pipelined_dynamic_shared_bytes(p.row.cols, sizeof(T), kStages));
  // Past 48 KB a kernel must opt in; past the device's limit this fails (cudaErrorInvalidValue).
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
      e != cudaSuccess)
    return e;
  unsigned grid = 0;
  if (cudaError_t e = resident_grid(kernel, block_size, shared, p.row.rows, &grid); e != cudaSuccess) return e;
  kernel<<<grid, block_size, shared, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, bool kStreaming>
cudaError_t dispatch_pipelined(const ResidualRow<T>& p, int block_size, int stages, cudaStream_t stream) {
  switch (stages) {
    case 2: return launch_pipelined<T, 2, kStreaming>(p, block_size, stream);
    case 3: return launch_pipelined<T, 3, kStreaming>(p, block_size, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
ResidualRow<T> plain(const Row<T>& row) {
  return ResidualRow<T>{row, nullptr, nullptr, false};
}

}  // namespace

template <typename T>
cudaError_t thread_row_two_pass(const Row<T>& p, int block_size, cudaStream_t stream) {
  thread_row_two_pass_kernel<<<grid_for(p.rows, block_size), block_size, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t warp_row_welford(const Row<T>& p, int warps_per_block, cudaStream_t stream) {
  warp_row_welford_kernel<<<grid_for(p.rows, warps_per_block), warps_per_block * kWarpSize, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t block_row_welford(const Row<T>& p, int block_size, cudaStream_t stream) {
  block_row_welford_kernel<<<static_cast<unsigned>(p.rows), block_size, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t vec_welford(const Row<T>& p, int threads_per_row, int block_size, cudaStream_t stream) {
  return launch_vec<T, false>(plain(p), threads_per_row, block_size, stream);
}

template <typename T>
cudaError_t register_row(const Row<T>& p, int threads_per_row, int block_size, int packs_per_thread,
                         cudaStream_t stream) {
  return dispatch_register<T, false>(plain(p), threads_per_row, block_size, packs_per_thread, stream);
}

template <typename T>
cudaError_t residual_add(const T* x, const T* r, T* h, std::int64_t n, cudaStream_t stream) {
  if (!same_16_byte_phase(x, r) || !same_16_byte_phase(x, h)) return cudaErrorNotSupported;
  constexpr int kThreads = 256;
  const std::int64_t packs = n / Pack<T>::kCount + 2;
  residual_add_kernel<<<grid_for(packs, kThreads) < 65536u ? grid_for(packs, kThreads) : 65536u, kThreads, 0, stream>>>(
      x, r, h, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t residual_vec_welford(const ResidualRow<T>& p, int threads_per_row, int block_size, cudaStream_t stream) {
  return launch_vec<T, true>(p, threads_per_row, block_size, stream);
}

template <typename T>
cudaError_t residual_register_row(const ResidualRow<T>& p, int threads_per_row, int block_size, int packs_per_thread,
                                  cudaStream_t stream) {
  return dispatch_register<T, true>(p, threads_per_row, block_size, packs_per_thread, stream);
}

template <typename T>
cudaError_t residual_ring_row(const ResidualRow<T>& p, int block_size, int packs_per_thread, int stages,
                              cudaStream_t stream) {
  return dispatch_ring(p, block_size, packs_per_thread, stages, stream);
}

template <typename T>
cudaError_t residual_pipelined(const ResidualRow<T>& p, int block_size, int stages, bool streaming_stores,
                               cudaStream_t stream) {
  // A power of two (the block reduction's groups) of at least a warp (one edge element per thread).
  if (block_size < kWarpSize || block_size > 1024 || (block_size & (block_size - 1)) != 0) return cudaErrorInvalidValue;
  if (!same_phase(p)) return cudaErrorNotSupported;
  return streaming_stores ? dispatch_pipelined<T, true>(p, block_size, stages, stream)
                          : dispatch_pipelined<T, false>(p, block_size, stages, stream);
}

#define SHAPETUNE_INSTANTIATE_LAYERNORM(T)                                                                   \
  template cudaError_t thread_row_two_pass<T>(const Row<T>&, int, cudaStream_t);                             \
  template cudaError_t warp_row_welford<T>(const Row<T>&, int, cudaStream_t);                                \
  template cudaError_t block_row_welford<T>(const Row<T>&, int, cudaStream_t);                               \
  template cudaError_t vec_welford<T>(const Row<T>&, int, int, cudaStream_t);                                \
  template cudaError_t register_row<T>(const Row<T>&, int, int, int, cudaStream_t);                          \
  template cudaError_t residual_add<T>(const T*, const T*, T*, std::int64_t, cudaStream_t);                  \
  template cudaError_t residual_vec_welford<T>(const ResidualRow<T>&, int, int, cudaStream_t);               \
  template cudaError_t residual_register_row<T>(const ResidualRow<T>&, int, int, int, cudaStream_t);         \
  template cudaError_t residual_ring_row<T>(const ResidualRow<T>&, int, int, int, cudaStream_t);             \
  template cudaError_t residual_pipelined<T>(const ResidualRow<T>&, int, int, bool, cudaStream_t);

SHAPETUNE_INSTANTIATE_LAYERNORM(float)
SHAPETUNE_INSTANTIATE_LAYERNORM(__half)
SHAPETUNE_INSTANTIATE_LAYERNORM(__nv_bfloat16)

}  // namespace shapetune::kernels::layernorm
