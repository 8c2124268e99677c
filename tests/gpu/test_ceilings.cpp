// `shapetune ceilings` on a GPU: every ceiling measured, stored with its unit, and (on an H200)
// within the range the hardware makes plausible; the whole command in well under a minute.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "cli/cli.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

TEST(CeilingsOnGpu, MeasuredStoredAndPlausible) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string db = dir.file("ceilings.db");
  std::ostringstream out, err;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run_cli({"ceilings", "--db", db}, out, err), 0) << out.str() << err.str();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << out.str() << "(" << seconds << " s)\n";

  const DeviceInfo device = use_device(0);
  auto store = Store::open(db, OpenMode::read_only);
  std::map<std::string, CeilingRecord> c;
  for (auto& r : store->ceilings(device.fingerprint.key())) c.emplace(r.name, r);
  const bool tensor_bf16_tf32 = device.limits.compute_capability >= 80;
  const std::map<std::string, std::string> expected_units = {
      {"dram_copy_memcpy", "B/s"}, {"dram_copy_kernel_vec16", "B/s"}, {"dram_copy_kernel_scalar", "B/s"},
      {"dram_copy_best", "B/s"},   {"fp32_fma", "FLOP/s"},            {"tensor_f16", "FLOP/s"},
      {"sgemm_fp32", "FLOP/s"},    {"launch_overhead_stream", "s"},   {"launch_overhead_graph", "s"},
      {"grid_barrier", "s"}};
  for (const auto& [name, unit] : expected_units) {
    ASSERT_TRUE(c.count(name)) << name << " not stored:\n" << out.str();
    EXPECT_EQ(c.at(name).unit, unit) << name;
    EXPECT_TRUE(std::isfinite(c.at(name).value) && c.at(name).value > 0) << name << " = " << c.at(name).value;
    EXPECT_FALSE(c.at(name).method.empty()) << name;
  }
  if (device.limits.compute_capability == 90) {
    // The cluster barriers: each size stored, each cheaper than the grid barrier over every SM.
    for (const int size : {2, 4, 8, 16}) {
      const std::string name = "cluster_barrier_" + std::to_string(size);
      ASSERT_TRUE(c.count(name)) << name << " not stored:\n" << out.str();
      EXPECT_EQ(c.at(name).unit, "s");
      EXPECT_GT(c.at(name).value, 0);
      EXPECT_LT(c.at(name).value, c.at("grid_barrier").value) << name;
    }
  }
  if (tensor_bf16_tf32) {
    for (const char* name : {"tensor_bf16", "tensor_tf32"}) EXPECT_TRUE(c.count(name)) << name << " not stored";
  }

  // Relations that hold on any GPU with tensor cores.
  auto v = [&](const std::string& name) { return c.at(name).value; };
  EXPECT_GT(v("tensor_f16"), v("fp32_fma")) << "tensor cores slower than CUDA-core FMAs?";
  EXPECT_LE(v("sgemm_fp32"), v("fp32_fma") * 1.05) << "SGEMM faster than the FMA ceiling: the FMA kernel is not saturating";
  EXPECT_GE(v("dram_copy_best"), v("dram_copy_memcpy"));

  if (device.fingerprint.name.find("H200") == std::string::npos) {
    std::cout << "not an H200 (" << device.fingerprint.name << "): only relations checked, not ranges\n";
    return;
  }
  auto in_range = [&](const std::string& name, double lo, double hi, double scale, const char* unit) {
    EXPECT_TRUE(v(name) >= lo * scale && v(name) <= hi * scale)
        << name << " = " << v(name) / scale << " " << unit << ", plausible on an H200: " << lo << ".." << hi;
  };
  in_range("dram_copy_best", 3, 5, 1e12, "TB/s");
  in_range("fp32_fma", 40, 70, 1e12, "TFLOP/s");  // datasheet ~67 at boost clock
  in_range("tensor_f16", 500, 1000, 1e12, "TFLOP/s");
  in_range("tensor_bf16", 500, 1000, 1e12, "TFLOP/s");
  in_range("tensor_tf32", 250, 500, 1e12, "TFLOP/s");
  in_range("launch_overhead_stream", 1, 20, 1e-6, "us");
  // Graph nodes skip most of the per-launch host work, so they may go below a microsecond.
  in_range("launch_overhead_graph", 0.1, 20, 1e-6, "us");
  EXPECT_LT(seconds, 30) << "`shapetune ceilings` should take well under 30 s on an H200";
}

}  // namespace
}  // namespace shapetune
