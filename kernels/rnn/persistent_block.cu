// The persistent_block rung: one thread block holds all of W_hh and runs every step for its own
// rows_per_block batch rows. Blocks never exchange anything: two block barriers a step.
//
// Thread (gate row g H + j, slice s) of G H x k_split threads owns the s-th of k_split
// contiguous slices of that row: its first register_quads 16-byte chunks in registers, the rest
// in shared memory (chunk q of every thread side by side, so a warp's 16-byte reads are
// conflict-free). A warp is 32 gate rows of one slice, so its reads of h are broadcasts. A step:
// every thread forms the partial products of its slice for the block's rows into shared memory;
// a barrier; thread (row r, unit j) sums the k_split partials of its unit's G gates, adds the
// input gates (loaded a step ahead) and biases, applies the cell and writes h back into the
// shared h rows; a barrier.
//
// Why: at H 128 the cluster rung's step (2.1-2.6 us on the H100) is latency: an exchange of h
// across 8-16 blocks, a cluster barrier, and little arithmetic between. cuDNN's small-H persistent
// algorithm takes about 0.9 us a step there. Here a step is bound by shared-memory bandwidth instead:
// the W_hh not in registers read once (LSTM at H 128 with 16 chunks of 32 in registers: 128 KB,
// 1024 cycles) against as many cycles of FMAs at 2 rows a block; predicted about 0.8 us a step.
#include "kernels/rnn/rnn.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/grid.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/rnn/cooperative.cuh"
#include "kernels/rnn/gates.cuh"

namespace shapetune::kernels::rnn {
namespace {

struct Geometry {
  int k_split, quads;  // quads: 16-byte chunks of a thread's slice (the slice is 4 quads floats, zero past H)
  int recurrent_blocks = 0;  // the blocks that run the recurrence; any after them project (BlockConfig::project)
};

// The projection's tiles (BlockConfig::project): kProjectRows batch rows of one step by kProjectCols
// gate columns, over D in chunks of kProjectDepth held in shared memory depth-major (a thread's
// 4 x 4 outputs read a 16-byte chunk of each). A thread stages 4 depths of one row or column, so
// a warp's stores are 32 consecutive floats of a depth (conflict-free) and its loads 16 bytes a lane.
constexpr int kProjectRows = 64, kProjectCols = 96, kProjectDepth = 64;
constexpr int kProjectFloats = kProjectDepth * (kProjectRows + kProjectCols);

// Four elements of a row from k as fp32, zero past `width` and where !inside: one 16-byte load
// where the row allows (fp32, width a multiple of 4), else four scalar loads.
template <typename T>
__device__ __forceinline__ float4 load_four(const T* row, int k, int width, bool inside) {
  if (inside && std::is_same_v<T, float> && width % 4 == 0 && k + 4 <= width)
    return __ldg(reinterpret_cast<const float4*>(row + k));
  float e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = inside && k + i < width ? to_float(row[k + i]) : 0.f;
  return make_float4(e[0], e[1], e[2], e[3]);
}

__device__ __forceinline__ int load_acquire(const int* at) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(at) : "memory");
  return v;
}

// The tiles a step's count reaches.
__host__ __device__ inline int projection_tiles(int batch, int gate_rows) {
  return (batch + kProjectRows - 1) / kProjectRows * ((gate_rows + kProjectCols - 1) / kProjectCols);
}

// input_gates = x W_ih^T for every step, a tile at a time in step order, by the launch's blocks past
// the recurrence's (`first` of `blocks`): after each tile, ready[t] counts it. The counter's release
// (the fence after the block barrier) is cumulative: it orders every thread's stores of the tile.
template <typename T>
__device__ void project_ahead(const Layer<T>& p, const T* __restrict__ w_ih, float* input_gates, int* ready,
                              float* shared, int first, int blocks) {
  const int N = p.batch, D = p.input, GH = gate_count(p.cell) * p.hidden;
  const int col_tiles = (GH + kProjectCols - 1) / kProjectCols, per_step = projection_tiles(N, GH);
  float* x_s = shared;                                 // [kProjectDepth][kProjectRows]
  float* w_s = shared + kProjectDepth * kProjectRows;  // [kProjectDepth][kProjectCols]
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  constexpr int kColGroups = kProjectCols / 4, kGroups = kProjectRows / 4 * kColGroups;
  for (int item = first; item < p.steps * per_step; item += blocks) {
    const int t = item / per_step, n0 = item % per_step / col_tiles * kProjectRows;
    const int c0 = item % col_tiles * kProjectCols;
    for (int group = tid; group < ((kGroups + threads - 1) / threads) * threads; group += threads) {
      // Every thread takes part in the loads and barriers; a thread past the last group computes nothing.
      const bool computes = group < kGroups;
      const int r4 = group / kColGroups * 4, c4 = group % kColGroups * 4;
      float acc[4][4] = {};
      for (int k0 = 0; k0 < D; k0 += kProjectDepth) {
        __syncthreads();  // the chunk before is read
        for (int idx = tid; idx < kProjectRows * kProjectDepth / 4; idx += threads) {
          const int r = idx % kProjectRows, k = idx / kProjectRows * 4;
          const float4 v = load_four(p.x + (static_cast<std::int64_t>(t) * N + n0 + r) * D, k0 + k, D, n0 + r < N);
          x_s[k * kProjectRows + r] = v.x, x_s[(k + 1) * kProjectRows + r] = v.y;
          x_s[(k + 2) * kProjectRows + r] = v.z, x_s[(k + 3) * kProjectRows + r] = v.w;
        }
        for (int idx = tid; idx < kProjectCols * kProjectDepth / 4; idx += threads) {
          const int c = idx % kProjectCols, k = idx / kProjectCols * 4;
          const float4 v = load_four(w_ih + static_cast<std::int64_t>(c0 + c) * D, k0 + k, D, c0 + c < GH);
          w_s[k * kProjectCols + c] = v.x, w_s[(k + 1) * kProjectCols + c] = v.y;
          w_s[(k + 2) * kProjectCols + c] = v.z, w_s[(k + 3) * kProjectCols + c] = v.w;
        }
        __syncthreads();
        if (computes) {
#pragma unroll 4
          for (int k = 0; k < kProjectDepth; ++k) {
            const float4 xv = *reinterpret_cast<const float4*>(x_s + k * kProjectRows + r4);
            const float4 wv = *reinterpret_cast<const float4*>(w_s + k * kProjectCols + c4);
            const float xr[4] = {xv.x, xv.y, xv.z, xv.w}, wc[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xr[i], wc[j], acc[i][j]);
          }
        }
      }
      if (computes) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int n = n0 + r4 + i, c = c0 + c4 + j;
            if (n < N && c < GH) input_gates[(static_cast<std::int64_t>(t) * N + n) * GH + c] = acc[i][j];
          }
      }
    }
    __syncthreads();  // every store of the tile issued
    if (tid == 0) {
      __threadfence();
      atomicAdd(ready + t, 1);
    }
  }
}

