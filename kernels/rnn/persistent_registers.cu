// The persistent_registers rung: one cooperative launch runs every step, W_hh in registers.
//
// A warp owns one hidden unit j for the rows_per_group batch rows of its block's group: its G gate
// rows W_hh[g H + j, :] sit in the lanes' registers for the whole sequence, lane l holding columns
// 128 c + 4 l .. + 3 of each (c < kChunks = ceil(H / 128)). A step: the block copies its rows of h
// from the fp32 exchange buffer (L2) into shared memory with cp.async, the first 8 rows as their own
// group so that the warps start on them while the rest arrive; per 8 rows every lane forms the
// partial dot products of its columns, G x 8 of them, and one transposing butterfly (31 shuffles)
// leaves lane l the total of gate l / 8 of row l % 8; lanes 0-7 gather their row's other gates with
// three shuffles and apply the cell. Then the grid meets at a barrier.
//
// Why: the shared-memory rung (persistent.cu) reads its W_hh slice from shared memory every step.
// At T 64, N 64, H 512 an H100 profile of its best config showed 10.7 us a step, issue slots 46%
// busy and 1.6 instructions issued per FMA (a shared load of W with every 4 of them); here only h
// is loaded, once per 16 FMAs, and no warp waits on another's product before the butterfly.
#include "kernels/rnn/rnn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/async_copy.cuh"
#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/cooperative.cuh"
#include "kernels/rnn/gates.cuh"

namespace shapetune::kernels::rnn {
namespace {

constexpr std::size_t kBarrierBytes = 256;  // the counter alone in its L2 lines, as persistent.cu's
constexpr int kRowsAtOnce = 8;              // rows a warp's butterfly serves: 4 gates x 8 rows = 32 lanes

struct Geometry {
  int units, units_blocks, rows_per_group, row_chunks;
};

// Lane l ends with the sum over the warp of v[l]: at each halving, a lane keeps the half of its
// values its partner sends away, and adds the partner's copy of that half. The width is a template
// argument so that every index is a constant (a loop over it left v in local memory).
template <int kWidth>
__device__ __forceinline__ void transposing_halve(float (&v)[32], int lane) {
  const bool upper = (lane & kWidth) != 0;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) {
    const float low = v[i], high = v[i + kWidth];
    v[i] = (upper ? high : low) + __shfl_xor_sync(0xffffffffu, upper ? low : high, kWidth);
  }
  if constexpr (kWidth > 1) transposing_halve<kWidth / 2>(v, lane);
}

__device__ __forceinline__ float transposing_sum(float (&v)[32]) {
  transposing_halve<16>(v, static_cast<int>(threadIdx.x) & 31);
  return v[0];
}

template <typename T, Cell kCell, int kChunks, bool kSave>
__global__ void __launch_bounds__(32 * kMaxRegisterUnits, 1)
    register_kernel(Layer<T> p, const float* __restrict__ input_gates, float* h_exchange, unsigned* barrier,
                    Geometry geo) {
  grid_dependency_sync();
  constexpr int G = gate_count(kCell);
  constexpr int kWidth = 128 * kChunks;  // a shared row of h, zero past H
  extern __shared__ __align__(16) float shared[];
  const int H = p.hidden, N = p.batch, rows_per_group = geo.rows_per_group;
  float* h_s = shared;                                   // [row_chunks * 8][kWidth]
  float* in_s = h_s + geo.row_chunks * kRowsAtOnce * kWidth;  // [units][row_chunks * 32]: lane l's input gates
  float* c_s = in_s + geo.units * geo.row_chunks * 32;  // [units][rows_per_group]: the LSTM's cell state
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int batch_group = static_cast<int>(blockIdx.x) / geo.units_blocks;
  const int j = (static_cast<int>(blockIdx.x) % geo.units_blocks) * geo.units + warp;
  const bool unit = j < H;
  const int jj = unit ? j : 0;
  const int n0 = batch_group * rows_per_group;
  const int rows = min(rows_per_group, N - n0);
  const int gate = lane >> 3, r8 = lane & 7;  // what the butterfly leaves this lane: gate `gate` of row r8

  float4 w[G][kChunks];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      float e[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = 128 * c + 4 * lane + i;
        e[i] = unit && k < H ? to_float(p.w_hh[(static_cast<std::int64_t>(g) * H + j) * H + k]) : 0.f;
      }
      w[g][c] = make_float4(e[0], e[1], e[2], e[3]);
    }
  // This lane's biases: both folded for its gate, except the GRU candidate's, which stay apart
  // (b_in outside r, b_hn inside it). Lanes past the GRU's three gates carry nothing.
  const bool has_gate = gate < G;
  const int gb = has_gate ? gate : 0;
  const float b_in = has_gate ? to_float(p.b_ih[gb * H + jj]) : 0.f;
  const float b_hid = has_gate ? to_float(p.b_hh[gb * H + jj]) : 0.f;

