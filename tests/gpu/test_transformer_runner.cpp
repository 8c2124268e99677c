// The Transformer runner on the GPU against its float64 forward, at small awkward sizes (odd
// sequence lengths, a head dim the flash kernels do not take, more than one layer), in f32 (TF32
// products), f16 and bf16, with each problem's default variant and with the library baselines, in
// the dispatch's default attention rounding (eager in 16 bits: attention.*.rounded) and in flash;
// and the same with a valid-token mask (lengths 1, S and between in one batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/device.hpp"
#include "models/transformer.hpp"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

struct Case {
  TransformerShape shape;
  const char* why;
};

const Case kCases[] = {
    {{2, 17, 64, 2, 96, 2}, "hd 32, a sequence no tile divides, FFN wider than D"},
    {{3, 9, 48, 3, 40, 1}, "hd 16 (the flash kernels refuse it: naive attention), FFN narrower than D"},
    {{1, 1, 32, 4, 32, 2}, "one token"},
};

// The TechJam rule is 0.002 absolute or 2% relative against PyTorch in the same type; against the
// float64 forward a 16-bit model's rounding through two layers needs more: bf16's unit is 2^-8.
Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16: return {5e-3, 2e-2};
    case DType::bf16: return {4e-2, 5e-2};
    default: return {2e-3, 2e-2};
  }
}

// How many of the forward's outputs y miss the float64 forward `want` (the first three reported,
// each with `what`): a valid position outside tolerance(dtype), and with `lengths` any position past
// its batch row's length that is not exactly 0.
int outputs_wrong(const TransformerShape& s, DType dtype, const std::vector<float>& y, const std::vector<double>& want,
                  const ValidLengths& lengths, const std::string& what) {
  EXPECT_EQ(y.size(), want.size()) << what;
  const Tolerance tol = tolerance(dtype);
  int wrong = 0;
  for (std::size_t e = 0; e < std::min(y.size(), want.size()); ++e) {
    const std::int64_t batch = static_cast<std::int64_t>(e) / (s.seq * s.dim);
    const std::int64_t position = static_cast<std::int64_t>(e) / s.dim % s.seq;
    if (!lengths.empty() && position >= lengths[static_cast<std::size_t>(batch)]) {
      if (y[e] != 0.f && ++wrong <= 3)
        ADD_FAILURE() << what << ": batch " << batch << " position " << position << " is past length "
                      << lengths[static_cast<std::size_t>(batch)] << " but y = " << y[e];
      continue;
    }
    const double err = std::abs(y[e] - want[e]);
    if (!(err <= tol.atol || err <= tol.rtol * std::abs(want[e])) && ++wrong <= 3)
      ADD_FAILURE() << what << ": y[" << e << "] = " << y[e] << ", want " << want[e];
  }
  return wrong;
}

class TransformerRunnerTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { SHAPETUNE_REQUIRE_GPU(); }
};

TEST_P(TransformerRunnerTest, MatchesTheFloat64ForwardWithDefaultsAndLibraries) {
  const DType dtype = GetParam();
  for (const DispatchMode mode : {DispatchMode::tuned, DispatchMode::library}) {
    RunnerOptions options;
    options.dispatch = mode;
    RunnerCore core(options);
    if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
    for (const Case& c : kCases) {
      const auto weights = generate_transformer_weights(c.shape, dtype, 11);
      const TensorValues x = generate_transformer_input(c.shape, dtype, 11);
      // The dispatch's default attention rounding (eager in 16 bits with the tuned dispatch), and
      // flash as well where that is not the default.
      std::vector<AttentionRounding> roundings{default_attention_rounding(c.shape, dtype, mode)};
      if (roundings[0] != AttentionRounding::flash) roundings.push_back(AttentionRounding::flash);
      for (const AttentionRounding rounding : roundings) {
        const std::string what = c.shape.describe() + " (" + c.why + "), " + std::string(dispatch_mode_name(mode)) +
                                 ", attention rounding " + std::string(attention_rounding_name(rounding));
        TransformerRunner runner(core, c.shape, dtype, weights, {}, rounding);
        runner.set_input(x);
        runner.forward();
        const TensorValues y = runner.output();
        const std::vector<double> want = transformer_reference(c.shape, dtype, weights, x, {}, rounding);
        EXPECT_EQ(outputs_wrong(c.shape, dtype, y.values, want, {}, what), 0) << what;
        // A second forward (the graph replayed) gives the same output, bit for bit.
        runner.forward();
        EXPECT_EQ(runner.output().values, y.values) << what;
      }
    }
  }
}

