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

// ---- persistent -------------------------------------------------------------------------------

struct PersistentConfig {
  int units_per_block = 1;  // hidden units a block owns (all G of their gate rows)
  int block_size = 128;     // threads; a multiple of units_per_block
  int batch_groups = 1;     // the batch split over this many groups of blocks, each holding its own W_hh slice
};

// The launch's shape: blocks = ceil(H / units) * batch_groups, each with rows_per_group batch
// rows; rows_per_thread of them per thread (the kernel is built for 1, 2, 4 and 8).
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

// ---- the grid barrier, measured ---------------------------------------------------------------

// `rounds` grid barriers back to back in one cooperative launch of `blocks` blocks of `threads`
// (the persistent kernel's barrier, nothing else): the per-step floor of a persistent RNN.
// `counter` is one zeroed unsigned.
cudaError_t grid_barrier_rounds(int blocks, int threads, int rounds, unsigned* counter, cudaStream_t);

}  // namespace shapetune::kernels::rnn