// A thread's slice of W_hh (`quad(q)`: its q-th 16-byte chunk): the first kRegisterQuads into
// registers, the rest into shared memory, chunk q of every thread side by side (conflict-free).
template <int kRegisterQuads, typename Quad>
__device__ __forceinline__ void keep_slice(Quad quad, int quads, int threads, int tid,
                                           float4 (&w_r)[kRegisterQuads > 0 ? kRegisterQuads : 1], float4* w_s) {
#pragma unroll
  for (int q = 0; q < kRegisterQuads; ++q) w_r[q] = quad(q);
  for (int q = kRegisterQuads; q < quads; ++q) w_s[(q - kRegisterQuads) * threads + tid] = quad(q);
}

// The dot products of a thread's slice with kRows shared rows (`rows` at the slice's start, `width`
// apart): four sums a row, one per lane of the 16-byte chunks, four chains a quarter as long as one
// (a single sum made a step one chain of 4 x quads dependent FMAs: the "wait" stall on the H100).
template <int kRows, int kRegisterQuads>
__device__ __forceinline__ void slice_products(const float* rows, int width, int quads, int threads, int tid,
                                               const float4 (&w_r)[kRegisterQuads > 0 ? kRegisterQuads : 1],
                                               const float4* w_s, float (&out)[kRows]) {
  float4 acc[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) acc[rr] = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto add = [](float4& a, const float4& v, const float4& w) {
    a.x = fmaf(v.x, w.x, a.x), a.y = fmaf(v.y, w.y, a.y), a.z = fmaf(v.z, w.z, a.z), a.w = fmaf(v.w, w.w, a.w);
  };
#pragma unroll
  for (int q = 0; q < kRegisterQuads; ++q)
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr)
      add(acc[rr], *reinterpret_cast<const float4*>(rows + rr * width + 4 * q), w_r[q]);
#pragma unroll 4
  for (int q = kRegisterQuads; q < quads; ++q) {
    const float4 w = w_s[(q - kRegisterQuads) * threads + tid];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) add(acc[rr], *reinterpret_cast<const float4*>(rows + rr * width + 4 * q), w);
  }
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) out[rr] = (acc[rr].x + acc[rr].y) + (acc[rr].z + acc[rr].w);
}

// The input gates of one (batch row, unit) for a step, which a cell thread loads a step ahead of
// their use. With a projection in the launch (projection.ready), a step's gates are read after the
// count that announces them (acquire loads), and the counts are read ahead while they are complete,
// so that once the projection is ahead a step reads no counter at all.
// It keeps only its progress: the pointers stay kernel parameters, which cost no registers.
template <typename T, int G>
struct InputGates {
  int ready_through;  // the last step whose gates are known written

  __device__ InputGates(const Layer<T>& p, const BlockProjection<T>& projection)
      : ready_through(projection.ready ? -1 : p.steps - 1) {}

  __device__ void load(const Layer<T>& p, const float* gates, const BlockProjection<T>& projection, int step, int n,
                       int j, bool live, float (&out)[G]) {
    if (!live) {
#pragma unroll
      for (int g = 0; g < G; ++g) out[g] = 0.f;
      return;
    }
    if (step > ready_through) {
      const int tiles = projection_tiles(p.batch, G * p.hidden);
      while (load_acquire(projection.ready + step) < tiles) __nanosleep(64);
      int s = step + 1;
      while (s < p.steps && load_acquire(projection.ready + s) >= tiles) ++s;
      ready_through = s - 1;
    }
    const float* at = gates + (static_cast<std::int64_t>(step) * p.batch + n) * (G * p.hidden) + j;
#pragma unroll
    for (int g = 0; g < G; ++g) out[g] = __ldcg(at + g * p.hidden);
  }
};

// A block past geo.recurrent_blocks runs project_ahead instead of the recurrence (BlockConfig::project).
template <typename T>
__device__ bool projects_instead(const Layer<T>& p, float* input_gates, const Geometry& geo,
                                 const BlockProjection<T>& projection, float* shared) {
  const int block = static_cast<int>(blockIdx.x);
  if (block < geo.recurrent_blocks) return false;
  project_ahead(p, projection.w_ih, input_gates, projection.ready, shared, block - geo.recurrent_blocks,
                static_cast<int>(gridDim.x) - geo.recurrent_blocks);
  return true;
}

