// `shapetune report`'s headline numbers: the summary (speedups named by what the baseline is,
// own variants against the libraries, problems without a baseline), baselines that could not
// run, roofs raised to a library's rate, and every % of roof above 100% explained.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "db/report.hpp"
#include "db/store.hpp"
#include "variants/catalogue.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

namespace fs = std::filesystem;

const char* kDevice = "NVIDIA H200|sm_90|132SM|140GiB";

BaselineKind kind_of(const std::string&, const std::string& variant) {
  if (variant.rfind("cublas", 0) == 0 || variant.rfind("cudnn", 0) == 0) return BaselineKind::library;
  return variant == "unfused" ? BaselineKind::own_chain : BaselineKind::unknown;
}

struct SummaryFixture : ::testing::Test {
  test_support::TempDir tmp;
  std::string db = tmp.file("summary.db");
  fs::path out = tmp.path() / "report";
  std::unique_ptr<Store> store = Store::open(db);
  std::int64_t sweep = 0;

  void SetUp() override {
    store->upsert_device(DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{140} << 30, "580.0", "13.0",
                                           "13.1.0", "9.14.0"});
    for (const auto& [name, value, unit] : {std::tuple<const char*, double, const char*>{"dram_copy_best", 4.096e12, "B/s"},
                                            {"fp32_fma", 60e12, "FLOP/s"},
                                            {"tensor_bf16", 800e12, "FLOP/s"}})
      store->store_ceiling({kDevice, name, value, unit, std::string("measured ") + name, "abc1234", "2026-12-01T00:00:00Z"});
    sweep = store->begin_sweep({kDevice, "shapetune sweep s.yaml --seed 3", "abc1234def", "s.yaml", "0123456789abcdef",
                                "l2=cold"});
  }

  void candidate(const Problem& p, const std::string& variant, bool baseline, double us, double ci = 0.002,
                 CandidateStatus status = CandidateStatus::ok, const std::string& reason = "") {
    CandidateRecord c;
    c.sweep_id = sweep;
    c.problem = p;
    c.variant = variant;
    c.baseline = baseline;
    c.status = status;
    c.reason = reason;
    if (status == CandidateStatus::ok) {
      TimingStats t;
      t.median_us = t.p10_us = t.p90_us = t.min_us = us;
      t.median_ci_rel = ci;
      t.samples = 20;
      c.timing = t;
    }
    store->record_candidate(c);
  }

  // The winner as the sweep stores it: the fastest candidate, with the fastest baseline that ran.
  void winner(const Problem& p, const std::string& variant, double us, Cost cost, const std::string& baseline = "",
              double baseline_us = 0) {
    WinnerRecord w;
    w.device_key = kDevice;
    w.problem = p;
    w.variant = variant;
    w.baseline = kind_of(p.primitive, variant) != BaselineKind::unknown;
    w.timing.median_us = w.timing.p10_us = w.timing.p90_us = us;
    w.timing.median_ci_rel = 0.002;
    w.timing.samples = 20;
    w.cost = cost;
    w.best_baseline = baseline;
    w.baseline_us = baseline_us;
    w.speedup_vs_baseline = baseline.empty() ? 0 : baseline_us / us;
    w.sweep_id = sweep;
    w.git_sha = "abc1234";
    w.measured_at = "2026-12-01T00:00:00Z";
    store->store_winner(w);
    store->record_problem(sweep, p.key(), "done", "");
  }

  std::string write() {
    store.reset();
    ReportOptions o;
    o.db_path = db;
    o.out_dir = out.string();
    o.gnuplot = "shapetune-no-such-gnuplot";
    o.baseline_kind = kind_of;
    o.generator = "shapetune test";
    write_report(o);
    return test_support::read_file(out / "README.md");
  }
};

const Problem kGemm{"gemm.nn", DType::bf16, Shape({{"m", 4096}, {"n", 4096}, {"k", 4096}})};
const Problem kSoftmax{"softmax", DType::f32, Shape({{"rows", 1024}, {"cols", 1000}})};
const Problem kXent{"softmax_xent", DType::f32, Shape({{"rows", 8192}, {"classes", 32000}})};
const Problem kGelu{"activation.gelu", DType::f32, Shape({{"n", 1048576}})};
const Problem kLayernorm{"layernorm", DType::f32, Shape({{"rows", 4096}, {"cols", 4096}})};

