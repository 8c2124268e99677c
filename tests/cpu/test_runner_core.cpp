// The runner core's host side: how an operation resolves (exact, nearest, default, library),
// the table a runner prints, and the dispatch mode's names. No GPU: the resolver runs on the
// catalogue and a database alone.
#include "models/runner.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "db/store.hpp"
#include "models/transformer.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

DeviceInfo h200_info() {
  DeviceInfo info;
  info.fingerprint = DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{140} << 30,
                                       "580.0",       "13.0", "13.1.0", "9.14.0"};
  info.limits = nominal_device_limits();
  return info;
}

Problem softmax(std::int64_t rows, std::int64_t cols) {
  return Problem{"softmax", DType::f32, Shape({{"rows", rows}, {"cols", cols}})};
}

// A database with one tuned softmax problem for the H200 fingerprint above.
std::string tuned_db(const test_support::TempDir& dir) {
  const std::string path = dir.file("tuned.db");
  auto store = Store::open(path);
  const DeviceInfo info = h200_info();
  store->upsert_device(info.fingerprint);
  WinnerRecord w;
  w.device_key = info.fingerprint.key();
  w.problem = softmax(4096, 1000);
  w.variant = "warp_row_online";
  w.config = Config({{"warps_per_block", 4}});
  w.timing.median_us = 3;
  w.best_baseline = "cudnn";
  w.baseline_us = 4;
  store->store_winner(w);
  return path;
}

TEST(RunnerCore, DispatchModeNames) {
  EXPECT_EQ(dispatch_mode_name(DispatchMode::tuned), "tuned");
  EXPECT_EQ(dispatch_mode_name(DispatchMode::library), "library");
  EXPECT_EQ(parse_dispatch_mode("library"), DispatchMode::library);
  EXPECT_EQ(parse_dispatch_mode("tuned"), DispatchMode::tuned);
  EXPECT_EQ(parse_dispatch_mode("Tuned"), std::nullopt);
}

TEST(RunnerCore, ResolvesExactNearestAndDefault) {
  test_support::TempDir dir;
  const Resolver resolver(tuned_db(dir), h200_info(), DispatchMode::tuned);
  EXPECT_EQ(resolver.tuned_problems(), 1u);

  const auto [exact_variant, exact] = resolver.resolve({"probabilities", softmax(4096, 1000)});
  EXPECT_EQ(exact.variant, "warp_row_online");
  EXPECT_EQ(exact.config, "warps_per_block=4");
  EXPECT_EQ(exact.source, "exact");
  EXPECT_EQ(exact_variant->name, "warp_row_online");

  const auto [near_variant, near] = resolver.resolve({"probabilities", softmax(4000, 1000)});
  EXPECT_EQ(near.variant, "warp_row_online");
  EXPECT_EQ(near.source, "nearest (" + softmax(4096, 1000).key() + ")");

  const Resolver untuned("", h200_info(), DispatchMode::tuned);
  const auto [default_variant, fallback] = untuned.resolve({"probabilities", softmax(4096, 1000)});
  EXPECT_EQ(fallback.variant, "vec_online");  // softmax's default variant
  EXPECT_NE(fallback.source.find("fallback"), std::string::npos) << fallback.source;
}

// A table tuned on another device only: the op falls back to the default, and says where the
// table was tuned, so that a user who carried it over knows to sweep this device.
TEST(RunnerCore, AFallbackNamesTheDevicesTheTableWasTunedOn) {
  test_support::TempDir dir;
  const std::string path = tuned_db(dir);
  DeviceInfo h100 = h200_info();
  h100.fingerprint.name = "NVIDIA H100 80GB HBM3";
  ASSERT_NE(h100.fingerprint.key(), h200_info().fingerprint.key());
  const Resolver elsewhere(path, h100, DispatchMode::tuned);
  EXPECT_EQ(elsewhere.tuned_problems(), 0u);
  const auto [variant, r] = elsewhere.resolve({"probabilities", softmax(4096, 1000)});
  EXPECT_EQ(r.variant, "vec_online");
  EXPECT_EQ(r.source, "fallback (this database tunes it only on NVIDIA H200: sweep it on this device)");
  // Another primitive, tuned nowhere: the plain fallback.
  const auto [other_variant, other] =
      elsewhere.resolve({"norm", Problem{"layernorm", DType::f32, Shape({{"rows", 64}, {"cols", 128}})}});
  EXPECT_EQ(other.source, "fallback");
  // On the device it was tuned on, the exact winner.
  const Resolver here(path, h200_info(), DispatchMode::tuned);
  EXPECT_EQ(here.resolve({"probabilities", softmax(4096, 1000)}).second.source, "exact");
}