// projection.ready == nullptr: input_gates were written before the launch. Otherwise the blocks past
// geo.recurrent_blocks write them (project_ahead), and a cell thread waits for them (InputGates).
template <typename T, Cell kCell, int kRows, int kRegisterQuads>
__global__ void __launch_bounds__(kRegisterQuads > 16 ? kMaxWideRegisterThreads : kMaxBlockThreads, 1)
    block_kernel(Layer<T> p, float* input_gates, Geometry geo, BlockProjection<T> projection) {
  grid_dependency_sync();
  extern __shared__ __align__(16) float shared[];
  if (projects_instead(p, input_gates, geo, projection, shared)) return;
  constexpr int G = gate_count(kCell);
  const int H = p.hidden, N = p.batch, GH = G * H, KS = geo.k_split, quads = geo.quads;
  const int slice = 4 * quads, width = KS * slice;  // a shared h row: every slice, zero past H
  const int threads = GH * KS;
  const int tid = static_cast<int>(threadIdx.x);
  const int row_of_w = tid % GH, s = tid / GH;  // this thread's gate row of W_hh and its slice
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int rows = min(kRows, N - n0);

  float4* w_s = reinterpret_cast<float4*>(shared);                         // [quads - kRegisterQuads][threads]
  float* h_s = shared + 4 * (quads - kRegisterQuads) * threads;            // [kRows][width]
  float* part_s = h_s + kRows * width;                                     // [k_split][kRows][G H]

  // A warp's threads read 32 rows, H apart: 16-byte loads where the rows allow (a sector each,
  // half used), not a scalar load per sector.
  const auto w_quad = [&](int q) {
    return load_four(p.w_hh + static_cast<std::int64_t>(row_of_w) * H, s * slice + 4 * q, H, true);
  };
  float4 w_r[kRegisterQuads > 0 ? kRegisterQuads : 1];
  keep_slice<kRegisterQuads>(w_quad, quads, threads, tid, w_r, w_s);

  // The cell threads: unit j of row r, for tid < kRows H.
  const bool cell = tid < kRows * H;
  const int j = tid % H, r = tid / H;
  const bool live = cell && r < rows;
  const std::int64_t e0 = static_cast<std::int64_t>(n0 + (live ? r : 0)) * H + j;
  float state = 0.f;  // LSTM: c; GRU: the h it mixes in
  float b_in[G], b_hid[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    b_in[g] = cell ? to_float(p.b_ih[g * H + j]) : 0.f;
    b_hid[g] = cell ? to_float(p.b_hh[g * H + j]) : 0.f;
  }
  if (live) state = to_float(kCell == Cell::lstm ? p.c0[e0] : p.h0[e0]);
  for (int idx = tid; idx < kRows * width; idx += blockDim.x) {
    const int rr = idx / width, k = idx % width;
    h_s[idx] = rr < rows && k < H ? to_float(p.h0[static_cast<std::int64_t>(n0 + rr) * H + k]) : 0.f;
  }
  // The input gates of this thread's (row, unit), a step ahead (their load off the step's chain).
  float next_in[G];
  InputGates<T, G> inputs(p, projection);
  inputs.load(p, input_gates, projection, 0, n0 + r, j, live, next_in);
  __syncthreads();

  const std::int64_t plane = static_cast<std::int64_t>(N) * H;
  for (int t = 0; t < p.steps; ++t) {
    float in[G];
#pragma unroll
    for (int g = 0; g < G; ++g) in[g] = next_in[g];
    if (t + 1 < p.steps) inputs.load(p, input_gates, projection, t + 1, n0 + r, j, live, next_in);

    float sums[kRows];
    slice_products<kRows, kRegisterQuads>(h_s + s * slice, width, quads, threads, tid, w_r, w_s, sums);
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) part_s[(s * kRows + rr) * GH + row_of_w] = sums[rr];
    __syncthreads();

    if (live) {
      float sum[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        sum[g] = 0.f;
        for (int ks = 0; ks < KS; ++ks) sum[g] += part_s[(ks * kRows + r) * GH + g * H + j];
      }
      float h, kept[kSavedGates];
      if constexpr (kCell == Cell::lstm) {
        const float pre[4] = {in[0] + sum[0] + b_in[0] + b_hid[0], in[1] + sum[1] + b_in[1] + b_hid[1],
                              in[2] + sum[2] + b_in[2] + b_hid[2], in[3] + sum[3] + b_in[3] + b_hid[3]};
        h = lstm_update(pre, state, kept);
      } else {
        h = gru_update(in[0] + sum[0] + b_in[0] + b_hid[0], in[1] + sum[1] + b_in[1] + b_hid[1], in[2] + b_in[2],
                       sum[2] + b_hid[2], state, kept);
      }
      const T stored = from_float<T>(h);
      const float fed_back = to_float(stored);  // the recurrence reads h as stored
      p.y[t * plane + e0] = stored;
      if (p.saved) {  // for the backward pass (a uniform branch: no second instantiation)
        float* keep = p.saved + (static_cast<std::int64_t>(t) * N + n0 + r) * (kSavedGates * H) + j;
#pragma unroll
        for (int g = 0; g < kSavedGates; ++g) keep[g * H] = kept[g];
        if constexpr (kCell == Cell::lstm) p.cells[(t + 1) * plane + e0] = state;
      }
      h_s[r * width + j] = fed_back;
      if constexpr (kCell == Cell::gru) state = fed_back;
      if (t + 1 == p.steps) {
        p.h_t[e0] = stored;
        if constexpr (kCell == Cell::lstm) p.c_t[e0] = from_float<T>(state);
      }
    }
    __syncthreads();
  }
}

