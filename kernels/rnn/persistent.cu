// The persistent rung: one cooperative launch runs every step (rnn.cuh says how the work splits).
//
// Block b owns hidden units [j0, j0 + units) of batch group b / ceil(H / units): the G gate rows
// of those units, W_hh[g H + j, :], sit in shared memory as fp32 for the whole sequence. A lane
// group of k_split lanes takes one unit for rows_per_thread batch rows: each lane every k_split-th
// 16-byte chunk of the G dot products of length H per row, summed by a butterfly of shuffles (as
// the cluster rung does). Lane i % k_split of the group applies the cell to the group's row i and
// keeps that row's cell state (LSTM c, GRU h) in registers. A step: the owning lanes load their
// rows' input gates, the block copies the rows of h it needs from the exchange buffer (fp32, L2)
// into shared memory, the lanes take the dot products (16-byte shared reads; a unit's W row is
// read by every group of that unit), the owners apply the cell and store h to y and to the other
// exchange buffer, and the grid meets at a barrier. Shared rows are padded (shared_row_stride).
//
// Why k_split: with one lane a unit and row (k_split 1) the dot products are one chain of H / 4
// shared reads and 4 G FMAs each per lane, and N x H lanes at most run: at N 64, H 512 an H100
// profile showed 2 warps an SM, 87% of cycles with no warp eligible, 41 us a step. Split over
// k_split lanes the chain is k_split times shorter and k_split times as many warps hide it.
#include "kernels/rnn/rnn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/cooperative.cuh"
#include "kernels/rnn/gates.cuh"

namespace shapetune::kernels::rnn {
namespace {

constexpr std::size_t kBarrierBytes = 256;  // the counter, alone in its own L2 lines

struct Geometry {
  int units, units_blocks, rows_per_group, stride, k_split;
};

// kSave: keep what the backward pass reads (Layer::saved, Layer::cells); a template flag, so that
// the plain forward's code stays what it was without it.
template <typename T, Cell kCell, int kRows, bool kSave>
__global__ void __launch_bounds__(kMaxPersistentThreads)
    persistent_kernel(Layer<T> p, const float* __restrict__ input_gates, float* h_exchange, unsigned* barrier,
                      Geometry geo) {
  grid_dependency_sync();
  constexpr int G = gate_count(kCell);
  extern __shared__ __align__(16) float shared[];
  const int H = p.hidden, N = p.batch, units = geo.units, stride = geo.stride, KS = geo.k_split;
  float* w_s = shared;                              // [G units][stride]
  float* h_s = shared + G * units * stride;         // [rows_per_group][stride]
  const int batch_group = static_cast<int>(blockIdx.x) / geo.units_blocks;
  const int j0 = (static_cast<int>(blockIdx.x) % geo.units_blocks) * units;
  const int n0 = batch_group * geo.rows_per_group;
  const int rows = min(geo.rows_per_group, N - n0);
  const int lane_in_group = static_cast<int>(threadIdx.x) % KS, lane_group = static_cast<int>(threadIdx.x) / KS;
  const int u = lane_group % units, first_row = lane_group / units;
  const int rows_per_pass = static_cast<int>(blockDim.x) / KS / units;
  const int j = j0 + u;
  const int h4 = (H + 3) / 4 * 4;

  // The W_hh slice, zero past H (columns) and past the last unit (rows), and h's zero padding.
  for (int idx = threadIdx.x; idx < G * units * h4; idx += blockDim.x) {
    const int r = idx / h4, k = idx % h4, g = r / units, jj = j0 + r % units;
    w_s[r * stride + k] = jj < H && k < H ? to_float(p.w_hh[(static_cast<std::int64_t>(g) * H + jj) * H + k]) : 0.f;
  }
  for (int idx = threadIdx.x; idx < geo.rows_per_group * (h4 - H); idx += blockDim.x)
    h_s[(idx / (h4 - H)) * stride + H + idx % (h4 - H)] = 0.f;

  // valid[i]: this lane applies the cell to the group's row i (lane i % k_split of the group).
  bool valid[kRows];
  std::int64_t n_of[kRows];
  float state[kRows], last_h[kRows];  // LSTM: c; GRU: the h it mixes in
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = first_row + i * rows_per_pass;
    valid[i] = j < H && row < rows && i % KS == lane_in_group;
    n_of[i] = n0 + (row < rows ? row : 0);
    const std::int64_t e = n_of[i] * H + (j < H ? j : 0);
    state[i] = valid[i] ? to_float(kCell == Cell::lstm ? p.c0[e] : p.h0[e]) : 0.f;
    last_h[i] = 0.f;
  }
  // Both biases folded where the formulas allow; the GRU's b_hn stays inside r (W_hn h + b_hn).
  float bias[G], bias_hn = 0.f;
  const int jb = j < H ? j : 0;
#pragma unroll
  for (int g = 0; g < G; ++g)
    bias[g] = to_float(p.b_ih[g * H + jb]) + (kCell == Cell::gru && g == 2 ? 0.f : to_float(p.b_hh[g * H + jb]));
  if constexpr (kCell == Cell::gru) bias_hn = to_float(p.b_hh[2 * H + jb]);

