// The persistent_cluster rung (rnn.cuh): one launch runs every step; each thread block cluster
// owns rows_per_cluster batch rows and never waits for another cluster.
//
// Block `rank` of a cluster owns hidden units [rank U, rank U + U), U = ceil(H / cluster_size):
// their G gate rows of W_hh sit in its shared memory as fp32 for the whole sequence, beside two
// buffers of the cluster's full h rows (the one a step reads, the one it writes). A lane group of
// k_split lanes computes one unit for rows_per_thread rows: each lane takes every k_split-th
// 16-byte chunk of the dot products, and a butterfly of shuffles sums them. Then lane i of the
// group applies the cell to row i, keeps its cell state in a register, stores h into the write
// buffer of every block of the cluster (distributed shared memory), and the cluster meets at a
// barrier. The barrier is split: a lane stores h to y and loads its next step's input
// gates between arriving and waiting, off the step's critical path.
//
// The two buffers make one barrier a step enough: a block writes buffer (t+1)&1 during step t
// only after the barrier of step t-1, by which every block has finished reading it (at t-1).
//
// Two exchanges (ClusterConfig::exchange):
//   0, barrier: h goes by plain remote stores, made visible by the barrier's release and acquire.
//     The release waits until every remote store has landed (Nsight Compute at H 128, H100: the
//     membar stall, a sixth of the step's cycles), and then the whole cluster meets.
//   1, async: h goes by st.async, each store counted on the receiving block's mbarrier of that
//     buffer, whose one local arrival announces the step's rows x H x 4 bytes. A block waits only
//     for its own buffer to fill, as soon as the last block has stored into it. The cluster barrier
//     stays, relaxed, for the other direction: a block arrives once it has read buffer t&1 and
//     waits on that arrival a step later, just before storing into it again (by then it has
//     nearly always completed).
// The H100 measured exchange 1 15-17% faster at H 128, every shape and cell (reports/h100/
// 2026-12-06-tf32-rounding-cluster-exchange-at-556ba74). Either way each lane loads its input
// gates two steps ahead, for the long-scoreboard stall of the same profile; that changed nothing
// measurable.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/common/cluster.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/sm90a_guard.cuh"
#include "kernels/rnn/gates.cuh"
#include "kernels/rnn/rnn.cuh"

