// The recurrent family: one LSTM or GRU layer over a sequence, PyTorch's and cuDNN's formulas
// and gate order (baselines/reference.hpp states them). Both variants start from the input
// projection of every step at once, input_gates [T, N, G H] = x W_ih^T in fp32 (one GEMM, made by
// the caller), and add both biases themselves.
//
//   stepwise:   per step, the recurrent GEMM h W_hh^T (the caller's) and cell_step below.
//   persistent: one cooperative launch for all T steps. Each block keeps a slice of W_hh (the G
//               gate rows of units_per_block hidden units) in shared memory for the whole
//               sequence and its units' cell state in registers; h crosses blocks through an
//               fp32 exchange buffer in global memory (read past L1), one grid barrier per step.
//   persistent_cluster (sm_90a): the batch split over independent thread block clusters; the
//               blocks of a cluster split W_hh by hidden units, each keeping its slice in shared
//               memory, and h crosses them through distributed shared memory: stores and one
//               cluster barrier per step, or st.async counted on each receiver's mbarrier.
//               Clusters never wait for each other, so no grid barrier and no cooperative launch.
//   persistent backward (persistent_backward.cu): the backward pass's recurrent chain in one
//               cooperative launch, the transposed split of the persistent forward: each block
//               keeps the columns of W_hh of its hidden units (all G H rows) on chip and exchanges
//               the gates' gradients through L2, one grid barrier per step.
//
// 16-bit types: x, weights, y and h are stored in them; products accumulate and the cell state
// stays in fp32; the h fed back is h as stored (rounded), as the reference defines.
// Host-safe: the catalogue (compiled by g++) includes this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace shapetune::kernels::rnn {

enum class Cell : std::uint8_t { lstm, gru };
constexpr int gate_count(Cell cell) { return cell == Cell::lstm ? 4 : 3; }

template <typename T>
struct Layer {
  Cell cell = Cell::lstm;
  const T* x = nullptr;     // [T, N, D]
  const T* h0 = nullptr;    // [N, H]
  const T* c0 = nullptr;    // [N, H], LSTM only
  const T* w_hh = nullptr;  // [G H, H]
  const T* b_ih = nullptr;  // [G H]
  const T* b_hh = nullptr;  // [G H]
  T* y = nullptr;           // [T, N, H]
  T* h_t = nullptr;         // [N, H]
  T* c_t = nullptr;         // [N, H], LSTM only
  // What the backward pass reads, kept by the persistent rungs where set (nullptr: not kept):
  // each step's activations, fp32 [T N, kSavedGates H] as cell_step_saving keeps them, and the
  // LSTM's cell state after step t, fp32, at cells + (t + 1) N H (cells[0], c0, is the caller's).
  float* saved = nullptr;
  float* cells = nullptr;
  int steps = 0, batch = 0, input = 0, hidden = 0;
};

// ---- stepwise ---------------------------------------------------------------------------------

// The cell of one step from its gates without biases: input_gates and recurrent_gates are
// [N, G H] fp32 (x_t W_ih^T and h W_hh^T); h_prev [N, H] is the h the step read (the GRU's
// update mixes it in); c_state [N, H] fp32 is updated in place (LSTM). Writes h [N, H].
template <typename T>
cudaError_t cell_step(Cell, const float* input_gates, const float* recurrent_gates, const T* b_ih, const T* b_hh,
                      const T* h_prev, float* c_state, T* h, int batch, int hidden, cudaStream_t);

// out[i] = float(in[i]) and back, over n elements: the cell state's fp32 copy of c0 and its
// stored cT.
template <typename T>
cudaError_t widen(const T* in, float* out, std::int64_t n, cudaStream_t);
template <typename T>
cudaError_t narrow(const float* in, T* out, std::int64_t n, cudaStream_t);

// high[i] = v rounded to TF32 (10-bit mantissa, round to nearest, ties away), low[i] = v - high[i]
// (exact), over n fp32 elements v = in[i]: the operands of split_tf32 products (variants/rnn_problem.hpp),
// where high is exact as a TF32 operand and low loses only its own last 13 bits.
cudaError_t split_tf32(const float* in, float* high, float* low, std::int64_t n, cudaStream_t);