  const std::int64_t plane = static_cast<std::int64_t>(N) * H;
  for (int t = 0; t < p.steps; ++t) {
    float in[kRows][G];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int g = 0; g < G; ++g)
        in[i][g] = valid[i] ? input_gates[(static_cast<std::int64_t>(t) * N + n_of[i]) * G * H + g * H + j] : 0.f;
    const float* h_prev = h_exchange + ((t + 1) & 1) * plane;  // written at step t - 1
    if (t > 0 && H % 4 == 0) {
      // 16-byte loads (rows of H floats start 16-byte aligned, and so do the padded shared rows):
      // a quarter of the loads and index arithmetic of the element-wise copy below.
      const int quads = H / 4;
      const auto* from = reinterpret_cast<const float4*>(h_prev + static_cast<std::int64_t>(n0) * H);
      for (int idx = threadIdx.x; idx < rows * quads; idx += blockDim.x) {
        const int r = idx / quads, q = idx - r * quads;
        *reinterpret_cast<float4*>(h_s + r * stride + 4 * q) = __ldcg(from + idx);
      }
    } else {
      for (int idx = threadIdx.x; idx < rows * H; idx += blockDim.x) {
        const int r = idx / H, k = idx % H;
        const std::int64_t e = static_cast<std::int64_t>(n0 + r) * H + k;
        h_s[r * stride + k] = t == 0 ? to_float(p.h0[e]) : __ldcg(h_prev + e);
      }
    }
    __syncthreads();

    float acc[kRows][G];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int g = 0; g < G; ++g) acc[i][g] = 0.f;
    for (int k = lane_in_group * 4; k < h4; k += 4 * KS) {
      float4 w[G];
#pragma unroll
      for (int g = 0; g < G; ++g) w[g] = *reinterpret_cast<const float4*>(w_s + (g * units + u) * stride + k);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int row = first_row + i * rows_per_pass;
        const float4 h = *reinterpret_cast<const float4*>(h_s + (row < rows ? row : 0) * stride + k);
#pragma unroll
        for (int g = 0; g < G; ++g)
          acc[i][g] = fmaf(h.w, w[g].w, fmaf(h.z, w[g].z, fmaf(h.y, w[g].y, fmaf(h.x, w[g].x, acc[i][g]))));
      }
    }
    // Sum over the group's lanes (a group never straddles a warp: k_split divides 32 and the
    // block is whole warps); every lane ends with every total.
    for (int offset = KS / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int g = 0; g < G; ++g) acc[i][g] += __shfl_xor_sync(0xffffffffu, acc[i][g], offset);

#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (!valid[i]) continue;
      float h, kept[kSavedGates];
      if constexpr (kCell == Cell::lstm) {
        float pre[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) pre[g] = in[i][g] + acc[i][g] + bias[g];
        h = lstm_update(pre, state[i], kept);
      } else {
        h = gru_update(in[i][0] + acc[i][0] + bias[0], in[i][1] + acc[i][1] + bias[1], in[i][2] + bias[2],
                       acc[i][2] + bias_hn, state[i], kept);
      }
      const T stored = from_float<T>(h);
      const float fed_back = to_float(stored);  // the recurrence reads h as stored
      const std::int64_t e = n_of[i] * H + j;
      p.y[t * plane + e] = stored;
      if constexpr (kSave) {  // for the backward pass: off the chain, nothing reads them in this launch
        float* keep = p.saved + (static_cast<std::int64_t>(t) * N + n_of[i]) * (kSavedGates * H) + j;
#pragma unroll
        for (int g = 0; g < kSavedGates; ++g) keep[g * H] = kept[g];
        if constexpr (kCell == Cell::lstm) p.cells[(t + 1) * plane + e] = state[i];
      }
      h_exchange[(t & 1) * plane + e] = fed_back;
      last_h[i] = fed_back;
      if constexpr (kCell == Cell::gru) state[i] = fed_back;
    }
    if (t + 1 < p.steps) grid_barrier(barrier, static_cast<unsigned>(t + 1) * gridDim.x);
  }

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (!valid[i]) continue;
    const std::int64_t e = n_of[i] * H + j;
    p.h_t[e] = from_float<T>(last_h[i]);
    if constexpr (kCell == Cell::lstm) p.c_t[e] = from_float<T>(state[i]);
  }
}

__global__ void barrier_rounds_kernel(int rounds, unsigned* counter) {
  grid_dependency_sync();
  for (int r = 1; r <= rounds; ++r) grid_barrier(counter, static_cast<unsigned>(r) * gridDim.x);
}

