// The measured ceilings of `shapetune ceilings` in a report: every one in the ceiling table, the
// FP32 FMA and per-dtype tensor-core rates as the horizontal roofs of the families they bound.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "db/report.hpp"
#include "db/store.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

const char* kDevice = "Fixture GPU|sm_90|132SM|140GiB";

using test_support::contains;


WinnerRecord winner(const std::string& primitive, DType dtype, Shape shape, double us, Cost cost) {
  WinnerRecord w;
  w.device_key = kDevice;
  w.problem = Problem{primitive, dtype, std::move(shape)};
  w.variant = "v";
  w.timing.median_us = us;
  w.timing.p10_us = w.timing.p90_us = us;
  w.timing.samples = 20;
  w.cost = cost;
  w.sweep_id = 1;
  w.git_sha = "abc1234";
  w.measured_at = "2026-12-01T00:00:00Z";
  return w;
}

TEST(ReportCeilings, EveryCeilingListedAndEachDtypeGetsItsOwnRoof) {
  test_support::TempDir tmp;
  const std::string db = tmp.file("ceilings.db");
  {
    auto store = Store::open(db);
    store->upsert_device(DeviceFingerprint{"Fixture GPU", 90, 132, 62914560, std::int64_t{140} << 30, "1", "2", "3", "4"});
    auto ceiling = [&](const char* name, double value, const char* unit) {
      store->store_ceiling({kDevice, name, value, unit, std::string("how ") + name, "abc1234", "2026-12-01T00:00:00Z"});
    };
    ceiling("dram_copy_best", 4.096e12, "B/s");
    ceiling("fp32_fma", 60e12, "FLOP/s");
    ceiling("tensor_f16", 800e12, "FLOP/s");
    ceiling("tensor_bf16", 900e12, "FLOP/s");  // larger, so a wrong pick would show
    ceiling("sgemm_fp32", 50e12, "FLOP/s");    // a reference, never a roof
    ceiling("launch_overhead_stream", 2.5e-6, "s");
    // f16 GEMM at 400 TFLOP/s: 50% of tensor_f16 (the copy roof at 1365 FLOP/B is far above).
    const double flops = 2.0 * 4096 * 4096 * 4096;
    store->store_winner(winner("gemm.nn", DType::f16, Shape({{"m", 4096}, {"n", 4096}, {"k", 4096}}),
                               flops / 400e12 * 1e6, Cost{3.0 * 4096 * 4096 * 2, flops}));
    store->store_winner(winner("softmax", DType::f32, Shape({{"rows", 1024}, {"cols", 1000}}), 4.0, Cost{8192000, 5120000}));
  }
  const fs::path out = tmp.path() / "report";
  ReportOptions options;  // no baseline kinds: every baseline's kind is unknown
  options.db_path = db;
  options.out_dir = out.string();
  options.gnuplot = "shapetune-no-such-gnuplot";
  write_report(options);
  const std::string md = test_support::read_file(out / "README.md");
  EXPECT_CONTAINS(md, "| `fp32_fma` | 60.0 TFLOP/s | how fp32_fma |\n");
  EXPECT_CONTAINS(md, "| `tensor_f16` | 800.0 TFLOP/s | how tensor_f16 |\n");
  EXPECT_CONTAINS(md, "| `tensor_bf16` | 900.0 TFLOP/s | how tensor_bf16 |\n");
  EXPECT_CONTAINS(md, "| `sgemm_fp32` | 50.0 TFLOP/s | how sgemm_fp32 |\n");
  EXPECT_CONTAINS(md, "| `launch_overhead_stream` | 2.50 us | how launch_overhead_stream |\n");
  EXPECT_CONTAINS(md, "| 400.0 TFLOP/s | 50.0% |");

  // Each compute roof flat from its ridge point (ceiling / 4.096 TB/s), in its dtype's colour.
  const std::string gemm = test_support::read_file(out / "plots" / "roofline_gemm.gp");
  EXPECT_CONTAINS(gemm, "(x >= 195.312 ? 800 : NaN) with lines lw 2 dt 2 lc rgb '#009e73' title 'tensor_f16 800.0 TFLOP/s'");
  EXPECT_FALSE(contains(gemm, "tensor_bf16")) << gemm;
  EXPECT_FALSE(contains(gemm, "fp32_fma")) << gemm;
  EXPECT_FALSE(contains(gemm, "sgemm")) << gemm;
  const std::string softmax = test_support::read_file(out / "plots" / "roofline_softmax.gp");
  EXPECT_CONTAINS(softmax, "(x >= 14.6484 ? 60 : NaN) with lines lw 2 dt 2 lc rgb '#000000' title 'fp32_fma 60.0 TFLOP/s'");
  // The copy roof stops at the highest ridge drawn (fp32_fma's here): it never climbs past the roofs.
  EXPECT_CONTAINS(softmax, "(x <= 14.6484 ? 4.096 * x : NaN) with lines");
  EXPECT_FALSE(contains(softmax, "tensor_")) << softmax;
}

}  // namespace
}  // namespace shapetune