// The unit_groups layout (BlockConfig::unit_groups = 1). The k_split = L lanes of a group hold
// kUnits hidden units (BlockConfig::group_units), lane s each unit's G gate rows of W_hh over the
// 16-byte column chunks s, s + L, s + 2 L, ... (chunk-major: the first register_quads of its
// kUnits x G x quads chunks in registers, the rest in shared memory, chunk i of every thread side
// by side). A step: each lane reads its chunks of the block's h rows (L distinct 16-byte addresses
// a warp: broadcasts), forms its share of the kUnits x G sums of every row, and shuffles sum them
// over the group (with two units, the first exchange also splits them: half the lanes keep each);
// lane r of a unit's lanes applies the cell to row r and writes h into the other of two h buffers;
// one barrier.
//
// Why: the row layout (unit_groups 0) reads every thread's whole h row from shared memory each step
// (32 16-byte loads at H 128, each feeding 4 FMAs) and meets twice a step, once for the partial
// sums. Here a thread loads quads / (kUnits G) of them, each feeding 4 kUnits G FMAs, and nothing but
// h crosses shared memory. A 16-byte load costs 4 wavefronts even as a broadcast (Nsight Compute,
// H100), so the h loads take shared memory's bandwidth into registers: 512 cycles a step for the GRU
// at H 128 with one unit a group, 256 with two, beside the FMAs' 384.
//
// Registers: the GRU's 24 chunks at 512 threads leave 32 of 128 registers for the rest, so the
// kernel keeps no activations for a backward pass (block_forward refuses Layer::saved with unit
// groups), holds one set of input gates (the cell uses them and loads the next step's), and keeps
// the biases in shared memory. The cell is the step's serial tail: it uses the fast activations
// (gates.cuh) and stores h before anything else.
template <typename T, Cell kCell, int kRows, int kUnits, int kRegisterQuads>
__global__ void __launch_bounds__(unit_group_thread_cap(kRegisterQuads), 1)
    group_kernel(Layer<T> p, float* input_gates, Geometry geo, BlockProjection<T> projection) {
  grid_dependency_sync();
  extern __shared__ __align__(16) float shared[];
  if (projects_instead(p, input_gates, geo, projection, shared)) return;
  constexpr int G = gate_count(kCell), kRowsOfW = kUnits * G;
  static_assert(kRegisterQuads % kRowsOfW == 0, "a lane keeps whole chunks (all its gate rows) in registers");
  constexpr int kRegisterChunks = kRegisterQuads / kRowsOfW;
  const int H = p.hidden, N = p.batch, L = geo.k_split, chunks = geo.quads;
  const int half = L / kUnits;       // the lanes that end with one unit's sums
  const int width = 4 * L * chunks;  // a shared h row: every lane's chunks, zero past H
  const int threads = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int s = tid % L, group = tid / L;
  const int mine = kUnits == 2 && (s & half) ? 1 : 0;  // the unit whose sums this lane ends with
  const int j = group * kUnits + mine;                  // (j >= H: a padding unit)
  const int jc = j < H ? j : 0;
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int rows = min(kRows, N - n0);

  float4* w_s = reinterpret_cast<float4*>(shared);  // [(chunks - kRegisterChunks) kUnits G][threads]
  float* h_s = shared + 4 * (chunks - kRegisterChunks) * kRowsOfW * threads;  // [2][kRows][width]
  const int buffer = kRows * width;
  // [G + 1][H]: b_ih + b_hh of each gate (the GRU candidate's b_ih alone), then the GRU's b_hn,
  // which r multiplies (in shared memory, for the registers above).
  float* bias_s = h_s + 2 * buffer;

  const auto w_quad = [&](int c, int u, int g) {
    const int unit = group * kUnits + u;
    return load_four(p.w_hh + (static_cast<std::int64_t>(g) * H + (unit < H ? unit : 0)) * H, 4 * (s + L * c), H,
                     unit < H);
  };
  float4 w_r[kRegisterChunks > 0 ? kRegisterChunks : 1][kUnits][G];
#pragma unroll
  for (int c = 0; c < kRegisterChunks; ++c)
#pragma unroll
    for (int u = 0; u < kUnits; ++u)
#pragma unroll
      for (int g = 0; g < G; ++g) w_r[c][u][g] = w_quad(c, u, g);
  for (int c = kRegisterChunks; c < chunks; ++c)
#pragma unroll
    for (int u = 0; u < kUnits; ++u)
#pragma unroll
      for (int g = 0; g < G; ++g) w_s[((c - kRegisterChunks) * kRowsOfW + u * G + g) * threads + tid] = w_quad(c, u, g);
  for (int idx = tid; idx < 2 * buffer; idx += threads) {
    const int rr = idx % buffer / width, k = idx % width;
    h_s[idx] = idx < buffer && rr < rows && k < H ? to_float(p.h0[static_cast<std::int64_t>(n0 + rr) * H + k]) : 0.f;
  }
  for (int idx = tid; idx < (G + 1) * H; idx += threads) {
    const int g = idx / H;
    const bool gru_candidate = kCell == Cell::gru && g == 2;
    bias_s[idx] = g == G ? (kCell == Cell::gru ? to_float(p.b_hh[idx - H]) : 0.f)
                         : to_float(p.b_ih[idx]) + (gru_candidate ? 0.f : to_float(p.b_hh[idx]));
  }

  // Lane r of a unit's lanes applies the cell to row r.
  const int r = s % half;
  const bool live = j < H && r < rows;
  const std::int64_t e0 = static_cast<std::int64_t>(n0 + (live ? r : 0)) * H + jc;
  float state = live ? to_float(kCell == Cell::lstm ? p.c0[e0] : p.h0[e0]) : 0.f;
  // A step's input gates, loaded a step ahead (nothing uses them before the next step's cell).
  float next_in[G];
  InputGates<T, G> inputs(p, projection);
  inputs.load(p, input_gates, projection, 0, n0 + r, jc, live, next_in);
  __syncthreads();

  const std::int64_t plane = static_cast<std::int64_t>(N) * H;
  for (int t = 0; t < p.steps; ++t) {
    const float* h_read = h_s + (t & 1) * buffer + 4 * s;
    float acc[kRows][kUnits][G];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr)
#pragma unroll
      for (int u = 0; u < kUnits; ++u)
#pragma unroll
        for (int g = 0; g < G; ++g) acc[rr][u][g] = 0.f;
    const auto add = [&acc](int rr, int u, int g, const float4& h, const float4& w) {
      acc[rr][u][g] = fmaf(h.w, w.w, fmaf(h.z, w.z, fmaf(h.y, w.y, fmaf(h.x, w.x, acc[rr][u][g]))));
    };
#pragma unroll
    for (int c = 0; c < kRegisterChunks; ++c) {
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) {
        const float4 h = *reinterpret_cast<const float4*>(h_read + rr * width + 4 * L * c);
#pragma unroll
        for (int u = 0; u < kUnits; ++u)
#pragma unroll
          for (int g = 0; g < G; ++g) add(rr, u, g, h, w_r[c][u][g]);
      }
    }