  for (int idx = threadIdx.x; idx < geo.row_chunks * kRowsAtOnce * kWidth; idx += blockDim.x) h_s[idx] = 0.f;
  if constexpr (kCell == Cell::lstm)
    for (int idx = threadIdx.x; idx < geo.units * rows_per_group; idx += blockDim.x) {
      const int u = idx / rows_per_group, row = idx % rows_per_group, ju = j - warp + u;
      c_s[idx] = row < rows && ju < H ? to_float(p.c0[static_cast<std::int64_t>(n0 + row) * H + ju]) : 0.f;
    }
  __syncthreads();

  const std::int64_t plane = static_cast<std::int64_t>(N) * H;
  const bool quads = H % 4 == 0;  // the exchange buffer's rows start 16-byte aligned: cp.async
  // The copy of h walks rows x q 16-byte chunks, blockDim.x at a time: this thread's first chunk and
  // how far each turn moves it, divided out once here. (A division a chunk, 16 a step at H 512, sat
  // on the step's critical path: 22% of an H100 profile's stall samples were its fixed-latency waits.)
  const int q = quads ? H / 4 : 1;
  const int first_row = static_cast<int>(threadIdx.x) / q, first_chunk = static_cast<int>(threadIdx.x) % q;
  const int row_step = static_cast<int>(blockDim.x) / q, chunk_step = static_cast<int>(blockDim.x) % q;
  float* in_mine = in_s + warp * geo.row_chunks * 32;
  // The input gates of this lane's (gate, row) in every chunk, loaded a step ahead: a load issued
  // at the step's start held up the shared store after it (the largest stall, long scoreboard, in
  // an H100 profile at H 512).
  constexpr int kMaxRowChunks = kMaxRegisterRows / kRowsAtOnce;
  float next_in[kMaxRowChunks];
  const auto load_inputs = [&](int step) {
#pragma unroll
    for (int ch = 0; ch < kMaxRowChunks; ++ch) {
      const int row = ch * kRowsAtOnce + r8;
      next_in[ch] = ch < geo.row_chunks && unit && has_gate && row < rows
                        ? input_gates[(static_cast<std::int64_t>(step) * N + n0 + row) * G * H + gate * H + j]
                        : 0.f;
    }
  };
  load_inputs(0);
  for (int t = 0; t < p.steps; ++t) {
    const float* h_prev = h_exchange + ((t + 1) & 1) * plane;  // written at step t - 1
    const int first = min(rows, kRowsAtOnce);
    if (t > 0 && quads) {
      for (int part = 0; part < 2; ++part) {
        const int to = part == 0 ? first : rows;
        int r = (part == 0 ? 0 : first) + first_row, k4 = first_chunk;
        while (r < to) {
          copy_async_16(h_s + r * kWidth + 4 * k4, h_prev + static_cast<std::int64_t>(n0 + r) * H + 4 * k4);
          r += row_step, k4 += chunk_step;
          if (k4 >= q) k4 -= q, ++r;
        }
        commit_async_copies();
      }
    } else {
      for (int idx = threadIdx.x; idx < rows * H; idx += blockDim.x) {
        const int r = idx / H, k = idx - r * H;
        const std::int64_t e = static_cast<std::int64_t>(n0 + r) * H + k;
        h_s[r * kWidth + k] = t == 0 ? to_float(p.h0[e]) : __ldcg(h_prev + e);
      }
    }
#pragma unroll
    for (int ch = 0; ch < kMaxRowChunks; ++ch)
      if (ch < geo.row_chunks) in_mine[ch * 32 + lane] = next_in[ch];
    if (t + 1 < p.steps) load_inputs(t + 1);
    if (!(t > 0 && quads)) __syncthreads();

    for (int ch = 0; ch < geo.row_chunks; ++ch) {
      if (t > 0 && quads && ch < 2) {
        if (ch == 0) wait_async_copies<1>();
        else wait_async_copies<0>();
        __syncthreads();
      }
      float acc[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[i] = 0.f;
      // Rows past the group's stay zero in h_s: their sums are zero and nobody applies them.
      const float* h_rows = h_s + ch * kRowsAtOnce * kWidth + 4 * lane;
#pragma unroll
      for (int rr = 0; rr < kRowsAtOnce; ++rr)
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const float4 h = *reinterpret_cast<const float4*>(h_rows + rr * kWidth + 128 * c);
#pragma unroll
          for (int g = 0; g < G; ++g)
            acc[g * kRowsAtOnce + rr] =
                fmaf(h.w, w[g][c].w,
                     fmaf(h.z, w[g][c].z, fmaf(h.y, w[g][c].y, fmaf(h.x, w[g][c].x, acc[g * kRowsAtOnce + rr]))));
        }
      const float total = transposing_sum(acc);
      const float in = in_mine[ch * 32 + lane];
      // Lane r8 of gate 0 gathers its row's other gates. LSTM: i f g o, each pre-activation whole.
      // GRU: r and z whole; the candidate's two parts, W_hn h + b_hn and W_in x + b_in, apart.
      const bool split = kCell == Cell::gru && gate == 2;
      const float whole = split ? total + b_hid : total + in + b_in + b_hid;
      const float second = __shfl_sync(0xffffffffu, whole, r8 + 8);
      const float third = __shfl_sync(0xffffffffu, whole, r8 + 16);
      const float fourth = kCell == Cell::lstm ? __shfl_sync(0xffffffffu, whole, r8 + 24)
                                               : __shfl_sync(0xffffffffu, in + b_in, r8 + 16);
      const int row = ch * kRowsAtOnce + r8;
      if (gate == 0 && unit && row < rows) {
        const std::int64_t e = static_cast<std::int64_t>(n0 + row) * H + j;
        float h, kept[kSavedGates];
        float* c = c_s + warp * rows_per_group + row;
        if constexpr (kCell == Cell::lstm) {
          const float pre[4] = {whole, second, third, fourth};
          h = lstm_update(pre, *c, kept);
        } else {
          h = gru_update(whole, second, fourth, third, h_s[row * kWidth + j], kept);
        }
        const T stored = from_float<T>(h);
        const float fed_back = to_float(stored);  // the recurrence reads h as stored
        p.y[t * plane + e] = stored;
        if constexpr (kSave) {  // for the backward pass: off the chain, nothing reads them in this launch
          float* keep = p.saved + (static_cast<std::int64_t>(t) * N + n0 + row) * (kSavedGates * H) + j;
#pragma unroll
          for (int g = 0; g < kSavedGates; ++g) keep[g * H] = kept[g];
          if constexpr (kCell == Cell::lstm) p.cells[(t + 1) * plane + e] = *c;
        }
        h_exchange[(t & 1) * plane + e] = fed_back;
        if (t + 1 == p.steps) {
          p.h_t[e] = stored;
          if constexpr (kCell == Cell::lstm) p.c_t[e] = from_float<T>(*c);
        }
      }
    }
    if (t + 1 < p.steps) grid_barrier(barrier, static_cast<unsigned>(t + 1) * gridDim.x);
  }
}