// Up to 16 byte ranges copied in one launch: the cuDNN baseline's repacking of the weights into
// its own weight space on every call.
struct CopySegments {
  static constexpr int kMax = 16;
  const void* src[kMax] = {};
  void* dst[kMax] = {};
  std::int64_t bytes[kMax] = {};
  int count = 0;
};
cudaError_t copy_segments(const CopySegments&, cudaStream_t);

// ---- backward (stepwise) ------------------------------------------------------------------------

// What the backward pass keeps of each step's forward, fp32 [N, kSavedGates H]: the LSTM's
// activated gates (i, f, g, o), the GRU's r, z, n and W_hn h + b_hn (r multiplies it, so its
// gradient needs it).
inline constexpr int kSavedGates = 4;

// cell_step, keeping what backpropagation reads: the step's activations into `saved` and, for
// the LSTM, the new cell state into `c` [N, H] (c_prev stays: every step's c is kept).
template <typename T>
cudaError_t cell_step_saving(Cell, const float* input_gates, const float* recurrent_gates, const T* b_ih,
                             const T* b_hh, const T* h_prev, const float* c_prev, float* c, float* saved, T* h,
                             int batch, int hidden, cudaStream_t);

// One step back: from dy [N, H] and the gradient dh [N, H] fp32 that later steps carry back
// (and the LSTM's dc), the gradients of the gate pre-activations, fp32 [N, G H]: d_input for the
// input side (x W_ih^T + b_ih) and, for the GRU, d_hidden for the hidden side (h W_hh^T + b_hh),
// whose candidate rows are r times the input side's; the LSTM's two sides are the same. c_prev and
// c are the step's cell states (LSTM), h_prev [N, H] fp32 the h it read (GRU). Updates dc to what
// reaches c_prev (LSTM) and dh to what reaches h_prev past W_hh (GRU: dh z; the LSTM leaves dh for
// the caller's product d_input W_hh to overwrite).
//
// With `splits` > 0 the product of the step after arrives as that many partial sums [splits, N, H]
// (`partials`: the product taken in slices of its G H depth, one batched launch), which the step
// adds up itself in place of a reduction kernel: the gradient reaching h is then dy + the partials
// (+ dh, the GRU's dh z from the step after; the LSTM's dh is not read).
template <typename T>
cudaError_t cell_backward_step(Cell, const float* saved, const float* c_prev, const float* c, const float* h_prev,
                               const T* dy, float* dh, float* dc, float* d_input, float* d_hidden, int batch,
                               int hidden, cudaStream_t, const float* partials = nullptr, int splits = 0);

// out[i] = value over n elements (a ones vector: bias gradients as products with it).
cudaError_t fill(float* out, std::int64_t n, float value, cudaStream_t);

// ---- persistent -------------------------------------------------------------------------------

// The persistent rungs keep fp32 rows (of W_hh and of h) in shared memory at this stride, padded
// to 4 (mod 32) words: the 8 rows that one phase of a 16-byte shared read touches then fall in 8
// different bank groups.
inline int shared_row_stride(int hidden) {
  const int h4 = (hidden + 3) / 4 * 4;
  return h4 + (36 - h4 % 32) % 32;
}

struct PersistentConfig {
  int units_per_block = 1;  // hidden units a block owns (all G of their gate rows)
  int block_size = 128;     // threads; a multiple of units_per_block x k_split, at most kMaxPersistentThreads
  int batch_groups = 1;     // the batch split over this many groups of blocks, each holding its own W_hh slice
  int k_split = 1;          // lanes that share one unit's dot products for the same rows (a power of 2, <= 32)
};
// Blocks of more threads cannot be launched (the kernel is built for at most 128 registers).
inline constexpr int kMaxPersistentThreads = 512;

// The launch's shape: blocks = ceil(H / units) * batch_groups, each with rows_per_group batch
// rows; lane groups of k_split lanes, each taking rows_per_thread of them (the kernel is built for
// 1, 2, 4 and 8).
struct PersistentPlan {
  int blocks = 0;
  int rows_per_group = 0;
  int rows_per_thread = 0;
  std::size_t shared_bytes = 0;  // dynamic: the W_hh slice and the h rows, fp32
};
PersistentPlan persistent_plan(Cell, int batch, int hidden, const PersistentConfig&);
inline constexpr int kMaxRowsPerThread = 8;