// The masked forward: the float64 forward's valid positions under the same rule, and exactly 0 at
// every invalid one. In a causal model with a valid prefix no valid query reads a masked key, so
// the valid outputs equal the unmasked model's and a runner that ignored the mask altogether would
// fail only the zeros; the resolutions show that the masked ops were bound.
TEST_P(TransformerRunnerTest, WithPaddingMatchesTheFloat64ForwardAndZeroesInvalidPositions) {
  const DType dtype = GetParam();
  struct PaddedCase {
    TransformerShape shape;
    ValidLengths lengths;
    const char* why;
  };
  const PaddedCase cases[] = {
      {{3, 17, 64, 2, 96, 2}, {1, 17, 9}, "hd 32, lengths 1, S and between"},
      {{2, 9, 48, 3, 40, 1}, {4, 8}, "hd 16 (naive attention)"},
      {{2, 70, 64, 1, 64, 2}, {5, 66}, "hd 64, S over a flash tile, a length inside the last tile"},
  };
  for (const DispatchMode mode : {DispatchMode::tuned, DispatchMode::library}) {
    RunnerOptions options;
    options.dispatch = mode;
    RunnerCore core(options);
    if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
    for (const PaddedCase& c : cases) {
      const auto weights = generate_transformer_weights(c.shape, dtype, 13);
      const TensorValues x = generate_transformer_input(c.shape, dtype, 13);
      const AttentionRounding rounding = default_attention_rounding(c.shape, dtype, mode);
      TransformerRunner runner(core, c.shape, dtype, weights, c.lengths, rounding);
      runner.set_input(x);
      runner.forward();
      const TensorValues y = runner.output();
      const std::vector<double> want = transformer_reference(c.shape, dtype, weights, x, c.lengths, rounding);
      const std::string what = c.shape.describe() + " (" + c.why + "), " + std::string(dispatch_mode_name(mode));
      EXPECT_EQ(outputs_wrong(c.shape, dtype, y.values, want, c.lengths, what), 0) << what;
      runner.forward();
      EXPECT_EQ(runner.output().values, y.values) << c.shape.describe();
    }
    const auto bound = [&](const std::string& primitive) {
      return std::any_of(core.resolutions().begin(), core.resolutions().end(),
                         [&](const OpResolution& r) { return r.op.problem.primitive == primitive; });
    };
    // In 16 bits with the tuned dispatch the attention is the rounded one (eager rounding).
    const std::string rounded = default_attention_rounding(cases[0].shape, dtype, mode) == AttentionRounding::eager
                                    ? ".rounded"
                                    : "";
    EXPECT_TRUE(bound("attention.causal.split.padded" + rounded));
    EXPECT_TRUE(bound("activation_backward.relu"));
    EXPECT_FALSE(bound("attention.causal.split" + rounded)) << "a mask with padding binds the masked attention only";
  }
}

// Lengths all equal to S take the unmasked ops, and give the unmasked output bit for bit.
TEST_P(TransformerRunnerTest, FullLengthsRunTheUnmaskedForward) {
  const DType dtype = GetParam();
  RunnerCore core(RunnerOptions{});
  if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
  const TransformerShape shape{2, 17, 64, 2, 96, 2};
  const auto weights = generate_transformer_weights(shape, dtype, 17);
  const TensorValues x = generate_transformer_input(shape, dtype, 17);
  TransformerRunner plain(core, shape, dtype, weights);
  TransformerRunner full(core, shape, dtype, weights, ValidLengths(2, 17));
  plain.set_input(x), full.set_input(x);
  plain.forward(), full.forward();
  EXPECT_EQ(full.output().values, plain.output().values);
  for (const OpResolution& r : core.resolutions()) {
    EXPECT_NE(r.op.problem.primitive, "attention.causal.split.padded");
    EXPECT_NE(r.op.problem.primitive, "activation_backward.relu");
  }
}