template <typename T, Cell kCell, int kChunks>
cudaError_t launch(const Layer<T>& p, const float* input_gates, void* workspace, const RegisterPlan& plan,
                   const RegisterConfig& c, cudaStream_t stream) {
  auto kernel = p.saved ? register_kernel<T, kCell, kChunks, true> : register_kernel<T, kCell, kChunks, false>;
  if (cudaError_t e = prepare_cooperative(kernel, plan.blocks, plan.threads, plan.shared_bytes); e != cudaSuccess)
    return e;
  auto* barrier = static_cast<unsigned*>(workspace);
  float* h_exchange = reinterpret_cast<float*>(static_cast<char*>(workspace) + kBarrierBytes);
  if (cudaError_t e = cudaMemsetAsync(barrier, 0, sizeof(unsigned), stream); e != cudaSuccess) return e;
  Geometry geo{c.units_per_block, (p.hidden + c.units_per_block - 1) / c.units_per_block, plan.rows_per_group,
               (plan.rows_per_group + kRowsAtOnce - 1) / kRowsAtOnce};
  Layer<T> layer = p;
  void* args[] = {&layer, &input_gates, &h_exchange, &barrier, &geo};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(plan.blocks), dim3(plan.threads),
                                     args, plan.shared_bytes, stream);
}