namespace shapetune::kernels::rnn {
namespace {

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

struct Geometry {
  int units, rows_per_cluster, k_split, stride, cluster_size;
};

// kSave: keep what the backward pass reads (Layer::saved, Layer::cells); a template flag, so that
// the plain forward's code stays what it was without it.
template <typename T, Cell kCell, int kRows, bool kSave, bool kAsync>
__global__ void __launch_bounds__(kMaxClusterThreads) cluster_kernel(Layer<T> p, const float* __restrict__ input_gates, Geometry geo) {
  grid_dependency_sync();
  constexpr int G = gate_count(kCell);
  extern __shared__ __align__(16) float shared[];
  const int H = p.hidden, N = p.batch, U = geo.units, stride = geo.stride, KS = geo.k_split;
  const int h4 = (H + 3) / 4 * 4;
  float* w_s = shared;                                   // [G U][stride]
  float* h_s = shared + G * U * stride;                  // [2][rows_per_cluster][stride]
  const int buffer_floats = geo.rows_per_cluster * stride;
  // kAsync: the full barriers of the two h buffers, 8 bytes each (aligned: stride is a multiple of 4).
  const float* full_barriers = h_s + 2 * buffer_floats;
  const unsigned full = shared_address(full_barriers);
  const unsigned rank = cluster_block_rank();
  const int cluster = static_cast<int>(blockIdx.x) / geo.cluster_size;
  const int n0 = cluster * geo.rows_per_cluster;
  const int rows = min(geo.rows_per_cluster, N - n0);
  const int j0 = static_cast<int>(rank) * U;

  const int lane_in_group = static_cast<int>(threadIdx.x) % KS;
  const int group = static_cast<int>(threadIdx.x) / KS;
  const int u = group % U, row_group = group / U;
  const int first_row = row_group * kRows;
  const int j = j0 + u;
  // The row whose cell this lane applies (lane i of the group: row first_row + i).
  const int my_row = first_row + lane_in_group;
  const bool owns_cell = lane_in_group < kRows && j < H && my_row < rows;
  const std::int64_t my_n = n0 + (owns_cell ? my_row : 0);
  // The h rows the group reads, kept inside the buffer (lanes of a padding group, or past the
  // last row, read row rows_per_cluster - 1 and store nothing).
  int read_offset[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) read_offset[i] = min(first_row + i, geo.rows_per_cluster - 1) * stride;

  // W_hh slice (zero past H and past the last unit) and both h buffers zeroed, then h0.
  for (int idx = threadIdx.x; idx < G * U * stride; idx += blockDim.x) {
    const int r = idx / stride, k = idx % stride, g = r / U, jj = j0 + r % U;
    w_s[idx] = jj < H && k < H ? to_float(p.w_hh[(static_cast<std::int64_t>(g) * H + jj) * H + k]) : 0.f;
  }
  for (int idx = threadIdx.x; idx < 2 * buffer_floats; idx += blockDim.x) {
    const int r = (idx % buffer_floats) / stride, k = idx % stride;
    h_s[idx] = idx < buffer_floats && r < rows && k < H ? to_float(p.h0[(n0 + r) * static_cast<std::int64_t>(H) + k])
                                                        : 0.f;
  }

  const int jc = j < H ? j : 0;
  float bias[G], bias_hn = 0.f;
#pragma unroll
  for (int g = 0; g < G; ++g)
    bias[g] = to_float(p.b_ih[g * H + jc]) + (kCell == Cell::gru && g == 2 ? 0.f : to_float(p.b_hh[g * H + jc]));
  if constexpr (kCell == Cell::gru) bias_hn = to_float(p.b_hh[2 * H + jc]);
  const std::int64_t cell_index = my_n * H + jc;
  float state = owns_cell ? to_float(kCell == Cell::lstm ? p.c0[cell_index] : p.h0[cell_index]) : 0.f;
  float last_h = 0.f;

  // Where this lane's h goes in every block of the cluster: buffer 0, row my_row, column j.
  unsigned remote[kMaxClusterSize];
#pragma unroll
  for (int b = 0; b < kMaxClusterSize; ++b)
    remote[b] = b < geo.cluster_size ? cluster_shared_address(h_s + (owns_cell ? my_row : 0) * stride + jc,
                                                              static_cast<unsigned>(b))
                                     : 0u;

  const std::int64_t plane = static_cast<std::int64_t>(N) * H;
  const std::int64_t gates_row = static_cast<std::int64_t>(G) * H;
  // This step's input gates and the next one's (loaded a step ahead of use).
  float in[G], in_next[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    in[g] = owns_cell ? input_gates[my_n * gates_row + g * H + j] : 0.f;
    in_next[g] = owns_cell && p.steps > 1 ? input_gates[(N + my_n) * gates_row + g * H + j] : 0.f;
  }
  // Bytes a block receives a step: every unit of every row of the cluster, from whichever block owns it.
  const unsigned step_bytes = static_cast<unsigned>(rows * H) * sizeof(float);
  if constexpr (kAsync) {
    if (threadIdx.x == 0) {
      mbarrier_init(full, 1);
      mbarrier_init(full + 8, 1);
      fence_barrier_init();
      if (p.steps > 1) mbarrier_arrive_expect_tx(full + 8, step_bytes);  // step 1's h, into buffer 1
    }
  }
  // Every block has started and initialised its buffers (and barriers) before anyone writes into them.
  cluster_sync();

  for (int t = 0; t < p.steps; ++t) {
    const float* h_read = h_s + (t & 1) * buffer_floats;
    if constexpr (kAsync) {
      if (t > 0) mbarrier_wait_cluster(full + 8 * (t & 1), ((t - 1) >> 1) & 1);
      // Buffer (t+1)&1's previous phase (step t-1's h) completed before this block's arrive of
      // step t-1, which every sender waits on before storing step t+1's h: arm its next phase.
      if (threadIdx.x == 0 && t > 0 && t + 1 < p.steps) mbarrier_arrive_expect_tx(full + 8 * ((t + 1) & 1), step_bytes);
    }
    float acc[kRows][G];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int g = 0; g < G; ++g) acc[i][g] = 0.f;
    for (int k = lane_in_group * 4; k < h4; k += 4 * KS) {
      float4 w[G];
#pragma unroll
      for (int g = 0; g < G; ++g) w[g] = *reinterpret_cast<const float4*>(w_s + (g * U + u) * stride + k);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float4 h = *reinterpret_cast<const float4*>(h_read + read_offset[i] + k);
#pragma unroll
        for (int g = 0; g < G; ++g)
          acc[i][g] = fmaf(h.w, w[g].w, fmaf(h.z, w[g].z, fmaf(h.y, w[g].y, fmaf(h.x, w[g].x, acc[i][g]))));
      }
    }
    // Sum over the group's lanes; every lane ends with every total.
    for (int offset = KS / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int g = 0; g < G; ++g) acc[i][g] += __shfl_xor_sync(0xffffffffu, acc[i][g], offset);