TEST(RunnerCore, LibraryModeTakesTheSweepsFastestBaseline) {
  test_support::TempDir dir;
  const Resolver library(tuned_db(dir), h200_info(), DispatchMode::library);
  const auto [variant, r] = library.resolve({"probabilities", softmax(4096, 1000)});
  EXPECT_EQ(r.variant, "cudnn");
  EXPECT_TRUE(variant->baseline);
  EXPECT_EQ(r.source, "library: fastest baseline in the sweep");
  // A problem the sweep never saw: the first baseline that runs it.
  EXPECT_EQ(library.resolve({"probabilities", softmax(8, 8)}).second.source, "library: first baseline that runs it");
  // Adam has no library baseline: the default variant, said so.
  const Problem adam{"adam", DType::f32, Shape({{"n", 1000}, {"tensors", 1}})};
  EXPECT_EQ(library.resolve({"optimizer", adam}).second.source, "no library has it: default variant");
}

// A model that needs a config value (the Transformer's round_h = 1: PyTorch normalises the stored
// residual sum) gets it whatever the table chose, and the resolution says so; an op of a variant
// without that parameter is untouched.
TEST(RunnerCore, PinnedConfigValuesOverrideTheTablesChoice) {
  const test_support::TempDir dir;
  const std::string path = dir.file("pinned.db");
  const DeviceInfo info = h200_info();
  const Problem residual{"residual_layernorm", DType::f16, Shape({{"rows", 8192}, {"cols", 128}})};
  {
    auto store = Store::open(path);
    store->upsert_device(info.fingerprint);
    WinnerRecord w;
    w.device_key = info.fingerprint.key();
    w.problem = residual;
    w.variant = "fused_register";
    w.config = Config({{"threads_per_row", 8}, {"block_size", 256}, {"packs_per_thread", 2}, {"round_h", 0}});
    w.timing.median_us = 3;
    store->store_winner(w);
  }
  const Resolver resolver(path, info, DispatchMode::tuned);
  const auto [unpinned_variant, unpinned] = resolver.resolve({"residual + LayerNorm", residual});
  EXPECT_EQ(unpinned.config, "threads_per_row=8,block_size=256,packs_per_thread=2,round_h=0");
  const auto [variant, pinned] = resolver.resolve({"residual + LayerNorm", residual, {{"round_h", 1}}});
  EXPECT_EQ(variant->name, "fused_register");
  EXPECT_EQ(pinned.config, "threads_per_row=8,block_size=256,packs_per_thread=2,round_h=1");
  EXPECT_EQ(pinned.source, "exact, round_h=1 pinned by the model");
  const auto [softmax_variant, untouched] = resolver.resolve({"probabilities", softmax(64, 64), {{"round_h", 1}}});
  EXPECT_EQ(untouched.source.find("pinned"), std::string::npos);
  EXPECT_EQ(untouched.config.find("round_h"), std::string::npos);
  // The Transformer pins it on its residual LayerNorm, in every dtype.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const ModelOp& op : transformer_ops(*techjam_case(1), dtype)) {
      if (op.problem.primitive == "residual_layernorm") {
        EXPECT_EQ(op.pinned, (std::vector<std::pair<std::string, std::int64_t>>{{"round_h", 1}}));
      }
    }
}