#pragma unroll 1
    for (int c = kRegisterChunks; c < chunks; ++c) {
      float4 h[kRows];
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) h[rr] = *reinterpret_cast<const float4*>(h_read + rr * width + 4 * L * c);
#pragma unroll
      for (int u = 0; u < kUnits; ++u)
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float4 w = w_s[((c - kRegisterChunks) * kRowsOfW + u * G + g) * threads + tid];
#pragma unroll
          for (int rr = 0; rr < kRows; ++rr) add(rr, u, g, h[rr], w);
        }
    }
    // The group's lanes are adjacent. Two units: the exchange across the halves leaves each half
    // one unit's sums over both halves; then a butterfly within the half (with one unit, within
    // the group) leaves every total in every lane of it.
    float sums[kRows][G];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if constexpr (kUnits == 2) {
          const float keep = mine ? acc[rr][1][g] : acc[rr][0][g], give = mine ? acc[rr][0][g] : acc[rr][1][g];
          sums[rr][g] = keep + __shfl_xor_sync(0xffffffffu, give, half);
        } else {
          sums[rr][g] = acc[rr][0][g];
        }
      }
    for (int offset = half / 2; offset > 0; offset /= 2)
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr)
#pragma unroll
        for (int g = 0; g < G; ++g) sums[rr][g] += __shfl_xor_sync(0xffffffffu, sums[rr][g], offset);

    if (live) {
      float sum[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        sum[g] = sums[0][g];
#pragma unroll
        for (int rr = 1; rr < kRows; ++rr)
          if (r == rr) sum[g] = sums[rr][g];
      }
      // This step's input gates (loaded a step ago); the next step's are loaded after h is out.
      const float* in = next_in;
      float h;
      if constexpr (kCell == Cell::lstm) {
        float pre[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) pre[g] = in[g] + sum[g] + bias_s[g * H + j];
        h = lstm_update<true>(pre, state);
      } else {
        h = gru_update<true>(in[0] + sum[0] + bias_s[j], in[1] + sum[1] + bias_s[H + j], in[2] + bias_s[2 * H + j],
                             sum[2] + bias_s[3 * H + j], state);
      }
      const T stored = from_float<T>(h);
      const float fed_back = to_float(stored);  // the recurrence reads h as stored
      h_s[((t + 1) & 1) * buffer + r * width + j] = fed_back;
      // The store above is the step's critical path: keep the global traffic's address arithmetic
      // below it (the compiler had put it first).
      asm volatile("" ::: "memory");
      p.y[t * plane + e0] = stored;
      if (t + 1 < p.steps) inputs.load(p, input_gates, projection, t + 1, n0 + r, jc, live, next_in);
      if constexpr (kCell == Cell::gru) state = fed_back;
      if (t + 1 == p.steps) {
        p.h_t[e0] = stored;
        if constexpr (kCell == Cell::lstm) p.c_t[e0] = from_float<T>(state);
      }
    }
    // Buffer (t+1)&1 is written; buffer t&1, which step t+1 writes, is read by every thread.
    __syncthreads();
  }
}