template <typename T, Cell kCell, int kRows>
cudaError_t launch(const Layer<T>& p, const float* input_gates, void* workspace, const PersistentConfig& c,
                   const PersistentPlan& plan, cudaStream_t stream) {
  auto kernel = p.saved ? persistent_kernel<T, kCell, kRows, true> : persistent_kernel<T, kCell, kRows, false>;
  if (cudaError_t e = prepare_cooperative(kernel, plan.blocks, c.block_size, plan.shared_bytes); e != cudaSuccess)
    return e;
  auto* barrier = static_cast<unsigned*>(workspace);
  float* h_exchange = reinterpret_cast<float*>(static_cast<char*>(workspace) + kBarrierBytes);
  if (cudaError_t e = cudaMemsetAsync(barrier, 0, sizeof(unsigned), stream); e != cudaSuccess) return e;
  Geometry geo{c.units_per_block, (p.hidden + c.units_per_block - 1) / c.units_per_block, plan.rows_per_group,
               shared_row_stride(p.hidden), c.k_split};
  Layer<T> layer = p;
  void* args[] = {&layer, &input_gates, &h_exchange, &barrier, &geo};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(plan.blocks), dim3(c.block_size),
                                     args, plan.shared_bytes, stream);
}

template <typename T, Cell kCell>
cudaError_t launch_rows(const Layer<T>& p, const float* input_gates, void* workspace, const PersistentConfig& c,
                        const PersistentPlan& plan, cudaStream_t stream) {
  switch (plan.rows_per_thread) {
    case 1: return launch<T, kCell, 1>(p, input_gates, workspace, c, plan, stream);
    case 2: return launch<T, kCell, 2>(p, input_gates, workspace, c, plan, stream);
    case 4: return launch<T, kCell, 4>(p, input_gates, workspace, c, plan, stream);
    case 8: return launch<T, kCell, 8>(p, input_gates, workspace, c, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

PersistentPlan persistent_plan(Cell cell, int batch, int hidden, const PersistentConfig& c) {
  PersistentPlan plan;
  const bool k_split_ok = c.k_split >= 1 && c.k_split <= 32 && (c.k_split & (c.k_split - 1)) == 0;
  if (c.units_per_block < 1 || !k_split_ok || c.block_size < c.units_per_block * c.k_split ||
      c.block_size % (c.units_per_block * c.k_split) != 0 || c.block_size % 32 != 0 ||
      c.block_size > kMaxPersistentThreads || c.batch_groups < 1 || batch < 1 || hidden < 1)
    return plan;
  plan.rows_per_group = (batch + c.batch_groups - 1) / c.batch_groups;
  const int groups = (batch + plan.rows_per_group - 1) / plan.rows_per_group;  // none empty
  const int units_blocks = (hidden + c.units_per_block - 1) / c.units_per_block;
  plan.blocks = groups * units_blocks;
  const int rows_per_pass = c.block_size / c.k_split / c.units_per_block;
  const int needed = (plan.rows_per_group + rows_per_pass - 1) / rows_per_pass;
  plan.rows_per_thread = needed <= 1 ? 1 : needed <= 2 ? 2 : needed <= 4 ? 4 : needed <= 8 ? 8 : 0;
  plan.shared_bytes = static_cast<std::size_t>(gate_count(cell) * c.units_per_block + plan.rows_per_group) *
                      static_cast<std::size_t>(shared_row_stride(hidden)) * sizeof(float);
  return plan;
}

std::size_t persistent_workspace_bytes(int batch, int hidden) {
  return kBarrierBytes + 2 * static_cast<std::size_t>(batch) * hidden * sizeof(float);
}

template <typename T>
cudaError_t persistent_forward(const Layer<T>& p, const float* input_gates, void* workspace,
                               const PersistentConfig& c, cudaStream_t stream) {
  const PersistentPlan plan = persistent_plan(p.cell, p.batch, p.hidden, c);
  if (plan.blocks == 0 || plan.rows_per_thread == 0 || p.steps < 1) return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_rows<T, Cell::lstm>(p, input_gates, workspace, c, plan, stream)
                              : launch_rows<T, Cell::gru>(p, input_gates, workspace, c, plan, stream);
}

cudaError_t grid_barrier_rounds(int blocks, int threads, int rounds, unsigned* counter, cudaStream_t stream) {
  if (cudaError_t e = fits_at_once(barrier_rounds_kernel, blocks, threads, 0); e != cudaSuccess) return e;
  void* args[] = {&rounds, &counter};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(barrier_rounds_kernel), dim3(blocks),
                                     dim3(threads), args, 0, stream);
}

template cudaError_t persistent_forward<float>(const Layer<float>&, const float*, void*, const PersistentConfig&,
                                               cudaStream_t);
template cudaError_t persistent_forward<__half>(const Layer<__half>&, const float*, void*, const PersistentConfig&,
                                                cudaStream_t);
template cudaError_t persistent_forward<__nv_bfloat16>(const Layer<__nv_bfloat16>&, const float*, void*,
                                                       const PersistentConfig&, cudaStream_t);

}  // namespace shapetune::kernels::rnn
