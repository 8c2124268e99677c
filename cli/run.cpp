#include "cli/run.hpp"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <utility>

#include "cli/runner_options.hpp"
#include "core/build_info.hpp"
#include "harness/device.hpp"
#include "models/idx.hpp"
#include "models/runner.hpp"
#include "models/transformer.hpp"

namespace shapetune::cli {

namespace {

// The model's shape: a TechJam case, with any size given on its own replacing the case's.
TransformerShape shape_of(const ParsedArgs& a) {
  TransformerShape s;
  if (a.has("case")) {
    s = *techjam_case(static_cast<int>(a.integer("case", 1, 1, kTechJamCases)));
  } else {
    for (const char* name : {"batch", "seq", "dim", "heads", "ffn", "layers"})
      if (!a.has(name))
        throw UsageError("give --case N (1-" + std::to_string(kTechJamCases) + ") or all six sizes; --" + name +
                         " is missing");
  }
  const auto size = [&](const char* name, std::int64_t& field) {
    field = a.integer(name, field, 1, std::int64_t{1} << 30);
  };
  size("batch", s.batch), size("seq", s.seq), size("dim", s.dim), size("heads", s.heads), size("ffn", s.ffn);
  s.layers = a.integer("layers", s.layers, 1, 1000);
  if (const std::string why = transformer_shape_error(s); !why.empty()) throw UsageError(why);
  return s;
}

}  // namespace

CommandSpec run_spec() {
  CommandSpec spec{"run",
          "Run a model's inference through the dispatch table: `transformer`, the TechJam causal Transformer "
          "(pre-LN, QKV projection, causal attention, GELU FFN, final LayerNorm).",
          "MODEL",
          1,
          1,
          {{"case", 0, "N", "a TechJam case, 1-14 (its B, S, D, heads, FFN, layers); sizes given too replace its own"},
           {"batch", 0, "B", "batch"},
           {"seq", 0, "S", "sequence length"},
           {"dim", 0, "D", "model width (a multiple of --heads)"},
           {"heads", 0, "H", "attention heads"},
           {"ffn", 0, "F", "FFN width"},
           {"layers", 0, "L", "layers"},
           {"dtype", 0, "f32|f16|bf16",
            "the model's type (default f16); f32 runs LayerNorms in f32 and products in TF32, as PyTorch's \"high\" "
            "matmul precision"},
           {"attention-rounding", 0, "eager|flash",
            "eager: the attention rounds as the cases' materialised PyTorch reference (scores and normalised "
            "probabilities stored in the model's type; attention.causal.split.rounded); flash: as a flash attention "
            "(fp32 scores). Default: eager for f16/bf16 up to S = 16384 with the tuned dispatch, else flash"},
           {"fused-residual", 0, "table|on|off",
            "whether the output and FFN projections run fused with the residual LayerNorm after them "
            "(gemm_bias_residual_layernorm.nt; f16/bf16 models with D <= 256). table (default): fused where the "
            "table's winner for it is a fused kernel faster than the two ops' winners together; on: fused wherever "
            "the table resolves it; off: never fused. Run with on and then off to compare the two in the forward"},
           {"qkv-layout", 0, "table|split|packed",
            "how Q, K and V reach the attention. split: qkv_projection writes them as three [B, H, S, hd] tensors "
            "and attention.*.split reads those; packed: one gemm_bias.nt with n = 3 D writes [B S, 3 D], the packed "
            "layout attention.*.packed reads through strides. table (default): packed where the table timed both "
            "paths and the packed one is faster, else split"},
           {"seed", 0, "N", "seed of the generated weights and input (default 1)"},
           {"weights", 0, "FILE", "read the parameters from this safetensors file (names as --save-weights writes)"},
           {"input", 0, "FILE",
            "read the input x [B, S, D] (tensor \"x\") and, where the file has them, the valid lengths (tensor "
            "\"valid_lengths\", I32 [B], each in [1, S]) from this safetensors file"},
           {"padding-ratio", 0, "R",
            "a valid-token mask with a fraction R (0 <= R < 1) of the positions padding on average: per batch row a "
            "valid prefix of length L_b drawn from --seed (default 0: no mask)"},
           {"save-weights", 0, "FILE", "write the parameters used (generated or read) as safetensors"},
           {"save-input", 0, "FILE",
            "write the input used as safetensors (tensor \"x\", and \"valid_lengths\" with a mask)"},
           {"output", 'o', "FILE",
            "write the output [B, S, D] as safetensors (tensor \"y\", and \"valid_lengths\" with a mask)"},
           {"warmup", 0, "N", "forwards before timing (default 10)"},
           {"iterations", 0, "N", "timed forwards (default 50)"},
           {"launch-overlap", 0, "",
            "programmatic dependent launch inside the forward's graph (sm_90 on): each of shapetune's kernels is "
            "launched while the kernel before it finishes, and waits for it before touching memory"},
           {"op-times", 0, "",
            "also show where a forward's time goes: per operation, its median time inside a replay (events between "
            "the ops in the graph), summed over the layers"}},
          "Prints how each distinct operation resolved (exact, nearest, default, library), then the forward's\n"
          "median time (CUDA events around one replay of the forward's CUDA graph) with p10/p90.\n"
          "Weight names follow bench/peers/transformer_torch.py's module, which reads --save-weights, --save-input\n"
          "and --output to run the same model in PyTorch and compare under the TechJam rule.\n"
          "With a valid-token mask (--padding-ratio, or valid_lengths in --input) keys past a row's length are\n"
          "masked and the output there is 0, as techjam-cases.md defines; lengths all equal to S run the unmasked\n"
          "forward. Exit codes: 0 ran; 1 failed on the GPU; 2 bad usage or input, or no CUDA device."};
  for (OptionSpec& o : runner_option_specs()) spec.options.push_back(std::move(o));
  return spec;
}

int run_model(const ParsedArgs& a, std::ostream& out, std::ostream& err, const std::string& command_line) {
  if (a.positional[0] != "transformer") throw UsageError("unknown model '" + a.positional[0] + "'; models: transformer");
  const TransformerShape shape = shape_of(a);
  const std::string dtype_text = a.value("dtype").value_or("f16");
  const auto dtype = parse_dtype(dtype_text);
  if (!dtype || !transformer_types(*dtype)) throw UsageError("--dtype must be f32, f16 or bf16, got '" + dtype_text + "'");
  RunnerOptions options = parse_runner_options(a);
  options.overlap_launches = a.has("launch-overlap");
  std::optional<AttentionRounding> rounding;
  if (auto text = a.value("attention-rounding")) {
    rounding = parse_attention_rounding(*text);
    if (!rounding) throw UsageError("--attention-rounding must be eager or flash, got '" + *text + "'");
  }
  FusedResidual fused = FusedResidual::table;
  if (auto text = a.value("fused-residual")) {
    const auto parsed = parse_fused_residual(*text);
    if (!parsed) throw UsageError("--fused-residual must be table, on or off, got '" + *text + "'");
    fused = *parsed;
  }
  QkvLayout qkv_layout = QkvLayout::table;
  if (auto text = a.value("qkv-layout")) {
    const auto parsed = parse_qkv_layout(*text);
    if (!parsed) throw UsageError("--qkv-layout must be table, split or packed, got '" + *text + "'");
    qkv_layout = *parsed;
  }
  const auto seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  const int warmup = static_cast<int>(a.integer("warmup", 10, 0, 100000));
  const int iterations = static_cast<int>(a.integer("iterations", 50, 1, 100000));
  const double padding_ratio = a.number("padding-ratio", 0, 0, 1);
  if (padding_ratio >= 1) throw UsageError("--padding-ratio must be below 1 (every row keeps a valid position)");

  // Inputs first: a bad file is a usage error before any GPU work.
  TransformerWeights weights;
  TransformerInput input;
  try {
    weights = a.has("weights") ? read_tensor_values(*a.value("weights")) : generate_transformer_weights(shape, *dtype, seed);
    if (a.has("input"))
      input = read_transformer_input(*a.value("input"), shape);
    else
      input.x = generate_transformer_input(shape, *dtype, seed);
  } catch (const DataError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  if (a.has("padding-ratio")) {
    if (!input.valid_lengths.empty())
      throw UsageError("--padding-ratio draws valid lengths, and " + *a.value("input") +
                       " has its own (tensor valid_lengths): give one or the other");
    if (padding_ratio > 0) input.valid_lengths = generate_valid_lengths(shape, padding_ratio, seed);
  }
  if (auto why = cuda_unavailable_reason()) {
    err << "error: `shapetune run` needs a CUDA device: " << *why << "\n";
    return 2;
  }
  const std::map<std::string, std::string> metadata{{"shape", shape.describe()}, {"dtype", dtype_text},
                                                    {"command", command_line}, {"git_sha", build_git_sha()}};
  try {
    if (auto path = a.value("save-weights")) write_tensor_values(*path, weights, *dtype, metadata);
    if (auto path = a.value("save-input"))
      write_transformer_tensor(*path, "x", input.x, input.valid_lengths, *dtype, metadata);
  } catch (const DataError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }

  RunnerCore core(options);
  out << "Transformer " << shape.describe() << ", " << dtype_text << ", on " << core.device().fingerprint.name
      << ", dispatch " << dispatch_mode_name(options.dispatch)
      << (options.db_path.empty() ? std::string(" (no database: defaults)") : " from " + options.db_path)
      << ", attention rounding "
      << attention_rounding_name(rounding.value_or(default_attention_rounding(shape, *dtype, options.dispatch))) << "\n";
  if (has_padding(shape, input.valid_lengths)) {
    std::int64_t valid = 0;
    for (const std::int32_t l : input.valid_lengths) valid += l;
    out << "valid-token mask: " << valid << " of " << shape.rows() << " positions valid ("
        << std::fixed << std::setprecision(3) << 1 - static_cast<double>(valid) / static_cast<double>(shape.rows())
        << " padding)\n" << std::defaultfloat;
  }
  TransformerRunner runner(core, shape, *dtype, weights, input.valid_lengths, rounding, fused, qkv_layout);
  print_resolutions(core.resolutions(), out);
  if (options.overlap_launches)
    out << (core.overlap_launches() ? "launch overlap: " + std::to_string(runner.overlapped_edges()) +
                                          " kernel-to-kernel edges of the forward's graph programmatic\n"
                                    : std::string("launch overlap: not on this device (needs sm_90)\n"));
  out << std::flush;  // a long forward (case 14: seconds each) killed by a time limit keeps what it printed
  runner.set_input(input.x);
  runner.forward();
  const TensorValues y = runner.output();
  if (auto path = a.value("output")) {
    try {
      write_transformer_tensor(*path, "y", y, input.valid_lengths, *dtype, metadata);
    } catch (const DataError& e) {
      err << "error: " << e.what() << "\n";
      return 2;
    }
  }
  const TransformerRunner::Timing t = runner.time(warmup, iterations);
  const double tokens = static_cast<double>(shape.rows());
  out << std::fixed << std::setprecision(1) << "forward: median " << t.median_us << " us (p10 " << t.p10_us << ", p90 "
      << t.p90_us << ") over " << t.iterations << " replays of one CUDA graph; " << std::setprecision(0)
      << tokens / (t.median_us * 1e-6) << " tokens/s\n" << std::flush;
  if (a.has("op-times")) print_op_times(runner.op_times(warmup, iterations), iterations, "forward", out);
  return 0;
}

}  // namespace shapetune::cli