// The TechJam lesson in the runner's table: where a variant failed the accuracy gate on the
// tuned problem (every config it ran), the resolution names it and its worst error, so the user
// sees why the table took another; a variant with one accurate config is not named.
TEST(RunnerCore, NamesTheVariantsThatFailedTheAccuracyGate) {
  const test_support::TempDir dir;
  const std::string path = dir.file("failures.db");
  const DeviceInfo info = h200_info();
  const Problem qkv{"qkv_projection", DType::f16, Shape({{"B", 64}, {"S", 128}, {"H", 4}, {"hd", 32}})};
  {
    auto store = Store::open(path);
    store->upsert_device(info.fingerprint);
    const std::int64_t sweep = store->begin_sweep(SweepInfo{info.fingerprint.key(), "shapetune sweep", "abc",
                                                            "shapes/x.yaml", "0", ""});
    const auto candidate = [&](const std::string& variant, Config config, CandidateStatus status, double error,
                               const std::string& mismatch) {
      CandidateRecord c;
      c.sweep_id = sweep;
      c.problem = qkv;
      c.variant = variant;
      c.config = std::move(config);
      c.status = status;
      c.accuracy = AccuracyReport{error, error, status == CandidateStatus::ok ? 0 : 3, 1000, mismatch};
      if (status == CandidateStatus::ok) c.timing = TimingStats{};
      c.tolerance = {1e-3, 1e-2};
      store->record_candidate(c);
    };
    candidate("packed_head_split", Config({{"tile", 2}, {"stages", 3}}), CandidateStatus::failed_accuracy, 4e-3,
              "q[0,1]: got 1.004, want 1");
    candidate("packed_head_split", Config({{"tile", 1}, {"stages", 2}}), CandidateStatus::failed_accuracy, 6e-3,
              "k[3,7]: got 0.506, want 0.5");
    candidate("packed", Config(), CandidateStatus::failed_accuracy, 5e-3, "v[1,1]: got 2.005, want 2");
    candidate("packed", Config(), CandidateStatus::ok, 1e-4, "");
    candidate("split", Config(), CandidateStatus::ok, 1e-4, "");
    WinnerRecord w;
    w.device_key = info.fingerprint.key();
    w.problem = qkv;
    w.variant = "split";
    w.timing.median_us = 9;
    w.sweep_id = sweep;
    store->store_winner(w);
  }
  const Resolver resolver(path, info, DispatchMode::tuned);
  const auto [variant, r] = resolver.resolve({"QKV projection", qkv});
  EXPECT_EQ(variant->name, "split");
  ASSERT_EQ(r.accuracy_failures.size(), 1u) << "packed had an accurate run: not named";
  EXPECT_EQ(r.accuracy_failures[0].variant, "packed_head_split");
  EXPECT_EQ(r.accuracy_failures[0].configs, 2);
  EXPECT_DOUBLE_EQ(r.accuracy_failures[0].max_abs_error, 6e-3);
  std::ostringstream out;
  print_resolutions({r}, out);
  EXPECT_NE(out.str().find("not packed_head_split: 2 configs failed the accuracy gate in the sweep (worst |error| "
                           "0.006, k[3,7]: got 0.506, want 0.5)"),
            std::string::npos)
      << out.str();
  // A nearest match carries the failures of the tuned shape it follows.
  Problem other = qkv;
  other.shape = Shape({{"B", 32}, {"S", 128}, {"H", 4}, {"hd", 32}});
  EXPECT_EQ(resolver.resolve({"QKV projection", other}).second.accuracy_failures.size(), 1u);
  // The library dispatch and the untuned table name none.
  EXPECT_TRUE(Resolver("", info, DispatchMode::tuned).resolve({"QKV projection", qkv}).second.accuracy_failures.empty());
}

TEST(RunnerCore, PrintsOneAlignedRowPerOperation) {
  test_support::TempDir dir;
  const Resolver resolver(tuned_db(dir), h200_info(), DispatchMode::tuned);
  const std::vector<OpResolution> rows = {resolver.resolve({"probabilities", softmax(4096, 1000)}).second,
                                          resolver.resolve({"p", softmax(4000, 1000)}).second};
  std::ostringstream out;
  print_resolutions(rows, out);
  const std::string text = out.str();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "op             problem                          variant                             resolved by");
  EXPECT_NE(text.find("probabilities  softmax/f32/rows=4096,cols=1000  warp_row_online{warps_per_block=4}  exact\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("p              softmax/f32/rows=4000,cols=1000  warp_row_online{warps_per_block=4}  nearest ("),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace shapetune
