// The persistent rung of the backward pass: every step of backpropagation through time's
// recurrent chain in one cooperative launch (rnn.cuh says what it reads and writes).
//
// Why this split. The only sequential part of BPTT is the chain through W_hh: step t needs
//   dh_t = dy_t + d_hidden_{t+1} W_hh (+ the GRU's dh_{t+1} z_{t+1}),
// a product over all G H gate rows for each hidden unit k, and then the cell backward of unit k,
// which is elementwise (the LSTM's dc stays with the unit). So block b owns hidden units
// [k0, k0 + units) of one batch group: it keeps the COLUMNS W_hh[:, k0 .. k0 + units) (all G H
// rows; the transposed split of the forward's rows, the same bytes) in shared memory as fp32 for
// the whole sequence, and per step
//   1. loads what its cells read besides the chain (dy, the saved activations, c) before the
//      barrier, so those loads wait alongside it instead of after it;
//   2. meets the grid at a barrier: every block has written d_hidden_{t+1};
//   3. copies its group's rows of d_hidden_{t+1} [rows, G H] from L2 (past L1: other SMs wrote
//      them) into shared memory;
//   4. takes the dot products: a lane group of k_split lanes per (unit, rows_per_thread rows),
//      each lane every k_split-th 16-byte chunk of the G H terms, summed by a butterfly of
//      shuffles, as the cluster forward does;
//   5. lane i of the group applies the cell backward to its row i and writes d_input_t and
//      d_hidden_t [N, G H] to their slots of the [T, N, G H] buffers, which are the exchange
//      (every step its own slot: no double buffer, one barrier a step) and the input of the
//      weight-gradient GEMMs that follow over all T N rows (variants/rnn_backward.cpp).
// After step 0 one more barrier and product give dh0 = d_hidden_0 W_hh (+ the GRU's carry), and
// dc0 is the LSTM's carried dc: the kernel writes both.
//
// Exchange per step: each block reads rows x G H fp32 of L2, G times what the forward reads (h
// is H wide); the batch groups keep it to N / batch_groups rows a block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/cooperative.cuh"
#include "kernels/rnn/gates.cuh"
#include "kernels/rnn/rnn.cuh"

