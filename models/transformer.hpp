// The TechJam causal Transformer (inference), every GPU operation through the dispatch table:
//
//   a = LayerNorm1(x)                                   layernorm, or the previous step's residual_layernorm
//   q, k, v = heads of x W_qkv^T + b_qkv                qkv_projection
//   c = causal softmax(q k^T / sqrt(hd)) v              attention.causal.split
//   x = x + c W_o^T + b_o;  b = LayerNorm2(x)           gemm_bias.nt, residual_layernorm
//   f = GELU(b W_1^T + b_1) (erf form)                  gemm_bias_gelu.nt
//   x = x + f W_2^T + b_2;  next LayerNorm1 (or the final LayerNorm)   gemm_bias.nt, residual_layernorm
//
// f16 and bf16 models run every op in that type (fp32 accumulation and softmax inside); an f32
// model runs its LayerNorms in f32 and its products in TF32, as PyTorch's "high" matmul precision
// does. One forward is one CUDA graph, replayed.
//
// The valid-token mask: batch row b has a valid prefix of L_b positions (1 <= L_b <= S). The
// TechJam model masks keys j >= L_b, zeroes the attention output, each layer's output and the
// final output at positions i >= L_b. With a mask the runner's attention is
// attention.causal.split.padded (masked keys; its invalid queries give 0), and one last op zeroes
// the output at invalid positions: activation_backward.relu, dx = dy [x > 0], with x +1 at valid
// positions and -1 elsewhere: dy where valid, 0 elsewhere (the catalogue's product with a mask).
// The intermediate zeroings are left out on the GPU: they change only invalid positions, which no
// valid position reads (their keys are masked, every other op works per position) and the last
// zeroing clears; the float64 forward does all of them, so the GPU test checks that claim. Lengths
// all equal to S take the unpadded ops, as a model without a mask does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"
#include "models/runner.hpp"

