// The character-level language model runners (`shapetune train lstm|gru`): an embedding [V, E],
// one or two recurrent layers of H units, a linear head [V, H] + bias, softmax cross-entropy over
// the V characters and Adam, trained by truncated backpropagation through time over the batches
// of models/char_corpus.hpp. The hidden state (h, and c for the LSTM) is carried from one batch
// to the next and detached, as PyTorch TBPTT does: no gradient flows into the previous batch.
//
// Parameters follow PyTorch's modules exactly (nn.Embedding, nn.LSTM / nn.GRU with gate orders
// (i, f, g, o) and (r, z, n), weight_ih_l0 [G H, E], nn.Linear's weight [V, H]), so a safetensors
// file moves between this runner and bench/peers/char_lm_torch.py unchanged.
//
// Every GPU operation but the embedding's gather and scatter goes through the dispatch table
// (models/runner.hpp); those two are plain deterministic kernels (models/training_kernels.cu).
// A training step is one CUDA graph, replayed; Adam is a child graph swapped per step (its bias
// correction changes every step), as the MLP runner does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/device.hpp"
#include "harness/stats.hpp"
#include "models/char_corpus.hpp"
#include "models/runner.hpp"

namespace shapetune {

enum class RecurrentCell { lstm, gru };
std::string_view recurrent_cell_name(RecurrentCell);  // "lstm", "gru"

struct CharLmShape {
  RecurrentCell cell = RecurrentCell::lstm;
  int vocab = 0;   // V: the corpus' distinct characters
  int embed = 0;   // E
  int hidden = 0;  // H
  int layers = 1;  // 1 or 2