namespace shapetune::kernels::rnn {
namespace {

constexpr std::size_t kBarrierBytes = 256;  // the counter, alone in its own L2 lines
constexpr int kStagedLoads = 4;             // staging loads a thread has in flight at once

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

struct Geometry {
  int units, units_blocks, rows_per_group, k_split;
  int stride;       // of a shared row of W's columns, G H floats
  int tile;         // d_hidden's columns staged at a time (BackwardPlan::tile)
  int tile_stride;  // of a staged row
};

template <typename T, Cell kCell, int kRows>
__global__ void __launch_bounds__(kMaxBackwardThreads, 1)
    persistent_backward_kernel(BackwardChain<T> p, unsigned* barrier, Geometry geo) {
  grid_dependency_sync();
  constexpr int G = gate_count(kCell);
  extern __shared__ __align__(16) float shared[];
  const int H = p.hidden, N = p.batch, U = geo.units, KS = geo.k_split, stride = geo.stride;
  const int GH = G * H;
  const int gh4 = (GH + 3) / 4 * 4;
  const int tile = geo.tile, tile_stride = geo.tile_stride;
  float* w_s = shared;               // [U][stride]: w_s[u][r] = W_hh[r][k0 + u], zero past H and G H
  float* d_s = shared + U * stride;  // [rows_per_group][tile_stride]: a tile of the group's rows of d_hidden_{t+1}
  const int group = static_cast<int>(blockIdx.x) / geo.units_blocks;
  const int k0 = (static_cast<int>(blockIdx.x) % geo.units_blocks) * U;
  const int n0 = group * geo.rows_per_group;
  const int rows = min(geo.rows_per_group, N - n0);  // at least 1: the plan makes no empty group

  const int lane_in_group = static_cast<int>(threadIdx.x) % KS;
  const int lane_group = static_cast<int>(threadIdx.x) / KS;
  const int u = lane_group % U;
  const int first_row = (lane_group / U) * kRows;
  const int k = k0 + u;
  // Lane i of the group applies the cell to row first_row + i (kRows <= KS).
  const int my_row = first_row + lane_in_group;
  const bool owns_cell = lane_in_group < kRows && my_row < rows && k < H;
  const std::int64_t my_n = n0 + (owns_cell ? my_row : 0);
  const std::int64_t cell_index = my_n * H + (k < H ? k : 0);
  // The d_hidden rows the group reads, kept inside the staged rows (a padding group, or rows past
  // the group's last, read its last row and keep nothing).
  int read_offset[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) read_offset[i] = min(first_row + i, rows - 1) * tile_stride;

  // W_hh's columns: U consecutive threads read U consecutive elements of one row of W_hh.
  for (int idx = threadIdx.x; idx < U * gh4; idx += blockDim.x) {
    const int uu = idx % U, r = idx / U, kk = k0 + uu;
    w_s[uu * stride + r] = kk < H && r < GH ? to_float(p.w_hh[static_cast<std::int64_t>(r) * H + kk]) : 0.f;
  }

  // What reaches this cell's h from later steps besides dy: dh_t at the last step, then the
  // product; the LSTM's dc and the GRU's dh z (the part of dh_prev that skips W_hh) are carried.
  float incoming_last = 0.f, carry_c = 0.f, carry_h = 0.f;
  if (owns_cell) {
    incoming_last = to_float(p.dh_t[cell_index]);
    if constexpr (kCell == Cell::lstm) carry_c = to_float(p.dc_t[cell_index]);
  }

  unsigned barriers_met = 0;
  for (int t = p.steps - 1; t >= -1; --t) {
    // 1. The cell's own inputs, none of which depends on the chain.
    const CellBackwardInputs in =
        owns_cell && t >= 0 ? cell_backward_inputs<kCell == Cell::lstm>(p, t, my_n, k) : CellBackwardInputs{};

    float incoming = incoming_last;
    if (t < p.steps - 1) {
      // 2. Every block has written d_hidden_{t+1}; everyone here is done with d_s.
      grid_barrier(barrier, ++barriers_met * gridDim.x);
      float acc[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) acc[i] = 0.f;
      const float* source = p.d_hidden + (static_cast<std::int64_t>(t + 1) * N + n0) * GH;
      const float* w_row = w_s + u * stride;
      for (int base = 0; base < GH; base += tile) {
        // 3. A tile of the group's rows of d_hidden_{t+1}, through L2; past G H, zeros (the
        // chunks read them, times W's zeros: never garbage, which could be NaN).
        const int width = min(tile, GH - base), width4 = (width + 3) / 4 * 4;
        if (base > 0) __syncthreads();  // everyone is done with the previous tile
        // A thread issues kStagedLoads loads before it stores any: one L2 latency for all of
        // them, not one each (the step's longest wait after the barrier itself).
        if (GH % 4 == 0) {  // 16-byte aligned rows and tiles (the buffer starts on 256 bytes)
          const int quads = width / 4, total = rows * quads;
          for (int first = threadIdx.x; first < total; first += kStagedLoads * blockDim.x) {
            float4 v[kStagedLoads];
#pragma unroll
            for (int b = 0; b < kStagedLoads; ++b) {
              const int idx = first + b * static_cast<int>(blockDim.x);
              if (idx < total)
                v[b] = __ldcg(reinterpret_cast<const float4*>(source + static_cast<std::int64_t>(idx / quads) * GH + base) +
                              idx % quads);
            }
#pragma unroll
            for (int b = 0; b < kStagedLoads; ++b) {
              const int idx = first + b * static_cast<int>(blockDim.x);
              if (idx < total) *reinterpret_cast<float4*>(d_s + (idx / quads) * tile_stride + 4 * (idx % quads)) = v[b];
            }
          }
        } else {
          const int total = rows * width4;
          for (int first = threadIdx.x; first < total; first += kStagedLoads * blockDim.x) {
            float v[kStagedLoads];
#pragma unroll
            for (int b = 0; b < kStagedLoads; ++b) {
              const int idx = first + b * static_cast<int>(blockDim.x), col = idx % width4;
              v[b] = idx < total && col < width
                         ? __ldcg(source + static_cast<std::int64_t>(idx / width4) * GH + base + col)
                         : 0.f;
            }
#pragma unroll
            for (int b = 0; b < kStagedLoads; ++b) {
              const int idx = first + b * static_cast<int>(blockDim.x);
              if (idx < total) d_s[(idx / width4) * tile_stride + idx % width4] = v[b];
            }
          }
        }
        __syncthreads();
        // 4. The tile's share of the dot products over the G H gate rows.
        for (int q = lane_in_group * 4; q < width4; q += 4 * KS) {
          const float4 w = *reinterpret_cast<const float4*>(w_row + base + q);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const float4 d = *reinterpret_cast<const float4*>(d_s + read_offset[i] + q);
            acc[i] = fmaf(d.w, w.w, fmaf(d.z, w.z, fmaf(d.y, w.y, fmaf(d.x, w.x, acc[i]))));
          }
        }
      }
      // The butterfly: every lane of the group ends with every total.
      for (int offset = KS / 2; offset > 0; offset /= 2)
#pragma unroll
        for (int i = 0; i < kRows; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
      incoming = acc[0];
#pragma unroll
      for (int i = 1; i < kRows; ++i)
        if (lane_in_group == i) incoming = acc[i];
    }
    if constexpr (kCell == Cell::gru) incoming += carry_h;
    if (!owns_cell) continue;

    if (t < 0) {  // past step 0: what reaches h0 and c0
      p.dh0[cell_index] = from_float<T>(incoming);
      if constexpr (kCell == Cell::lstm) p.dc0[cell_index] = from_float<T>(carry_c);
      continue;
    }
    // 5. The cell backward (cell_backward_kernel's formulas), into step t's slots.
    const float dh_total = in.dy + incoming;
    const std::int64_t slot = (static_cast<std::int64_t>(t) * N + my_n) * GH + k;
    float* d_in = p.d_input + slot;
    if constexpr (kCell == Cell::lstm) {
      float d[4];
      carry_c = lstm_backward(in.kept, in.c_prev, in.c, dh_total, carry_c, d);
#pragma unroll
      for (int g = 0; g < 4; ++g) d_in[g * H] = d[g];
    } else {
      float d[3];
      carry_h = gru_backward(in.kept, in.h_prev, dh_total, d);
      float* d_hid = p.d_hidden + slot;
      d_in[0] = d_hid[0] = d[0];
      d_in[H] = d_hid[H] = d[1];
      d_in[2 * H] = d[2];
      d_hid[2 * H] = in.kept[0] * d[2];
    }
  }
}

template <typename T, Cell kCell, int kRows>
cudaError_t launch(const BackwardChain<T>& p, void* workspace, const BackwardConfig& c, const BackwardPlan& plan,
                   cudaStream_t stream) {
  auto kernel = persistent_backward_kernel<T, kCell, kRows>;
  if (cudaError_t e = prepare_cooperative(kernel, plan.blocks, plan.threads, plan.shared_bytes); e != cudaSuccess)
    return e;
  auto* barrier = static_cast<unsigned*>(workspace);
  if (cudaError_t e = cudaMemsetAsync(barrier, 0, sizeof(unsigned), stream); e != cudaSuccess) return e;
  Geometry geo{c.units_per_block, (p.hidden + c.units_per_block - 1) / c.units_per_block, plan.rows_per_group,
               c.k_split, shared_row_stride(gate_count(p.cell) * p.hidden), plan.tile, shared_row_stride(plan.tile)};
  BackwardChain<T> chain = p;
  void* args[] = {&chain, &barrier, &geo};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(plan.blocks)),
                                     dim3(static_cast<unsigned>(plan.threads)), args, plan.shared_bytes, stream);
}

