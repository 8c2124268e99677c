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
// does. One forward is one CUDA graph, replayed. Not done yet: the valid-token (padding) mask.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
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
// must list for the dispatch table to hold every one).
std::vector<ModelOp> transformer_ops(const TransformerShape&, DType model_dtype);

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
// type as the GPU stores it: what the runner's GPU test compares with at small shapes.
std::vector<double> transformer_reference(const TransformerShape&, DType model_dtype, const TransformerWeights&,
                                          const TensorValues& input);

// Tensors of a safetensors file (F32, F16 or BF16) as floats by name; DataError naming the file
// for anything else. And the writer: every tensor stored as `dtype`.
std::map<std::string, TensorValues> read_tensor_values(const std::string& path);
void write_tensor_values(const std::string& path, const std::map<std::string, TensorValues>&, DType dtype,
                         const std::map<std::string, std::string>& metadata = {});

// The model on the GPU: weights uploaded once, every op bound through the core, one forward
// captured as a graph.
class TransformerRunner {
 public:
  // Throws std::runtime_error for a bad shape or weights that do not match it, and when an op's
  // resolved variant cannot run.
  TransformerRunner(RunnerCore&, const TransformerShape&, DType model_dtype, const TransformerWeights&);
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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shapetune