  int gates() const { return cell == RecurrentCell::lstm ? 4 : 3; }
};

// Throws std::invalid_argument naming the first bad field.
void validate(const CharLmShape&);

// One parameter tensor: its PyTorch state_dict name, shape, and place in the flat buffer.
struct CharLmTensor {
  std::string name;  // "embedding.weight", "rnn.weight_ih_l0", ..., "head.weight", "head.bias"
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;  // in floats, a multiple of kCharLmAlignment
  std::int64_t size = 0;    // elements
};

// Every tensor starts on a 256-byte boundary of the flat buffer, so vectorized kernels and the
// libraries see aligned tensors; the floats between tensors are padding, always zero in the
// gradient (nothing writes them), so Adam leaves them at zero.
inline constexpr std::int64_t kCharLmAlignment = 64;

// In order: embedding.weight [V, E]; per layer l: rnn.weight_ih_l{l} [G H, in], rnn.weight_hh_l{l}
// [G H, H], rnn.bias_ih_l{l} [G H], rnn.bias_hh_l{l} [G H] (in = E for layer 0, H above);
// head.weight [V, H], head.bias [V].
std::vector<CharLmTensor> char_lm_layout(const CharLmShape&);
// Floats of the flat buffer, padding included.
std::int64_t char_lm_flat_size(const CharLmShape&);

// PyTorch's default initialisation of each module, drawn from `seed` with std::mt19937_64 (the
// distributions are PyTorch's, the values are not: the generators differ; --save-weights carries
// them to PyTorch): embedding N(0, 1); recurrent weights and biases U(-1/sqrt(H), 1/sqrt(H));
// head weight and bias U(-1/sqrt(H), 1/sqrt(H)) (nn.Linear's kaiming_uniform(a = sqrt 5) bound
// for fan-in H). Tensors drawn in layout order, elements row-major; padding zero.
std::vector<float> char_lm_initial_parameters(const CharLmShape&, std::uint64_t seed);

// The flat parameters as safetensors (F32, the layout's names and shapes; metadata names the
// cell, sizes and the vocabulary as UTF-8), and back. Loading throws DataError naming the file
// for a missing tensor, a wrong shape or dtype.
void save_char_lm_weights(const std::string& path, const CharLmShape&, const std::vector<float>& flat,
                          const std::string& vocabulary_utf8);
std::vector<float> load_char_lm_weights(const std::string& path, const CharLmShape&);

// Cross-entropy in nats per character as bits per character.
double bits_per_character(double nats);

// ---- float64 reference (the GPU tests compare against it) -------------------------------------

// The state carried between batches: per layer h (and c for the LSTM), [B, H] row-major.
struct CharLmState {
  std::vector<std::vector<double>> h, c;
};
CharLmState zero_char_lm_state(const CharLmShape&, int batch);

struct CharLmReferenceStep {
  double loss = 0;                 // mean over the T B predictions, nats
  std::vector<double> gradients;   // flat, the layout of the parameters (padding zero)
  CharLmState state;               // after the batch (what the next batch starts from)
};

// Forward, loss and backward through time of one batch (inputs and targets time-major [T, B],
// as TbpttBatches fills them), from `state`, with the state detached (its gradient is not taken).
CharLmReferenceStep char_lm_reference_step(const CharLmShape&, const std::vector<double>& flat,
                                           const std::vector<std::int32_t>& inputs,
                                           const std::vector<std::int32_t>& targets, int seq_len, int batch,
                                           const CharLmState& state, bool with_gradients = true);

// Adam as the `adam` primitive with weight_decay 0 computes it (PyTorch's torch.optim.Adam):
// step t >= 1, betas 0.9 / 0.999, eps 1e-8.
void char_lm_reference_adam(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                            const std::vector<double>& g, double lr, std::int64_t t);

// `count` characters generated by a float64 CPU forward of one step at a time from the zero state,
// after feeding `prime`: temperature 0 takes the most likely character, else samples from
// softmax(logits / temperature) with std::mt19937_64(seed).
std::vector<std::int32_t> char_lm_sample(const CharLmShape&, const std::vector<float>& flat,
                                         const std::vector<std::int32_t>& prime, int count, double temperature,
                                         std::uint64_t seed);

// ---- the GPU trainer --------------------------------------------------------------------------

struct CharLmOptions {
  std::string db_path;  // empty: nothing tuned, every problem takes its default variant
  DispatchMode dispatch = DispatchMode::tuned;
  int device = 0;
  int seq_len = 128;
  int batch = 64;
  double lr = 2e-3;  // Adam, no weight decay, betas 0.9/0.999, eps 1e-8
};

// The dispatched operations of a trainer, in binding order (the embedding's kernels are not among
// them: they are not dispatched). Each layer's forward runs in the evaluation step only: a
// training step runs each layer's backward-through-time op in two halves, its forward (keeping
// the activations) before the head and the loss, its backward after them.
std::vector<ModelOp> char_lm_operations(const CharLmShape&, int seq_len, int batch, std::int64_t flat_size);

struct CharLmEpoch {
  std::vector<double> step_losses;       // per step, nats
  std::vector<double> step_milliseconds; // per step, CUDA events around each graph replay
  double mean_loss() const;
  double median_step_ms() const;
};

// The statistical suite (`train lstm|gru --timing-suite`), as the original work ran its GRU
// benchmark: `warmup_steps` training steps untimed, then `timed_steps` training steps each timed
// by CUDA events around its graph replay, summarised as median, p10 and p90.
struct CharLmTimingSuiteOptions {
  int warmup_steps = 50;
  int timed_steps = 150;
};
// Throws std::invalid_argument naming the bad count: warm-up in [0, 100000], timed in
// [10, 100000] (p10 and p90 of fewer than ten samples would be the extremes).
void validate(const CharLmTimingSuiteOptions&);

struct CharLmTimingSuite {
  int warmup_steps = 0;
  std::vector<double> step_milliseconds;  // the timed steps, in order
  // Median, p10, p90 (harness/stats.hpp: linear interpolation between order statistics).
  // Throws std::invalid_argument when no step was timed.
  SampleSummary summary() const;
};

class CharLmTrainer {
 public:
  // Uploads the parameters and every batch of both splits, resolves and binds every operation,
  // captures the step graph. Throws StoreError, std::invalid_argument or std::runtime_error.
  CharLmTrainer(const CharLmOptions&, const CharLmShape&, const std::vector<float>& parameters,
                const TbpttBatches& train, const TbpttBatches& validation);
  ~CharLmTrainer();
  CharLmTrainer(const CharLmTrainer&) = delete;
  CharLmTrainer& operator=(const CharLmTrainer&) = delete;

  const std::vector<OpResolution>& resolutions() const;
  const DeviceInfo& device() const;

  // A fresh epoch: the state zeroed, then the first min(max_steps, batches) training batches in
  // order, one graph replay each. Adam's step count runs on across epochs.
  CharLmEpoch train_epoch(std::int64_t max_steps);
  // Mean loss over every validation batch, from the zero state, state carried (forward only).
  // Leaves the training state zeroed: call it between epochs.
  double validation_loss();
  // The statistical suite: training steps continuing from where training stopped (Adam's step
  // count runs on), on the training batches from the first in order; after the last batch the
  // data wraps to the first with the state zeroed, as at an epoch's start (outside the timed
  // region), so any number of steps fits any corpus. Leaves the training state zeroed.
  CharLmTimingSuite timing_suite(const CharLmTimingSuiteOptions&);
  // Where a training step's time goes: the dispatched ops of the step (forward, backward, Adam)
  // with their medians inside replays of them alone (RunnerCore::op_times); the embedding's
  // gather and gradient and the loss bookkeeping are plain kernels outside that list. The replays
  // run Adam too: call it when the parameters are no longer needed.
  std::vector<OpTime> op_times(int warmup, int iterations);

  std::vector<float> parameters() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shapetune