// Bytes of workspace the kernel needs: the two fp32 h exchange buffers and the barrier counter.
std::size_t persistent_workspace_bytes(int batch, int hidden);

// The recurrence over all steps from input_gates [T, N, G H] (fp32, no bias). Returns
// cudaErrorCooperativeLaunchTooLarge where the device cannot hold every block at once (the
// catalogue turns it into a refusal), cudaErrorInvalidValue for a config the plan rejects.
template <typename T>
cudaError_t persistent_forward(const Layer<T>&, const float* input_gates, void* workspace, const PersistentConfig&,
                               cudaStream_t);

// ---- persistent_registers ---------------------------------------------------------------------

// The persistent rung with W_hh in registers (persistent_registers.cu): a warp a hidden unit, its
// G gate rows spread over the lanes' registers (128 columns a chunk, up to 4 chunks: H <= 512),
// the block's batch rows of h copied into shared memory each step, a grid barrier a step.
struct RegisterConfig {
  int units_per_block = 8;  // warps a block, one hidden unit each (1..kMaxRegisterUnits)
  int batch_groups = 2;     // the batch split over this many groups of blocks (at most kMaxRegisterRows rows each)
};
inline constexpr int kMaxRegisterUnits = 8;     // 256 threads: up to 255 registers a thread for W's 64 floats
inline constexpr int kMaxRegisterHidden = 512;  // 4 chunks of 128 columns
inline constexpr int kMaxRegisterRows = 64;

// blocks == 0: the config or the shape is outside what the kernel is built for.
struct RegisterPlan {
  int blocks = 0;
  int threads = 0;
  int rows_per_group = 0;
  int chunks = 0;                // column chunks of 128 a lane holds: 1, 2 or 4
  std::size_t shared_bytes = 0;  // the group's h rows (128 x chunks columns), the input gates, the LSTM's c
};
RegisterPlan register_plan(Cell, int batch, int hidden, const RegisterConfig&);

// The recurrence over all steps from input_gates [T, N, G H] (fp32, no bias), with the workspace
// of persistent_workspace_bytes. Returns cudaErrorCooperativeLaunchTooLarge where the device
// cannot hold every block at once, cudaErrorInvalidValue for a config the plan rejects.
template <typename T>
cudaError_t register_forward(const Layer<T>&, const float* input_gates, void* workspace, const RegisterConfig&,
                             cudaStream_t);

// ---- persistent_block -------------------------------------------------------------------------

// One thread block holds all of W_hh and runs every step for its own batch rows
// (persistent_block.cu). Blocks never exchange anything, so it needs no cooperative launch; it
// fits where W_hh fits one SM (f32 LSTM: H <= 128 or so). Two layouts of W_hh over the threads:
//   unit_groups 0: G H x k_split threads, thread (gate row, slice) keeping the first register_quads
//     16-byte chunks of its slice of the row in registers and the rest in shared memory; the
//     k_split partial sums and the G gates of a unit meet in shared memory, two barriers a step.
//   unit_groups 1: H / group_units x k_split threads, the k_split lanes of a group each holding all
//     G gate rows of the group's units over every k_split-th 16-byte chunk of the columns
//     (register_quads of them in registers, a multiple of group_units G); shuffles give the lanes
//     all G sums of a unit, so the cell runs at once: one barrier a step.
struct BlockConfig {
  int rows_per_block = 2;  // batch rows a block runs (1, 2 or 4; unit_groups: 1 or 2, at most k_split)
  int k_split = 1;         // lanes one dot product splits over (1, 2 or 4; unit_groups: 2, 4 or 8)
  int register_quads = 8;  // 16-byte chunks of W_hh a thread holds in registers (0, 8, 16, 24 or 32)
  // 0: input_gates are written before the launch. 1: the launch's spare blocks write them, a step
  // at a time ahead of the recurrence (BlockProjection; a cooperative launch).
  int project = 0;
  int unit_groups = 0;  // the layout above
  int group_units = 1;  // unit_groups 1: hidden units a lane group holds (1, or 2 at 1 row a block)
};
// At most 512 threads, so that a thread may have 128 registers: at 1024 (64 registers) every
// config spilled. 24 or 32 chunks (96 or 128 registers of W_hh) need at most 384 threads, 168
// registers each, and at most 2 rows a block: the GRU at H 128 then holds all of W_hh in registers.
inline constexpr int kMaxBlockThreads = 512;
inline constexpr int kMaxWideRegisterThreads = 384;
// unit_groups 1: the threads a block may have with register_quads chunks of W_hh in registers, so
// that W_hh's 4 register_quads registers and the step's own (about 30) fit the register file.
__host__ __device__ constexpr int unit_group_thread_cap(int register_quads) {
  return register_quads <= 8 ? 1024 : register_quads <= 24 ? 512 : 256;
}