// --op-times: one time per op of the forward, in order, each positive, and the output the same
// after the timed replays (the graph with events runs the same ops on the same buffers).
TEST_P(TransformerRunnerTest, OpTimesCoverEveryOpOfTheForward) {
  const DType dtype = GetParam();
  RunnerCore core(RunnerOptions{});
  if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
  const TransformerShape shape = kCases[0].shape;
  TransformerRunner runner(core, shape, dtype, generate_transformer_weights(shape, dtype, 5));
  runner.set_input(generate_transformer_input(shape, dtype, 5));
  runner.forward();
  const std::vector<float> before = runner.output().values;
  const std::vector<OpTime> times = runner.op_times(2, 5);
  // The first LayerNorm, then per layer: QKV projection, attention, output projection, residual
  // LayerNorm, FFN in, FFN out, residual LayerNorm.
  ASSERT_EQ(times.size(), static_cast<std::size_t>(1 + 7 * shape.layers));
  EXPECT_EQ(times[0].name, core.resolutions()[0].op.name);
  for (const auto& t : times) EXPECT_GT(t.median_us, 0) << t.name << " " << t.problem;
  runner.forward();
  EXPECT_EQ(runner.output().values, before);
}

// --launch-overlap: the forward's graph with programmatic edges into shapetune's kernels gives the
// output of the plain graph bit for bit, replay after replay (a kernel that read before its wait
// would see its input half written in some replay), with the defaults and with the libraries'
// kernels (whose edges stay ordinary) in between; on sm_90 some edges are programmatic.
TEST_P(TransformerRunnerTest, LaunchOverlapGivesThePlainOutputBitForBit) {
  const DType dtype = GetParam();
  for (const DispatchMode mode : {DispatchMode::tuned, DispatchMode::library}) {
    RunnerOptions plain_options, overlap_options;
    plain_options.dispatch = overlap_options.dispatch = mode;
    overlap_options.overlap_launches = true;
    RunnerCore plain_core(plain_options), overlap_core(overlap_options);
    if (plain_core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
    const bool sm90 = plain_core.device().limits.compute_capability >= 90;
    EXPECT_EQ(overlap_core.overlap_launches(), sm90);
    for (const TransformerShape& shape : {kCases[0].shape, kCases[2].shape, TransformerShape{8, 128, 128, 4, 128, 2}}) {
      const std::string what = shape.describe() + ", " + std::string(dispatch_mode_name(mode));
      const auto weights = generate_transformer_weights(shape, dtype, 23);
      const TensorValues x = generate_transformer_input(shape, dtype, 23);
      TransformerRunner plain(plain_core, shape, dtype, weights), overlapped(overlap_core, shape, dtype, weights);
      EXPECT_EQ(plain.overlapped_edges(), 0u) << what;
      // With the library dispatch an f32 model runs library kernels almost everywhere, and the
      // runtime refuses to make the few edges into shapetune's kernels programmatic (an H100: 0).
      if (sm90 && (mode == DispatchMode::tuned || dtype != DType::f32)) {
        EXPECT_GT(overlapped.overlapped_edges(), 0u) << what;
      }
      plain.set_input(x), overlapped.set_input(x);
      plain.forward();
      const std::vector<float> want = plain.output().values;
      for (int replay = 0; replay < 20; ++replay) {
        overlapped.forward();
        ASSERT_EQ(overlapped.output().values, want) << what << ", replay " << replay;
      }
    }
  }
}

// The packed QKV path (--qkv-layout packed): one GEMM of n = 3 D writing [B S, 3 D] and the packed
// attention reading it through strides give the float64 forward under the same rule as the split
// path, with and without a mask, with the defaults and the libraries (cuBLASLt, cuDNN's SDPA), at
// the awkward shapes (hd 8 and 16 fall back to naive attention); the resolutions show the packed
// ops bound and the split ones not. A stride that read K for Q, or V of the wrong head, errs by O(1).
TEST_P(TransformerRunnerTest, PackedQkvMatchesTheFloat64Forward) {
  const DType dtype = GetParam();
  struct PackedCase {
    TransformerShape shape;
    ValidLengths lengths;
  };
  const PackedCase cases[] = {{kCases[0].shape, {}}, {kCases[1].shape, {}}, {kCases[2].shape, {}},
                              {{3, 17, 64, 2, 96, 2}, {1, 17, 9}}, {{2, 70, 64, 1, 64, 2}, {5, 66}}};
  for (const DispatchMode mode : {DispatchMode::tuned, DispatchMode::library}) {
    RunnerOptions options;
    options.dispatch = mode;
    RunnerCore core(options);
    if (core.device().limits.compute_capability < 80) GTEST_SKIP() << "the tensor-core defaults need sm_80+";
    for (const PackedCase& c : cases) {
      const std::string what = c.shape.describe() + (c.lengths.empty() ? "" : " padded") + ", " +
                               std::string(dispatch_mode_name(mode));
      const auto weights = generate_transformer_weights(c.shape, dtype, 17);
      const TensorValues x = generate_transformer_input(c.shape, dtype, 17);
      const AttentionRounding rounding = default_attention_rounding(c.shape, dtype, mode);
      TransformerRunner runner(core, c.shape, dtype, weights, c.lengths, rounding, FusedResidual::table,
                               QkvLayout::packed);
      runner.set_input(x);
      runner.forward();
      const TensorValues y = runner.output();
      const std::vector<double> want = transformer_reference(c.shape, dtype, weights, x, c.lengths, rounding);
      EXPECT_EQ(outputs_wrong(c.shape, dtype, y.values, want, c.lengths, what), 0) << what;
      runner.forward();
      EXPECT_EQ(runner.output().values, y.values) << what;
    }
    const auto bound = [&](const std::string& key_start) {
      return std::any_of(core.resolutions().begin(), core.resolutions().end(), [&](const OpResolution& r) {
        return r.op.problem.key().rfind(key_start, 0) == 0;
      });
    };
    EXPECT_TRUE(bound("attention.causal.packed")) << dispatch_mode_name(mode);
    EXPECT_FALSE(bound("attention.causal.split")) << dispatch_mode_name(mode);
    EXPECT_FALSE(bound("qkv_projection")) << dispatch_mode_name(mode);
    const TransformerShape& first = cases[0].shape;
    EXPECT_TRUE(bound("gemm_bias.nt/" + std::string(dtype_name(transformer_packed_qkv_ops(
                                             first, dtype, false, AttentionRounding::flash)[0].problem.dtype)) +
                      "/m=" + std::to_string(first.rows()) + ",n=" + std::to_string(3 * first.dim)));
  }
}

// The fused projection + residual LayerNorm bound by the runner (--fused-residual): a table whose
// winner for both fused problems is the wgmma kernel, which `on` and `table` (the table timed
// neither projection nor residual LayerNorm) bind, gives the float64 forward under the same rule
// as the two ops; `off` binds the two ops. A binding that swapped the residual and the projection
// or wrote the LayerNorm over the residual stream fails it by O(1).
TEST_P(TransformerRunnerTest, FusedResidualMatchesTheFloat64Forward) {
  const DType dtype = GetParam();
  if (dtype == DType::f32) GTEST_SKIP() << "the fused primitive is 16-bit";
  const DeviceInfo device = use_device(0);
  if (device.limits.compute_capability < 90) GTEST_SKIP() << "the fused kernel is wgmma (sm_90a)";
  test_support::TempDir dir;
  const std::string db = dir.file("fused.db");
  const TransformerShape shape = kCases[0].shape;  // D 64, FFN 96: both fused problems, n = 64
  const Variant& wgmma = *catalogue().find_variant("gemm_bias_residual_layernorm.nt", "wgmma");
  {
    auto store = Store::open(db);
    store->upsert_device(device.fingerprint);
    for (const ModelOp& op : transformer_fused_ops(shape, dtype)) {
      ASSERT_TRUE(wgmma.supports(op.problem, wgmma.default_config, device.limits).ok) << op.problem.key();
      WinnerRecord w;
      w.device_key = device.fingerprint.key();
      w.problem = op.problem;
      w.variant = wgmma.name;
      w.config = wgmma.default_config;
      w.timing.median_us = 10;
      store->store_winner(w);
    }
  }
  const auto weights = generate_transformer_weights(shape, dtype, 31);
  const TensorValues x = generate_transformer_input(shape, dtype, 31);
  const std::vector<double> want = transformer_reference(shape, dtype, weights, x);
  for (const FusedResidual fused : {FusedResidual::table, FusedResidual::on, FusedResidual::off}) {
    const std::string what = shape.describe() + ", --fused-residual " + std::string(fused_residual_name(fused));
    RunnerOptions options;
    options.db_path = db;
    RunnerCore core(options);
    TransformerRunner runner(core, shape, dtype, weights, {}, std::nullopt, fused);
    const auto bound = std::count_if(core.resolutions().begin(), core.resolutions().end(), [&](const OpResolution& r) {
      return r.op.problem.primitive == "gemm_bias_residual_layernorm.nt" && r.variant == "wgmma";
    });
    EXPECT_EQ(bound, fused == FusedResidual::off ? 0 : 2) << what;
    runner.set_input(x);
    runner.forward();
    EXPECT_EQ(outputs_wrong(shape, dtype, runner.output().values, want, {}, what), 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TransformerRunnerTest, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace shapetune