    T stored{};
    float kept[kSavedGates];
    if (owns_cell) {
      float mine[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        mine[g] = acc[0][g];
#pragma unroll
        for (int i = 1; i < kRows; ++i)
          if (lane_in_group == i) mine[g] = acc[i][g];
      }
      float h;
      if constexpr (kCell == Cell::lstm) {
        float pre[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) pre[g] = in[g] + mine[g] + bias[g];
        h = lstm_update(pre, state, kept);
      } else {
        h = gru_update(in[0] + mine[0] + bias[0], in[1] + mine[1] + bias[1], in[2] + bias[2], mine[2] + bias_hn, state,
                       kept);
      }
      stored = from_float<T>(h);
      const float fed_back = to_float(stored);  // the recurrence reads h as stored
      last_h = fed_back;
      if constexpr (kCell == Cell::gru) state = fed_back;
      if (!kAsync && t + 1 < p.steps) {
        const unsigned offset = static_cast<unsigned>(((t + 1) & 1) * buffer_floats * sizeof(float));
#pragma unroll
        for (int b = 0; b < kMaxClusterSize; ++b)
          if (b < geo.cluster_size) cluster_store(remote[b] + offset, fed_back);
      }
    }
    if constexpr (kAsync) {
      if (t + 1 < p.steps) {
        __syncwarp();  // .aligned
        if (t > 0) cluster_wait();  // every block has read buffer (t+1)&1, at step t-1
        if (owns_cell) {
          const unsigned offset = static_cast<unsigned>(((t + 1) & 1) * buffer_floats * sizeof(float));
          const float* barrier = full_barriers + 2 * ((t + 1) & 1);  // buffer (t+1)&1's, 2 floats each
#pragma unroll
          for (int b = 0; b < kMaxClusterSize; ++b)
            if (b < geo.cluster_size)
              cluster_store_async(remote[b] + offset, last_h, cluster_shared_address(barrier, static_cast<unsigned>(b)));
        }
        __syncwarp();
        cluster_arrive_relaxed();  // this block has read buffer t&1
      }
    } else if (t + 1 < p.steps) {
      __syncwarp();  // the barrier is .aligned: the warp arrives together
      cluster_arrive();
    }
    // The global stores go out after the arrive: its release orders every earlier write of the
    // thread, so a store to y before it would put a global write's latency on every step's chain
    // (Nsight Compute at H 128: membar, the third stall reason). Nothing in this launch reads them.
    if (owns_cell) {
      p.y[t * plane + cell_index] = stored;
      if constexpr (kSave) {
        float* keep = p.saved + (static_cast<std::int64_t>(t) * N + my_n) * (kSavedGates * H) + j;
#pragma unroll
        for (int g = 0; g < kSavedGates; ++g) keep[g * H] = kept[g];
        if constexpr (kCell == Cell::lstm) p.cells[(t + 1) * plane + cell_index] = state;
      }
    }
    if (t + 1 < p.steps) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        in[g] = in_next[g];
        in_next[g] = owns_cell && t + 2 < p.steps
                         ? input_gates[((t + 2) * static_cast<std::int64_t>(N) + my_n) * gates_row + g * H + j]
                         : 0.f;
      }
      if constexpr (!kAsync) cluster_wait();
    }
  }
  // Async: the last arrive (step T-2) gets its wait, as the barrier exchange's does in the loop.
  if constexpr (kAsync)
    if (p.steps > 1) cluster_wait();

  if (owns_cell) {
    p.h_t[cell_index] = from_float<T>(last_h);
    if constexpr (kCell == Cell::lstm) p.c_t[cell_index] = from_float<T>(state);
  }
}

__global__ void cluster_barrier_kernel(int rounds) {
  grid_dependency_sync();
  for (int r = 0; r < rounds; ++r) cluster_sync();
}

// Launches `kernel` as clusters of `cluster_size` blocks, after asking the occupancy API whether
// one such cluster can be placed at all.
template <typename Kernel, typename... Args>
cudaError_t launch_clusters(Kernel kernel, int clusters, int cluster_size, int threads, std::size_t shared_bytes,
                            cudaStream_t stream, Args... args) {
  if (cudaError_t e = require_sm90(); e != cudaSuccess) return e;
  if (cluster_size > 8)
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        e != cudaSuccess)
      return e;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared_bytes));
      e != cudaSuccess)
    return e;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(clusters * cluster_size));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int placeable = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveClusters(&placeable, kernel, &config); e != cudaSuccess) return e;
  if (placeable < 1) return cudaErrorCooperativeLaunchTooLarge;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename T, Cell kCell, int kRows>