// blocks == 0: the config or the shape is outside what the kernel is built for (more than 512
// threads, more register chunks than the slice has, ...).
struct BlockPlan {
  int blocks = 0;
  int threads = 0;
  int quads = 0;                 // 16-byte chunks of a thread's slice of a row: ceil(H / (4 k_split))
  std::size_t shared_bytes = 0;  // W_hh's chunks not in registers, the rows of h, the partial sums
};
BlockPlan block_plan(Cell, int batch, int hidden, const BlockConfig&);

// What BlockConfig::project = 1 needs: W_ih [G H, D] and T ints of workspace (zeroed by the launch),
// each step's count of finished projection tiles.
template <typename T>
struct BlockProjection {
  const T* w_ih = nullptr;
  int* ready = nullptr;
};

// The recurrence over all steps from input_gates [T, N, G H] (fp32, no bias): an ordinary launch
// that reads them, or with BlockConfig::project a cooperative one that also writes them
// (cudaErrorCooperativeLaunchTooLarge where the device holds no block beside the recurrence's).
// The row layout keeps the activations (Layer::saved, Layer::cells) where they are set; unit
// groups do not (cudaErrorInvalidValue: the backward's forward runs the row layout).
template <typename T>
cudaError_t block_forward(const Layer<T>&, float* input_gates, const BlockConfig&, const BlockProjection<T>&,
                          cudaStream_t);

// The backward chain (BackwardChain, below) the same way: a block runs its batch rows alone,
// H x k_split threads, thread (unit, slice) keeping column `unit` of W_hh over a slice of the G H
// gate rows. Built for rows_per_block 1 or 2 (at most k_split) and register_quads 0 or 16.
template <typename T>
struct BackwardChain;
BlockPlan block_backward_plan(Cell, int batch, int hidden, const BlockConfig&);
template <typename T>
cudaError_t block_backward(const BackwardChain<T>&, const BlockConfig&, cudaStream_t);

// ---- persistent backward ------------------------------------------------------------------------

// The recurrent chain of backpropagation through time, from the forward's saved activations.
// d_hidden is the vector that multiplies W_hh; for the LSTM it is d_input itself (the caller
// passes the same buffer), for the GRU its candidate rows are r times d_input's.
template <typename T>
struct BackwardChain {
  Cell cell = Cell::lstm;
  const T* w_hh = nullptr;        // [G H, H]
  const float* saved = nullptr;   // [T N, kSavedGates H] (Layer::saved)
  const float* cells = nullptr;   // [T + 1, N, H]: c0, then every step's c (LSTM)
  const float* h_prev = nullptr;  // [T, N, H]: the h each step read (GRU)
  const T* dy = nullptr;          // [T, N, H]
  const T* dh_t = nullptr;        // [N, H]
  const T* dc_t = nullptr;        // [N, H], LSTM only
  float* d_input = nullptr;       // [T, N, G H]: the input side's gate gradients
  float* d_hidden = nullptr;      // [T, N, G H]: the hidden side's (== d_input for the LSTM)
  T* dh0 = nullptr;               // [N, H]
  T* dc0 = nullptr;               // [N, H], LSTM only
  int steps = 0, batch = 0, hidden = 0;
};

struct BackwardConfig {
  int units_per_block = 8;  // hidden units j a block owns: the columns W_hh[:, j] it keeps
  int batch_groups = 4;     // the batch split over this many groups of blocks, each its own columns
  int k_split = 8;          // lanes sharing one unit's dot products over G H (a power of 2 up to 32)
};