template <typename T, Cell kCell>
cudaError_t launch_rows(const BackwardChain<T>& p, void* workspace, const BackwardConfig& c, const BackwardPlan& plan,
                        cudaStream_t stream) {
  switch (plan.rows_per_thread) {
    case 1: return launch<T, kCell, 1>(p, workspace, c, plan, stream);
    case 2: return launch<T, kCell, 2>(p, workspace, c, plan, stream);
    case 4: return launch<T, kCell, 4>(p, workspace, c, plan, stream);
    case 8: return launch<T, kCell, 8>(p, workspace, c, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

BackwardPlan persistent_backward_plan(Cell cell, int batch, int hidden, const BackwardConfig& c,
                                      const ChipBudget& chip) {
  BackwardPlan plan;
  if (c.units_per_block < 1 || c.batch_groups < 1 || !power_of_two(c.k_split) || c.k_split > 32 || batch < 1 ||
      hidden < 1)
    return plan;
  plan.rows_per_group = (batch + c.batch_groups - 1) / c.batch_groups;
  const int groups = (batch + plan.rows_per_group - 1) / plan.rows_per_group;  // none empty
  const int units_blocks = (hidden + c.units_per_block - 1) / c.units_per_block;
  // Held below 2^30: a grid that large is refused as not resident at once, never launched.
  plan.blocks = static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(groups) * units_blocks, 1 << 30));
  // The fewest rows a lane group takes (more rows reuse each W chunk read; fewer make shorter
  // chains and more warps) that keep the block within the preferred size.
  for (int rows_per_thread = 1; rows_per_thread <= kMaxRowsPerThread && rows_per_thread <= c.k_split;
       rows_per_thread *= 2) {
    const std::int64_t lane_groups = static_cast<std::int64_t>(c.units_per_block) *
                                     ((plan.rows_per_group + rows_per_thread - 1) / rows_per_thread);
    plan.rows_per_thread = rows_per_thread;
    plan.threads = static_cast<int>(std::min<std::int64_t>((lane_groups * c.k_split + 31) / 32 * 32, 1 << 30));
    if (plan.threads <= kPreferredBackwardThreads) break;
  }

  // The d_hidden tile: all G H where it fits beside W's columns in what a block may have when the
  // grid spreads evenly over the SMs, else equal tiles of the widest multiple of 32 columns that
  // fits (a shared row of 32 k floats takes 32 k + 4: shared_row_stride).
  const int gh4 = (gate_count(cell) * hidden + 3) / 4 * 4;
  const std::size_t w_bytes = static_cast<std::size_t>(c.units_per_block) * shared_row_stride(gh4) * sizeof(float);
  const auto rows_bytes = [&](int columns) {
    return static_cast<std::size_t>(plan.rows_per_group) * shared_row_stride(columns) * sizeof(float);
  };
  std::size_t budget = chip.shared_per_block;
  if (chip.sms > 0) {
    const std::size_t per_sm = (static_cast<std::size_t>(plan.blocks) + chip.sms - 1) / chip.sms;
    const std::size_t even = chip.shared_per_sm / per_sm;
    budget = std::min(budget, even > 1024 ? even - 1024 : 0);  // the runtime reserves 1 KiB a block
  }
  plan.tile = gh4;
  if (w_bytes + rows_bytes(gh4) > budget) {
    const std::size_t row_floats =
        budget > w_bytes ? (budget - w_bytes) / (static_cast<std::size_t>(plan.rows_per_group) * sizeof(float)) : 0;
    const std::size_t widest = row_floats >= 36 ? (row_floats - 4) / 32 * 32 : 0;
    if (widest >= 32) {
      const std::size_t tiles = (gh4 + widest - 1) / widest;
      plan.tile = static_cast<int>(((gh4 + tiles - 1) / tiles + 31) / 32 * 32);
    } else {
      plan.tile = 0;
    }
  }
  plan.shared_bytes = w_bytes + rows_bytes(plan.tile > 0 ? plan.tile : gh4);
  return plan;
}

std::size_t persistent_backward_workspace_bytes() { return kBarrierBytes; }

template <typename T>
cudaError_t persistent_backward(const BackwardChain<T>& p, void* workspace, const BackwardConfig& c,
                                cudaStream_t stream) {
  int device = 0, per_block = 0, per_sm = 0, sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  const ChipBudget chip{static_cast<std::size_t>(per_block), static_cast<std::size_t>(per_sm), sms};
  const BackwardPlan plan = persistent_backward_plan(p.cell, p.batch, p.hidden, c, chip);
  if (plan.blocks == 0 || plan.threads == 0 || plan.threads > kMaxBackwardThreads || plan.tile == 0 || p.steps < 1)
    return cudaErrorInvalidValue;
  if (p.cell == Cell::lstm && p.d_hidden != p.d_input) return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_rows<T, Cell::lstm>(p, workspace, c, plan, stream)
                              : launch_rows<T, Cell::gru>(p, workspace, c, plan, stream);
}

template cudaError_t persistent_backward<float>(const BackwardChain<float>&, void*, const BackwardConfig&,
                                                cudaStream_t);
template cudaError_t persistent_backward<__half>(const BackwardChain<__half>&, void*, const BackwardConfig&,
                                                 cudaStream_t);
template cudaError_t persistent_backward<__nv_bfloat16>(const BackwardChain<__nv_bfloat16>&, void*,
                                                        const BackwardConfig&, cudaStream_t);

}  // namespace shapetune::kernels::rnn