// The backward chain the same way (rnn.cuh's BackwardChain): a block runs its batch rows alone.
// Thread (unit j, slice s) of H x k_split threads keeps column j of W_hh over the s-th slice of the
// G H gate rows (registers, then shared memory, as the forward). A step back: every thread forms
// its slice's share of d_hidden_{t+1} W_hh for the block's rows (d_hidden_{t+1} in shared memory,
// written by this block the step before: no exchange); a barrier; thread (row r, unit j) adds the
// shares, dy and the carries, applies the cell backward (persistent_backward.cu's formulas) and
// writes d_input_t and d_hidden_t, to global memory for the products over all steps and to shared
// memory for the next step back; a barrier. After step 0 one more product gives dh0.
template <typename T, Cell kCell, int kRows, int kRegisterQuads>
__global__ void __launch_bounds__(kMaxBlockThreads, 1)
    block_backward_kernel(BackwardChain<T> p, Geometry geo) {
  grid_dependency_sync();
  constexpr int G = gate_count(kCell);
  const int H = p.hidden, N = p.batch, GH = G * H, KS = geo.k_split, quads = geo.quads;
  const int slice = 4 * quads, width = KS * slice;  // a shared row of d_hidden: every slice, zero past G H
  const int threads = H * KS;
  const int tid = static_cast<int>(threadIdx.x);
  const int col = tid % H, s = tid / H;  // this thread's column of W_hh and its slice of the gate rows
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int rows = min(kRows, N - n0);

  extern __shared__ __align__(16) float shared[];
  float4* w_s = reinterpret_cast<float4*>(shared);               // [quads - kRegisterQuads][threads]
  float* d_s = shared + 4 * (quads - kRegisterQuads) * threads;  // [kRows][width]
  float* part_s = d_s + kRows * width;                           // [k_split][kRows][H]

  // Consecutive threads read consecutive columns of one row of W_hh.
  const auto w_quad = [&](int q) {
    float e[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = s * slice + 4 * q + i;
      e[i] = row < GH ? to_float(p.w_hh[static_cast<std::int64_t>(row) * H + col]) : 0.f;
    }
    return make_float4(e[0], e[1], e[2], e[3]);
  };
  float4 w_r[kRegisterQuads > 0 ? kRegisterQuads : 1];
  keep_slice<kRegisterQuads>(w_quad, quads, threads, tid, w_r, w_s);
  for (int idx = tid; idx < kRows * width; idx += blockDim.x) d_s[idx] = 0.f;

  // The cell threads: unit j of row r, for tid < kRows H.
  const int j = tid % H, r = tid / H;
  const bool live = tid < kRows * H && r < rows;
  const std::int64_t cell_index = static_cast<std::int64_t>(n0 + (live ? r : 0)) * H + j;
  float incoming_last = 0.f, carry_c = 0.f, carry_h = 0.f;
  if (live) {
    incoming_last = to_float(p.dh_t[cell_index]);
    if constexpr (kCell == Cell::lstm) carry_c = to_float(p.dc_t[cell_index]);
  }
  __syncthreads();

  for (int t = p.steps - 1; t >= -1; --t) {
    // The cell's own inputs, none of which depends on the chain: loaded before the product.
    const CellBackwardInputs in =
        live && t >= 0 ? cell_backward_inputs<kCell == Cell::lstm>(p, t, n0 + r, j) : CellBackwardInputs{};
    float incoming = incoming_last;
    if (t < p.steps - 1) {
      float sums[kRows];
      slice_products<kRows, kRegisterQuads>(d_s + s * slice, width, quads, threads, tid, w_r, w_s, sums);
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) part_s[(s * kRows + rr) * H + col] = sums[rr];
      __syncthreads();
      if (live) {
        incoming = 0.f;
        for (int ks = 0; ks < KS; ++ks) incoming += part_s[(ks * kRows + r) * H + j];
      }
    }
    if constexpr (kCell == Cell::gru) incoming += carry_h;
    if (live && t < 0) {  // past step 0: what reaches h0 and c0
      p.dh0[cell_index] = from_float<T>(incoming);
      if constexpr (kCell == Cell::lstm) p.dc0[cell_index] = from_float<T>(carry_c);
    }
    if (live && t >= 0) {
      const float dh_total = in.dy + incoming;
      const std::int64_t slot = (static_cast<std::int64_t>(t) * N + n0 + r) * GH + j;
      float* d_in = p.d_input + slot;
      float* d_next = d_s + r * width + j;  // this row's d_hidden_t, for the step before
      if constexpr (kCell == Cell::lstm) {
        float d[4];
        carry_c = lstm_backward(in.kept, in.c_prev, in.c, dh_total, carry_c, d);
#pragma unroll
        for (int g = 0; g < 4; ++g) d_in[g * H] = d_next[g * H] = d[g];
      } else {
        float d[3];
        carry_h = gru_backward(in.kept, in.h_prev, dh_total, d);
        float* d_hid = p.d_hidden + slot;
        d_in[0] = d_hid[0] = d_next[0] = d[0];
        d_in[H] = d_hid[H] = d_next[H] = d[1];
        d_in[2 * H] = d[2];
        d_hid[2 * H] = d_next[2 * H] = in.kept[0] * d[2];
      }
    }
    __syncthreads();
  }
}

template <typename T, Cell kCell, int kRows, int kRegisterQuads>
cudaError_t launch_backward(const BackwardChain<T>& p, const BlockPlan& plan, const BlockConfig& c,
                            cudaStream_t stream) {
  auto kernel = block_backward_kernel<T, kCell, kRows, kRegisterQuads>;
  if (cudaError_t e = allow_dynamic_shared(kernel, plan.shared_bytes); e != cudaSuccess) return e;
  kernel<<<plan.blocks, plan.threads, plan.shared_bytes, stream>>>(p, Geometry{c.k_split, plan.quads});
  return cudaGetLastError();
}

template <typename T, Cell kCell>
cudaError_t launch_backward_chain(const BackwardChain<T>& p, const BlockPlan& plan, const BlockConfig& c,
                                  cudaStream_t stream) {
  if (c.rows_per_block == 1 && c.register_quads == 0) return launch_backward<T, kCell, 1, 0>(p, plan, c, stream);
  if (c.rows_per_block == 1 && c.register_quads == 16) return launch_backward<T, kCell, 1, 16>(p, plan, c, stream);
  if (c.rows_per_block == 2 && c.register_quads == 0) return launch_backward<T, kCell, 2, 0>(p, plan, c, stream);
  if (c.rows_per_block == 2 && c.register_quads == 16) return launch_backward<T, kCell, 2, 16>(p, plan, c, stream);
  return cudaErrorInvalidValue;
}