cudaError_t launch(const Layer<T>& p, const float* input_gates, const ClusterConfig& c, const ClusterPlan& plan,
                   cudaStream_t stream) {
  const Geometry geo{plan.units_per_block, c.rows_per_cluster, c.k_split, shared_row_stride(p.hidden), c.cluster_size};
  auto kernel = c.exchange == 1 ? (p.saved ? cluster_kernel<T, kCell, kRows, true, true>
                                           : cluster_kernel<T, kCell, kRows, false, true>)
                                : (p.saved ? cluster_kernel<T, kCell, kRows, true, false>
                                           : cluster_kernel<T, kCell, kRows, false, false>);
  return launch_clusters(kernel, plan.clusters, c.cluster_size, plan.threads, plan.shared_bytes, stream, p,
                         input_gates, geo);
}

template <typename T, Cell kCell>
cudaError_t launch_rows(const Layer<T>& p, const float* input_gates, const ClusterConfig& c, const ClusterPlan& plan,
                        cudaStream_t stream) {
  switch (c.rows_per_thread) {
    case 1: return launch<T, kCell, 1>(p, input_gates, c, plan, stream);
    case 2: return launch<T, kCell, 2>(p, input_gates, c, plan, stream);
    case 4: return launch<T, kCell, 4>(p, input_gates, c, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

ClusterPlan cluster_plan(Cell cell, int batch, int hidden, const ClusterConfig& c) {
  ClusterPlan plan;
  if (c.cluster_size < 2 || c.cluster_size > kMaxClusterSize || c.rows_per_cluster < 1 || !power_of_two(c.k_split) ||
      c.k_split > 32 || (c.rows_per_thread != 1 && c.rows_per_thread != 2 && c.rows_per_thread != 4) ||
      c.rows_per_thread > c.k_split || (c.exchange != 0 && c.exchange != 1) || batch < 1 || hidden < 1)
    return plan;
  const int rows = c.rows_per_cluster < batch ? c.rows_per_cluster : batch;
  plan.clusters = (batch + c.rows_per_cluster - 1) / c.rows_per_cluster;
  plan.units_per_block = (hidden + c.cluster_size - 1) / c.cluster_size;
  const std::int64_t groups =
      static_cast<std::int64_t>(plan.units_per_block) * ((rows + c.rows_per_thread - 1) / c.rows_per_thread);
  plan.threads = static_cast<int>(std::min<std::int64_t>((groups * c.k_split + 31) / 32 * 32, 1 << 30));
  plan.shared_bytes = static_cast<std::size_t>(gate_count(cell) * plan.units_per_block + 2 * c.rows_per_cluster) *
                      static_cast<std::size_t>(shared_row_stride(hidden)) * sizeof(float) +
                      (c.exchange == 1 ? 2 * sizeof(std::uint64_t) : 0);
  return plan;
}

template <typename T>
cudaError_t cluster_forward(const Layer<T>& p, const float* input_gates, const ClusterConfig& c, cudaStream_t stream) {
  const ClusterPlan plan = cluster_plan(p.cell, p.batch, p.hidden, c);
  if (plan.threads == 0 || plan.threads > kMaxClusterThreads || p.steps < 1) return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_rows<T, Cell::lstm>(p, input_gates, c, plan, stream)
                              : launch_rows<T, Cell::gru>(p, input_gates, c, plan, stream);
}

cudaError_t cluster_barrier_rounds(int cluster_size, int threads, int rounds, cudaStream_t stream) {
  if (cluster_size < 1 || cluster_size > kMaxClusterSize) return cudaErrorInvalidValue;
  return launch_clusters(cluster_barrier_kernel, 1, cluster_size, threads, 0, stream, rounds);
}

template cudaError_t cluster_forward<float>(const Layer<float>&, const float*, const ClusterConfig&, cudaStream_t);
template cudaError_t cluster_forward<__half>(const Layer<__half>&, const float*, const ClusterConfig&, cudaStream_t);
template cudaError_t cluster_forward<__nv_bfloat16>(const Layer<__nv_bfloat16>&, const float*, const ClusterConfig&,
                                                    cudaStream_t);

}  // namespace shapetune::kernels::rnn