namespace shapetune {

struct TransformerShape {
  std::int64_t batch = 0, seq = 0, dim = 0, heads = 0, ffn = 0, layers = 0;
  std::int64_t rows() const { return batch * seq; }
  std::int64_t head_dim() const { return dim / heads; }
  std::string describe() const;
};

// The 14 cases of the TechJam track (B, S, D, heads, FFN, layers); nullopt outside 1..14.
std::optional<TransformerShape> techjam_case(int number);
inline constexpr int kTechJamCases = 14;

// Empty when the shape is one the runner takes; otherwise why not.
std::string transformer_shape_error(const TransformerShape&);

// The problem type of each op of a model in `dtype` (f32, f16 or bf16).
struct TransformerTypes {
  DType norm;     // LayerNorms: the model's type
  DType product;  // projections and attention: the model's type, tf32 for an f32 model
};
std::optional<TransformerTypes> transformer_types(DType model_dtype);

// Every distinct operation of the forward, in the order it first runs (what shapes/transformer.yaml
// must list for the dispatch table to hold every one); `padded`: the forward with a valid-token mask.
// How the attention rounds. `eager`: as the cases' materialised reference (PyTorch eager) does,
// through attention.*.rounded: the scores stored in the model's type (twice: Q K^T, then * scale),
// the fp32 softmax stored as normalised probabilities, then P V. `flash`: as a flash attention
// (PyTorch's SDPA, cuDNN's) does: fp32 scores, unnormalised probabilities in the product. In f16
// only the eager points meet the TechJam rule against that reference on every element; a flash
// attention misses it on a few per million (reports/cpu/2026-12-05-transformer-rounding-study).
enum class AttentionRounding { eager, flash };
std::string_view attention_rounding_name(AttentionRounding);
std::optional<AttentionRounding> parse_attention_rounding(std::string_view);
// eager for f16 and bf16 models up to S = 16384; flash for f32 models (TF32 products: the
// reference's scores are fp32, as a flash kernel keeps them), for longer sequences (the rounded
// attention makes two passes, 1.5x the FLOPs, and no materialised reference exists there to
// match: case 14's would need 10 TB) and for the library dispatch (cuDNN's SDPA is a flash kernel).
AttentionRounding default_attention_rounding(const TransformerShape&, DType model_dtype, DispatchMode);

// Where the output and FFN projections run fused with the residual LayerNorm after them
// (gemm_bias_residual_layernorm.nt). `table`: where the table's winner for the fused problem is a
// fused kernel faster than the two ops' winners together; `on`: wherever the table resolves the
// fused problem; `off`: never. The sweep times a problem cold or in a graph batch by its length, so
// the table's three medians can be taken in different modes: `on` and `off` let the forward's own
// graph compare them.
enum class FusedResidual { table, on, off };
std::string_view fused_residual_name(FusedResidual);
std::optional<FusedResidual> parse_fused_residual(std::string_view);

// How Q, K and V reach the attention. `split`: qkv_projection writes three [B, H, S, hd] tensors
// (its variants: three GEMMs and a transpose, or one GEMM whose epilogue scatters the heads) and
// attention.*.split reads them. `packed`: one gemm_bias.nt against the concatenated [3 D, D]
// weights writes [B S, 3 D] row-major, which is the packed layout [B, S, 3, H, hd] that
// attention.*.packed reads through strides: no scatter at all, rows of 3 D contiguous. `table`:
// packed where the table timed all four problems and the packed pair is faster, else split.
enum class QkvLayout { table, split, packed };
std::string_view qkv_layout_name(QkvLayout);
std::optional<QkvLayout> parse_qkv_layout(std::string_view);

std::vector<ModelOp> transformer_ops(const TransformerShape&, DType model_dtype, bool padded,
                                     AttentionRounding);
// With the default rounding of the tuned dispatch.
std::vector<ModelOp> transformer_ops(const TransformerShape&, DType model_dtype, bool padded = false);

// The fused ops that may replace two of those in every layer: the output projection and the
// residual LayerNorm after it, then the FFN's second projection and the residual LayerNorm after
// it (gemm_bias_residual_layernorm.nt, which rounds where the two ops store). The runner binds one
// where the table's winner for it is a fused kernel, not its unfused baseline. Empty where no
// fused variant exists for the model: f32 models, and D above 256 (a tile spans a row of n = D).
std::vector<ModelOp> transformer_fused_ops(const TransformerShape&, DType model_dtype);
// The packed QKV path's two ops (QkvLayout::packed): the projection as gemm_bias.nt with n = 3 D,
// and the attention reading its output as attention.causal.packed[.padded][.rounded]; they replace
// transformer_ops' QKV projection and attention.
std::vector<ModelOp> transformer_packed_qkv_ops(const TransformerShape&, DType model_dtype, bool padded,
                                                AttentionRounding);

// Valid lengths, one per batch row, each in [1, S]; empty: every position valid.
using ValidLengths = std::vector<std::int32_t>;

// Empty when `lengths` is empty or B values in [1, S]; otherwise why not.
std::string valid_lengths_error(const TransformerShape&, const ValidLengths& lengths);
// Whether some position is padding (a length below S).
bool has_padding(const TransformerShape&, const ValidLengths& lengths);

// Lengths for a padding ratio R in [0, 1): row b pads P_b = round(p + w (2 u_b - 1)) positions,
// L_b = S - P_b, where p = min(R S, S - 1), w = min(p, S - 1 - p) and u_b = (r >> 11) 2^-53 for the
// b-th 64-bit draw r of mt19937_64(seed ^ 0x9add1e5): spread evenly around p, so the expected
// fraction of padding is R (up to rounding, and where R S > S - 1 every row keeps one position).
// R = 0 gives S everywhere.
ValidLengths generate_valid_lengths(const TransformerShape&, double padding_ratio, std::uint64_t seed);

// Parameters by name, as a PyTorch module of the model names them (bench/peers/transformer_torch.py):
// layers.L.ln1.{weight,bias}, layers.L.attn.qkv.{weight,bias} ([3 D, D]: Q's, K's, V's rows),
// layers.L.attn.out.{weight,bias}, layers.L.ln2.{weight,bias}, layers.L.ffn.fc1.{weight,bias},
// layers.L.ffn.fc2.{weight,bias}, ln_f.{weight,bias}. Values as floats.
struct TensorValues {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
using TransformerWeights = std::map<std::string, TensorValues>;

// The parameters' names and shapes, in a fixed order.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> transformer_parameter_shapes(const TransformerShape&);

// Linear weights and biases uniform in +-1/sqrt(fan_in) (PyTorch's default), LayerNorm weights
// 1 + U(-0.1, 0.1) and biases U(-0.1, 0.1), all rounded to `dtype` as stored; the input x [B, S, D]
// standard normal. Deterministic in the seed.
TransformerWeights generate_transformer_weights(const TransformerShape&, DType dtype, std::uint64_t seed);
TensorValues generate_transformer_input(const TransformerShape&, DType dtype, std::uint64_t seed);

// The float64 forward of the same model on the host, with every op's output rounded to its stored
// type as the GPU stores it: what the runner's GPU test compares with at small shapes. With
// `valid_lengths`, the TechJam mask in every place techjam-cases.md puts it (masked keys; attention
// output, each layer's output and the final output zero at invalid positions).
// `rounding`: where the attention rounds, as the runner's (eager: scores and probabilities stored).
std::vector<double> transformer_reference(const TransformerShape&, DType model_dtype, const TransformerWeights&,
                                          const TensorValues& input, const ValidLengths& valid_lengths,
                                          AttentionRounding rounding);
// With the default rounding of the tuned dispatch.
std::vector<double> transformer_reference(const TransformerShape&, DType model_dtype, const TransformerWeights&,
                                          const TensorValues& input, const ValidLengths& valid_lengths = {});

// Tensors of a safetensors file (F32, F16 or BF16) as floats by name; DataError naming the file
// for anything else. And the writer: every tensor stored as `dtype`.
std::map<std::string, TensorValues> read_tensor_values(const std::string& path);
void write_tensor_values(const std::string& path, const std::map<std::string, TensorValues>&, DType dtype,
                         const std::map<std::string, std::string>& metadata = {});

// The name of the valid lengths (I32 [B]) in input and output files.
inline constexpr const char* kValidLengthsTensor = "valid_lengths";

// An input file: x [B, S, D] (F32, F16 or BF16) and, where the file has it, valid_lengths (I32 [B],
// each in [1, S]). DataError naming the file and the tensor for a missing x, a wrong dtype or
// shape, or a length out of range.
struct TransformerInput {
  TensorValues x;
  ValidLengths valid_lengths;  // empty where the file has none
};
TransformerInput read_transformer_input(const std::string& path, const TransformerShape&);

// One activation tensor (`name`, stored as `dtype`) and, when `valid_lengths` is not empty, the
// lengths as I32 beside it: what --save-input and --output write.
void write_transformer_tensor(const std::string& path, const std::string& name, const TensorValues&,
                              const ValidLengths& valid_lengths, DType dtype,
                              const std::map<std::string, std::string>& metadata = {});

// The model on the GPU: weights uploaded once, every op bound through the core, one forward
// captured as a graph.
class TransformerRunner {
 public:
  // Throws std::runtime_error for a bad shape, weights that do not match it or lengths outside
  // [1, S], and when an op's resolved variant cannot run. Lengths with padding bind the masked ops.
  // `rounding`: default_attention_rounding of the core's dispatch where not given.
  TransformerRunner(RunnerCore&, const TransformerShape&, DType model_dtype, const TransformerWeights&,
                    const ValidLengths& valid_lengths = {}, std::optional<AttentionRounding> rounding = std::nullopt,
                    FusedResidual fused = FusedResidual::table, QkvLayout qkv_layout = QkvLayout::table);
  ~TransformerRunner();
  TransformerRunner(const TransformerRunner&) = delete;
  TransformerRunner& operator=(const TransformerRunner&) = delete;

  // Copies x [B, S, D] (as floats, rounded to the model's type) to the device input.
  void set_input(const TensorValues& x);
  // One forward: a replay of the captured graph (waits for it).
  void forward();
  // The last forward's output [B, S, D] as floats.
  TensorValues output() const;
  // Median, p10 and p90 of `iterations` forwards timed with CUDA events, after `warmup`.
  struct Timing {
    double median_us = 0, p10_us = 0, p90_us = 0;
    int iterations = 0;
  };
  Timing time(int warmup, int iterations);
  // Where a forward's time goes: every op of the forward in order with its median time inside a
  // replay (RunnerCore::op_times).
  std::vector<OpTime> op_times(int warmup, int iterations);
  // How many of the forward graph's kernel-to-kernel edges are programmatic (launch overlap on).
  std::size_t overlapped_edges() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shapetune