// What a plan must fit in: one block's shared memory (the opt-in maximum), an SM's, and the SMs
// that hold the whole grid at once.
struct ChipBudget {
  std::size_t shared_per_block = 0;
  std::size_t shared_per_sm = 0;
  int sms = 0;
};

// threads == 0: the config is invalid. rows_per_thread (1, 2, 4, 8; at most k_split) is the
// fewest that keeps the block within kPreferredBackwardThreads; a plan above
// kMaxBackwardThreads cannot be launched (the kernel is built for at most 128 registers).
// The d_hidden rows are staged `tile` columns at a time: all G H where they fit beside W's
// columns in the shared memory a block can have when the grid's blocks share the SMs evenly,
// else in equal tiles of a multiple of 32 columns (tile == 0: not even 32 fit).
struct BackwardPlan {
  int blocks = 0;
  int rows_per_group = 0;
  int rows_per_thread = 0;
  int threads = 0;
  int tile = 0;
  std::size_t shared_bytes = 0;  // W_hh's columns and a tile of the group's rows of d_hidden, fp32
};
BackwardPlan persistent_backward_plan(Cell, int batch, int hidden, const BackwardConfig&, const ChipBudget&);
inline constexpr int kPreferredBackwardThreads = 256;
inline constexpr int kMaxBackwardThreads = 512;

// Bytes of workspace the chain needs: its barrier counter.
std::size_t persistent_backward_workspace_bytes();

// Every step back in one cooperative launch: writes d_input and d_hidden of every step, dh0 and
// dc0. Returns cudaErrorCooperativeLaunchTooLarge where the device cannot hold every block at
// once, cudaErrorInvalidValue for a config the plan rejects.
template <typename T>
cudaError_t persistent_backward(const BackwardChain<T>&, void* workspace, const BackwardConfig&, cudaStream_t);

// ---- persistent_cluster (sm_90a) --------------------------------------------------------------

struct ClusterConfig {
  int cluster_size = 8;      // blocks per cluster, 2..16 (above 8 is a non-portable size)
  int rows_per_cluster = 8;  // batch rows a cluster owns; clusters = ceil(N / rows_per_cluster)
  int k_split = 4;           // lanes sharing one unit's dot products (a power of 2 up to 32)
  int rows_per_thread = 1;   // batch rows a lane group computes (1, 2 or 4; at most k_split)
  int exchange = 0;          // how h crosses the cluster: 0 stores and a release barrier, 1 st.async on mbarriers
};

struct ClusterPlan {
  int clusters = 0;
  int units_per_block = 0;        // hidden units of one block: ceil(H / cluster_size)
  int threads = 0;                // per block: units x ceil(rows / rows_per_thread) x k_split, rounded to a warp
  std::size_t shared_bytes = 0;   // the W_hh slice and two h buffers of the cluster's rows, fp32 (and 2 mbarriers)
};
// threads == 0: the config is invalid (k_split not a power of 2, ...); a plan of more than
// kMaxClusterThreads threads cannot be launched (the kernel is built for at most 128 registers).
ClusterPlan cluster_plan(Cell, int batch, int hidden, const ClusterConfig&);
inline constexpr int kMaxClusterSize = 16;
inline constexpr int kMaxClusterThreads = 512;

// The recurrence over all steps from input_gates [T, N, G H] (fp32, no bias). Returns
// cudaErrorNotSupported off compute capability 9.0, cudaErrorCooperativeLaunchTooLarge where the
// device cannot place one cluster of the plan (the catalogue turns both into refusals).
template <typename T>
cudaError_t cluster_forward(const Layer<T>&, const float* input_gates, const ClusterConfig&, cudaStream_t);

// `rounds` cluster barriers back to back in one cluster of `cluster_size` blocks of `threads`
// (the persistent_cluster rung's barrier, nothing else).
cudaError_t cluster_barrier_rounds(int cluster_size, int threads, int rounds, cudaStream_t);

// ---- the grid barrier, measured ---------------------------------------------------------------

// `rounds` grid barriers back to back in one cooperative launch of `blocks` blocks of `threads`
// (the persistent kernel's barrier, nothing else): the per-step floor of a persistent RNN.
// `counter` is one zeroed unsigned.
cudaError_t grid_barrier_rounds(int blocks, int threads, int rounds, unsigned* counter, cudaStream_t);

}  // namespace shapetune::kernels::rnn