TEST_F(SummaryFixture, HeadlinesNameTheirBaselinesAndCountEveryProblem) {
  const double gemm_flops = 2.0 * 4096 * 4096 * 4096;
  // cuBLASLt beats the own wgmma kernel (and the 800 TFLOP/s ceiling: 859 TFLOP/s); cuBLAS refused.
  candidate(kGemm, "wgmma", false, 200);
  candidate(kGemm, "cublaslt", true, 160);
  candidate(kGemm, "cublas", true, 0, 0, CandidateStatus::unsupported, "bf16 is cublaslt's");
  winner(kGemm, "cublaslt", 160, Cost{3.0 * 4096 * 4096 * 2, gemm_flops}, "cublaslt", 160);
  // Own softmax beats cuDNN by 1.25x, at half the copy roof.
  candidate(kSoftmax, "register_row", false, 4);
  candidate(kSoftmax, "cudnn", true, 5);
  winner(kSoftmax, "register_row", 4, Cost{8192000, 5120000}, "cudnn", 5);
  // A fused primitive against its unfused chain: not a library speedup.
  candidate(kXent, "fused", false, 100);
  candidate(kXent, "unfused", true, 300);
  winner(kXent, "fused", 100, Cost{2.0e8, 1.0e8}, "unfused", 300);
  // The only baseline the matrix asked for could not run; the winner streams above the copy roof.
  candidate(kGelu, "vec", false, 2);
  candidate(kGelu, "cudnn", true, 0, 0, CandidateStatus::unsupported, "cuDNN has no exact GELU forward here");
  winner(kGelu, "vec", 2, Cost{8.4e6, 8.4e6});
  // Own and library within noise.
  candidate(kLayernorm, "register_row", false, 40, 0.01);
  candidate(kLayernorm, "cudnn", true, 40.2, 0.01);
  winner(kLayernorm, "register_row", 40, Cost{134217728, 50000000}, "cudnn", 40.2);

  const std::string md = write();
  EXPECT_CONTAINS(md, "by shapetune test from `" + db + "` (schema v6): 5 winners, 3 ceilings, 1 sweep.\n");
  EXPECT_CONTAINS(md, "## Summary\n\n- **5 problems** in 5 families, on NVIDIA H200.\n");
  // (1.00 x 1.25 x 1.005)^(1/3) = 1.08; own vs library: 0.8, 1.25, 1.005 -> 1.00.
  EXPECT_CONTAINS(md, "- **Against the libraries** (cuBLAS, cuBLASLt, cuDNN; 3 problems): the dispatch table is a geomean "
                      "**1.08x** faster than the best library.");
  EXPECT_CONTAINS(md, "shapetune's own best variant against the best library: **1 faster, 1 same within noise, 1 slower**; "
                      "geomean 1.00x.\n");
  EXPECT_CONTAINS(md, "- **Against shapetune's own unfused chains** (the reference point of fused primitives that no "
                      "library offers; not a library speedup), 1 problem: geomean 3.00x.\n");
  EXPECT_CONTAINS(md, "- **No baseline**: 1 problem, 1 of them because every baseline the sweep tried failed to run (see "
                      "\"Baselines that could not run\"): `activation.gelu/f32/n=1048576`\n");
  EXPECT_CONTAINS(md, "1 above 100%, each explained under its table.\n");
  // Worst first: own wgmma 1.25x slower than cuBLASLt.
  EXPECT_CONTAINS(md, "| own time / library time |\n|---|---|---|---|---|---|\n"
                      "| `gemm.nn/bf16/m=4096,n=4096,k=4096` | `wgmma` | 200.0 us | `cublaslt` | 160.0 us | 1.25x |\n"
                      "| `layernorm/f32/rows=4096,cols=4096` | `register_row` | 40.00 us | `cudnn` | 40.20 us | 1.00x |\n"
                      "| `softmax/f32/rows=1024,cols=1000` | `register_row` | 4.00 us | `cudnn` | 5.00 us | 0.80x |\n");
  // Provenance names the sweep, its command (with the seed), sha and shape file.
  EXPECT_CONTAINS(md, "| #1 * | ");
  EXPECT_CONTAINS(md, "| `shapetune sweep s.yaml --seed 3` | `abc1234def` | `s.yaml` sha256 `0123456789ab` | `l2=cold` |\n");
  // Baseline kinds in the winner tables.
  EXPECT_CONTAINS(md, "| cudnn 5.00 us (library) | 1.25x |");
  EXPECT_CONTAINS(md, "| unfused 300.0 us (unfused chain) | 3.00x |");
  EXPECT_CONTAINS(md, "| `vec` | 2.00 us | 4.20 TB/s | 102.5% * | none ran (see below) | - |");
  // The roof raised to cuBLASLt's rate, so the library stands at 100%, not 107%.
  EXPECT_CONTAINS(md, "- `tensor_bf16`: cublaslt on gemm.nn/bf16/m=4096,n=4096,k=4096 (859.0 TFLOP/s) ran faster than "
                      "the ceiling's own kernel, so the roof used is 859.0 TFLOP/s.\n");
  EXPECT_CONTAINS(md, "| `cublaslt` | 160.0 us | 859.0 TFLOP/s | 100.0% | cublaslt 160.0 us (library) | 1.00x |");
  EXPECT_CONTAINS(md, "\\* above `dram_copy_best` (4.10 TB/s, measured dram_copy_best): a roof is the best kernel "
                      "measured on the device, not the hardware's limit; ");
  EXPECT_CONTAINS(md, "streams a little faster: `activation.gelu/f32/n=1048576`.\n");
  // Both refused baselines are listed, with cuDNN's reason.
  EXPECT_CONTAINS(md, "## Baselines that could not run\n\n2 problems had a baseline candidate");
  EXPECT_CONTAINS(md, "| `activation.gelu/f32/n=1048576` | `cudnn` | unsupported | cuDNN has no exact GELU forward here |\n");
  EXPECT_CONTAINS(md, "| `gemm.nn/bf16/m=4096,n=4096,k=4096` | `cublas` | unsupported | bf16 is cublaslt's |\n");
}