// With a projection: a cooperative launch (the recurrence waits on the projecting blocks, so all must
// be resident), as many projecting blocks as the device holds beside the recurrence's, at most a
// tile each; its counters zeroed first.
template <typename T, typename Kernel>
cudaError_t launch(Kernel kernel, const Layer<T>& p, float* input_gates, const BlockPlan& plan, const BlockConfig& c,
                   const BlockProjection<T>& projection, cudaStream_t stream) {
  if (cudaError_t e = allow_dynamic_shared(kernel, plan.shared_bytes); e != cudaSuccess) return e;
  Geometry geo{c.k_split, plan.quads, plan.blocks};
  if (!projection.ready) {
    kernel<<<plan.blocks, plan.threads, plan.shared_bytes, stream>>>(p, input_gates, geo, projection);
    return cudaGetLastError();
  }
  std::int64_t resident = 0;
  if (cudaError_t e = resident_blocks(kernel, plan.threads, plan.shared_bytes, &resident); e != cudaSuccess) return e;
  const std::int64_t tiles = static_cast<std::int64_t>(p.steps) * projection_tiles(p.batch, gate_count(p.cell) * p.hidden);
  const std::int64_t projecting = std::min(resident - plan.blocks, tiles);
  if (projecting < 1) return cudaErrorCooperativeLaunchTooLarge;
  if (cudaError_t e = cudaMemsetAsync(projection.ready, 0, sizeof(int) * static_cast<std::size_t>(p.steps), stream);
      e != cudaSuccess)
    return e;
  void* args[] = {const_cast<Layer<T>*>(&p), &input_gates, &geo, const_cast<BlockProjection<T>*>(&projection)};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                     dim3(static_cast<unsigned>(plan.blocks + projecting)), dim3(plan.threads), args,
                                     plan.shared_bytes, stream);
}

template <typename T, Cell kCell, int kRows>
cudaError_t launch_quads(const Layer<T>& p, float* input_gates, const BlockPlan& plan, const BlockConfig& c,
                         const BlockProjection<T>& projection, cudaStream_t stream) {
  const auto go = [&](auto kernel) { return launch(kernel, p, input_gates, plan, c, projection, stream); };
  if (c.unit_groups && c.group_units == 2) {
    if constexpr (kRows == 1) {  // block_plan allows two units a group at 1 row a block
      switch (c.register_quads) {
        case 0: return go(group_kernel<T, kCell, 1, 2, 0>);
        case 24: return go(group_kernel<T, kCell, 1, 2, 24>);
        default: break;
      }
      if constexpr (kCell == Cell::lstm) {
        if (c.register_quads == 8) return go(group_kernel<T, kCell, 1, 2, 8>);
        if (c.register_quads == 16) return go(group_kernel<T, kCell, 1, 2, 16>);
        if (c.register_quads == 32) return go(group_kernel<T, kCell, 1, 2, 32>);
      }
    }
    return cudaErrorInvalidValue;
  }
  if (c.unit_groups) {
    if constexpr (kRows <= 2) {  // block_plan allows unit groups of 1 or 2 rows, whole chunks in registers
      switch (c.register_quads) {
        case 0: return go(group_kernel<T, kCell, kRows, 1, 0>);
        case 24: return go(group_kernel<T, kCell, kRows, 1, 24>);
        default: break;
      }
      if constexpr (kCell == Cell::lstm) {
        if (c.register_quads == 8) return go(group_kernel<T, kCell, kRows, 1, 8>);
        if (c.register_quads == 16) return go(group_kernel<T, kCell, kRows, 1, 16>);
        if (c.register_quads == 32) return go(group_kernel<T, kCell, kRows, 1, 32>);
      }
    }
    return cudaErrorInvalidValue;
  }
  switch (c.register_quads) {
    case 0: return go(block_kernel<T, kCell, kRows, 0>);
    case 8: return go(block_kernel<T, kCell, kRows, 8>);
    case 16: return go(block_kernel<T, kCell, kRows, 16>);
    default: break;
  }
  if constexpr (kRows <= 2) {  // block_plan allows the wide register configs at 1 or 2 rows only
    if (c.register_quads == 24) return go(block_kernel<T, kCell, kRows, 24>);
    if (c.register_quads == 32) return go(block_kernel<T, kCell, kRows, 32>);
  }
  return cudaErrorInvalidValue;
}