template <typename T, Cell kCell>
cudaError_t launch_chunks(const Layer<T>& p, const float* input_gates, void* workspace, const RegisterPlan& plan,
                          const RegisterConfig& c, cudaStream_t stream) {
  switch (plan.chunks) {
    case 1: return launch<T, kCell, 1>(p, input_gates, workspace, plan, c, stream);
    case 2: return launch<T, kCell, 2>(p, input_gates, workspace, plan, c, stream);
    case 4: return launch<T, kCell, 4>(p, input_gates, workspace, plan, c, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

RegisterPlan register_plan(Cell cell, int batch, int hidden, const RegisterConfig& c) {
  RegisterPlan plan;
  if (c.units_per_block < 1 || c.units_per_block > kMaxRegisterUnits || c.batch_groups < 1 || batch < 1 ||
      hidden < 1 || hidden > kMaxRegisterHidden)
    return plan;
  const int rows_per_group = (batch + c.batch_groups - 1) / c.batch_groups;
  if (rows_per_group > kMaxRegisterRows) return plan;
  const int groups = (batch + rows_per_group - 1) / rows_per_group;  // none empty
  const int chunks = hidden <= 128 ? 1 : hidden <= 256 ? 2 : 4;
  const int row_chunks = (rows_per_group + kRowsAtOnce - 1) / kRowsAtOnce;
  plan.rows_per_group = rows_per_group;
  plan.chunks = chunks;
  plan.threads = 32 * c.units_per_block;
  plan.blocks = groups * ((hidden + c.units_per_block - 1) / c.units_per_block);
  const std::size_t floats = static_cast<std::size_t>(row_chunks) * kRowsAtOnce * 128 * chunks +
                             static_cast<std::size_t>(c.units_per_block) * row_chunks * 32 +
                             (cell == Cell::lstm ? static_cast<std::size_t>(c.units_per_block) * rows_per_group : 0);
  plan.shared_bytes = floats * sizeof(float);
  return plan;
}

template <typename T>
cudaError_t register_forward(const Layer<T>& p, const float* input_gates, void* workspace, const RegisterConfig& c,
                             cudaStream_t stream) {
  const RegisterPlan plan = register_plan(p.cell, p.batch, p.hidden, c);
  if (plan.blocks == 0 || p.steps < 1) return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_chunks<T, Cell::lstm>(p, input_gates, workspace, plan, c, stream)
                              : launch_chunks<T, Cell::gru>(p, input_gates, workspace, plan, c, stream);
}

template cudaError_t register_forward<float>(const Layer<float>&, const float*, void*, const RegisterConfig&,
                                             cudaStream_t);
template cudaError_t register_forward<__half>(const Layer<__half>&, const float*, void*, const RegisterConfig&,
                                              cudaStream_t);
template cudaError_t register_forward<__nv_bfloat16>(const Layer<__nv_bfloat16>&, const float*, void*,
                                                     const RegisterConfig&, cudaStream_t);

}  // namespace shapetune::kernels::rnn