TEST_F(SummaryFixture, WithoutLibrariesTheSummarySaysSo) {
  candidate(kXent, "fused", false, 100);
  candidate(kXent, "unfused", true, 300);
  winner(kXent, "fused", 100, Cost{2.0e8, 1.0e8}, "unfused", 300);
  const std::string md = write();
  EXPECT_CONTAINS(md, "- **Against the libraries**: no problem here has a library baseline that ran.\n");
  EXPECT_FALSE(test_support::contains(md, "### Worst cases")) << md;
  EXPECT_FALSE(test_support::contains(md, "## Baselines that could not run")) << md;
}

// The catalogue is what the CLI asks for a baseline's kind: every cuBLAS, cuBLASLt and cuDNN
// baseline is a library, shapetune's own chains (unfused, split) are not, and only baselines are.
TEST(BaselineKinds, CatalogueMarksEveryLibraryAndOnlyThem) {
  int libraries = 0, chains = 0;
  for (const Primitive* p : catalogue().primitives())
    for (const Variant* v : catalogue().variants(p->name)) {
      const bool vendor = v->name.rfind("cublas", 0) == 0 || v->name.rfind("cudnn", 0) == 0;
      EXPECT_EQ(v->library, vendor && v->baseline) << p->name << "/" << v->name;
      if (vendor) {
        EXPECT_TRUE(v->baseline) << p->name << "/" << v->name << " calls a library but is not a baseline";
      }
      libraries += v->library;
      chains += v->baseline && !v->library;
    }
  EXPECT_GE(libraries, 10);
  EXPECT_GE(chains, 3) << "softmax_xent's and residual_layernorm's unfused chains, qkv_projection's split";
}

}  // namespace
}  // namespace shapetune