template <typename T, Cell kCell>
cudaError_t launch_rows(const Layer<T>& p, float* input_gates, const BlockPlan& plan, const BlockConfig& c,
                        const BlockProjection<T>& projection, cudaStream_t stream) {
  switch (c.rows_per_block) {
    case 1: return launch_quads<T, kCell, 1>(p, input_gates, plan, c, projection, stream);
    case 2: return launch_quads<T, kCell, 2>(p, input_gates, plan, c, projection, stream);
    case 4: return launch_quads<T, kCell, 4>(p, input_gates, plan, c, projection, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

namespace {

// unit_groups 1: ceil(H / group_units) x k_split threads (whole warps), quads = 16-byte chunks of a
// lane's share of a gate row, register_quads whole chunks (all group_units x G rows) in registers.
BlockPlan unit_group_plan(int G, int batch, int hidden, const BlockConfig& c) {
  BlockPlan plan;
  const int U = c.group_units;
  const bool split_ok = c.k_split == 2 || c.k_split == 4 || c.k_split == 8;
  const bool units_ok = U == 1 || (U == 2 && c.rows_per_block == 1);
  const bool rows_ok = (c.rows_per_block == 1 || c.rows_per_block == 2) && c.rows_per_block * U <= c.k_split;
  const int quads = (hidden + 4 * c.k_split - 1) / (4 * c.k_split);
  const int threads = ((hidden + U - 1) / U * c.k_split + 31) / 32 * 32;
  const bool built = c.register_quads >= 0 && c.register_quads <= 32 && c.register_quads % 8 == 0;
  if (!split_ok || !units_ok || !rows_ok || !built || c.register_quads % (U * G) != 0 || c.register_quads > U * G * quads ||
      threads > unit_group_thread_cap(c.register_quads))
    return plan;
  plan.threads = threads;
  plan.quads = quads;
  plan.blocks = (batch + c.rows_per_block - 1) / c.rows_per_block;
  const std::size_t floats = 4 * static_cast<std::size_t>(U * G * quads - c.register_quads) * threads +
                             2 * static_cast<std::size_t>(c.rows_per_block) * 4 * c.k_split * quads +
                             static_cast<std::size_t>(G + 1) * hidden;
  plan.shared_bytes = std::max<std::size_t>(floats, c.project ? kProjectFloats : 0) * sizeof(float);
  return plan;
}

}  // namespace

BlockPlan block_plan(Cell cell, int batch, int hidden, const BlockConfig& c) {
  BlockPlan plan;
  const int G = gate_count(cell);
  const bool project_ok = c.project == 0 || c.project == 1;
  if (!project_ok || batch < 1 || hidden < 1 || (c.unit_groups != 0 && c.unit_groups != 1)) return plan;
  if (c.unit_groups) return unit_group_plan(G, batch, hidden, c);
  if (c.group_units != 1) return plan;
  const bool rows_ok = c.rows_per_block == 1 || c.rows_per_block == 2 || c.rows_per_block == 4;
  const bool split_ok = c.k_split == 1 || c.k_split == 2 || c.k_split == 4;
  const bool wide = c.register_quads == 24 || c.register_quads == 32;
  const bool quads_ok = c.register_quads == 0 || c.register_quads == 8 || c.register_quads == 16 || wide;
  if (!rows_ok || !split_ok || !quads_ok) return plan;
  const int threads = G * hidden * c.k_split;
  const int quads = (hidden + 4 * c.k_split - 1) / (4 * c.k_split);
  if (threads > (wide ? kMaxWideRegisterThreads : kMaxBlockThreads) || (wide && c.rows_per_block > 2) ||
      c.register_quads > quads || c.rows_per_block * hidden > threads)
    return plan;
  plan.threads = threads;
  plan.quads = quads;
  plan.blocks = (batch + c.rows_per_block - 1) / c.rows_per_block;
  const std::size_t floats = 4 * static_cast<std::size_t>(quads - c.register_quads) * threads +
                             static_cast<std::size_t>(c.rows_per_block) * c.k_split * 4 * quads +
                             static_cast<std::size_t>(c.k_split) * c.rows_per_block * G * hidden;
  // The projecting blocks share the launch's shared memory for their tiles.
  plan.shared_bytes = std::max<std::size_t>(floats, c.project ? kProjectFloats : 0) * sizeof(float);
  return plan;
}

BlockPlan block_backward_plan(Cell cell, int batch, int hidden, const BlockConfig& c) {
  BlockPlan plan;
  const int G = gate_count(cell);
  const bool rows_ok = c.rows_per_block == 1 || c.rows_per_block == 2;
  const bool split_ok = c.k_split == 1 || c.k_split == 2 || c.k_split == 4;
  const bool quads_ok = c.register_quads == 0 || c.register_quads == 16;
  if (!rows_ok || !split_ok || !quads_ok || batch < 1 || hidden < 1) return plan;
  const int threads = hidden * c.k_split;
  const int quads = (G * hidden + 4 * c.k_split - 1) / (4 * c.k_split);
  if (threads > kMaxBlockThreads || c.register_quads > quads || c.rows_per_block > c.k_split) return plan;
  plan.threads = threads;
  plan.quads = quads;
  plan.blocks = (batch + c.rows_per_block - 1) / c.rows_per_block;
  const std::size_t floats = 4 * static_cast<std::size_t>(quads - c.register_quads) * threads +
                             static_cast<std::size_t>(c.rows_per_block) * c.k_split * 4 * quads +
                             static_cast<std::size_t>(c.k_split) * c.rows_per_block * hidden;
  plan.shared_bytes = floats * sizeof(float);
  return plan;
}

template <typename T>
cudaError_t block_backward(const BackwardChain<T>& p, const BlockConfig& c, cudaStream_t stream) {
  const BlockPlan plan = block_backward_plan(p.cell, p.batch, p.hidden, c);
  if (plan.blocks == 0 || p.steps < 1) return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_backward_chain<T, Cell::lstm>(p, plan, c, stream)
                              : launch_backward_chain<T, Cell::gru>(p, plan, c, stream);
}

template <typename T>
cudaError_t block_forward(const Layer<T>& p, float* input_gates, const BlockConfig& c,
                          const BlockProjection<T>& projection, cudaStream_t stream) {
  const BlockPlan plan = block_plan(p.cell, p.batch, p.hidden, c);
  if (plan.blocks == 0 || p.steps < 1 || (c.project == 1) != (projection.ready != nullptr) ||
      (c.unit_groups && p.saved))
    return cudaErrorInvalidValue;
  return p.cell == Cell::lstm ? launch_rows<T, Cell::lstm>(p, input_gates, plan, c, projection, stream)
                              : launch_rows<T, Cell::gru>(p, input_gates, plan, c, projection, stream);
}

template cudaError_t block_backward<float>(const BackwardChain<float>&, const BlockConfig&, cudaStream_t);
template cudaError_t block_backward<__half>(const BackwardChain<__half>&, const BlockConfig&, cudaStream_t);
template cudaError_t block_backward<__nv_bfloat16>(const BackwardChain<__nv_bfloat16>&, const BlockConfig&,
                                                   cudaStream_t);
template cudaError_t block_forward<float>(const Layer<float>&, float*, const BlockConfig&,
                                          const BlockProjection<float>&, cudaStream_t);
template cudaError_t block_forward<__half>(const Layer<__half>&, float*, const BlockConfig&,
                                           const BlockProjection<__half>&, cudaStream_t);
template cudaError_t block_forward<__nv_bfloat16>(const Layer<__nv_bfloat16>&, float*, const BlockConfig&,
                                                  const BlockProjection<__nv_bfloat16>&, cudaStream_t);

}  // namespace shapetune::kernels::rnn
