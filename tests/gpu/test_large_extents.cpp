// Tensors just past 2^31 elements, as TechJam case 14 has them (its LayerNorms, GEMM outputs and
// attention tensors hold 3.3e9 elements each): every variant of layernorm, residual_layernorm,
// activation_backward.relu, attention.causal.split, gemm_bias.nt and qkv_projection, in every
// config it supports, at a shape whose largest tensor is a little over 2^31 elements of f16 (4 GiB;
// a test holds at most ~18 GiB of device memory at once, the QKV projection 43 GiB with its
// library variants' fp32 staging, and each takes seconds on an H200). Skipped where the device has
// too little free memory.
//
// How a 32-bit offset would show: the data past element 2^31 (the rows or heads from there on,
// and the one straddling it) differ from those before it, so a read that wrapped would read other
// values; every output is poisoned (NaN) before each launch, so a write that wrapped leaves poison
// where the element should be. Only those rows or heads and a few ordinary ones are read back and
// compared with the float64 reference (through each primitive's own reference, on a one-row or
// one-head problem).
#include <gtest/gtest.h>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <tuple>

#include "baselines/library_handles.hpp"
#include "harness/cuda_check.hpp"
#include "harness/device.hpp"
#include "harness/device_buffer.hpp"
#include "support/test_support.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

constexpr std::int64_t k2To31 = std::int64_t{1} << 31;
constexpr std::size_t kHalf = sizeof(__half);

double half_value(unsigned short bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

std::vector<__half> to_half(const std::vector<double>& values) {
  std::vector<__half> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = __float2half_rn(static_cast<float>(values[i]));
  return out;
}

// Values drawn uniformly from [low, high), as f16 holds them.
std::vector<double> draw(std::size_t count, double low, double high, std::mt19937_64& rng) {
  std::vector<double> out(count);
  for (double& v : out) v = __half2float(__float2half_rn(static_cast<float>(std::uniform_real_distribution<double>(low, high)(rng))));
  return out;
}

class LargeExtents : public ::testing::Test {
 protected:
  void SetUp() override {
    SHAPETUNE_REQUIRE_GPU();
    device_ = use_device(0);
    SHAPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    libraries_.reset();  // its handles are bound to the stream
    buffers_.clear();
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Skips the test unless `bytes` (and a GiB to spare) are free on the device.
  bool fits(std::size_t bytes) {
    std::size_t free = 0, total = 0;
    SHAPETUNE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free > bytes + (std::size_t{1} << 30);
  }

  void* alloc(std::size_t bytes) { return buffers_.emplace_back(bytes).get(); }

  void upload(void* dst, std::size_t offset_elements, const std::vector<double>& values) {
    const std::vector<__half> h = to_half(values);
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(static_cast<__half*>(dst) + offset_elements, h.data(), h.size() * kHalf,
                                    cudaMemcpyHostToDevice));
  }

  // `units` copies of the first unit_elements elements of `base` (already uploaded), by doubling.
  void replicate(void* base, std::size_t unit_elements, std::size_t units) {
    auto* p = static_cast<__half*>(base);
    for (std::size_t done = 1; done < units;) {
      const std::size_t now = std::min(done, units - done);
      SHAPETUNE_CUDA_CHECK(cudaMemcpy(p + done * unit_elements, p, now * unit_elements * kHalf, cudaMemcpyDeviceToDevice));
      done += now;
    }
  }

  // Elements [offset, offset + count) of an f16 tensor, as double.
  std::vector<double> download(const void* src, std::size_t offset, std::size_t count) {
    std::vector<__half> h(count);
    SHAPETUNE_CUDA_CHECK(cudaMemcpy(h.data(), static_cast<const __half*>(src) + offset, count * kHalf, cudaMemcpyDeviceToHost));
    std::vector<double> out(count);
    for (std::size_t i = 0; i < count; ++i) out[i] = __half2float(h[i]);
    return out;
  }

  void poison(void* p, std::size_t bytes) { SHAPETUNE_CUDA_CHECK(cudaMemsetAsync(p, 0xff, bytes, stream_)); }

  // Every config of every variant of `problem` that supports it here: poison(), the launch, then
  // check(name). A launch refused at run time (a library's NOT_SUPPORTED) is reported, not failed.
  // Returns the variants that ran at least once.
  int run_every_config(const Problem& problem, std::vector<void*> tensors, std::vector<double> scalars,
                       const std::function<void()>& poison_outputs, const std::function<void(const std::string&)>& check) {
    // The fills went through the legacy stream (device-to-device copies and memsets do not wait
    // for the host): done before anything on stream_ reads them.
    SHAPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
    int variants_run = 0;
    for (const Variant* v : catalogue().variants(problem.primitive)) {
      std::vector<Config> configs = v->params.enumerate();
      if (configs.empty()) configs = {v->default_config};
      bool ran = false;
      for (const Config& config : configs) {
        if (!v->supports(problem, config, device_.limits).ok) continue;
        DeviceBuffer workspace;
        if (v->workspace_bytes)
          if (const std::size_t bytes = v->workspace_bytes(problem, config)) workspace = DeviceBuffer(bytes);
        poison_outputs();
        const LaunchArgs args{problem, config, tensors, stream_, *libraries_, workspace.get(), workspace.bytes(),
                              scalars};
        const std::string name = problem.key() + " " + v->name + "{" + config.key() + "}";
        const LaunchStatus status = v->launch(args);
        if (!status.ok && status.unsupported) {
          std::cout << "[ refused  ] " << name << ": " << status.message << "\n";
          continue;
        }
        EXPECT_TRUE(status.ok) << name << ": " << status.message;
        if (!status.ok) continue;
        SHAPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
        check(name);
        ran = true;
      }
      if (ran) ++variants_run;
    }
    return variants_run;
  }

  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LibraryHandles> libraries_ = std::make_unique<LibraryHandles>();
  std::vector<DeviceBuffer> buffers_;
};

// The mismatches of `got` against `expected` under the rule (|d| <= atol or <= rtol |ref|, finite),
// the first few of them described.
void expect_close(const std::vector<double>& got, const std::vector<double>& expected, Tolerance tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  int mismatches = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - expected[i]);
    if (std::isfinite(got[i]) && (d <= tol.atol || d <= tol.rtol * std::abs(expected[i]))) continue;
    if (mismatches++ < 3) first << " [" << i << "] " << got[i] << " vs " << expected[i] << ";";
  }
  EXPECT_EQ(mismatches, 0) << what << ":" << first.str();
}

// ---- LayerNorm and the residual step: rows x 1024, rows * 1024 just past 2^31 ------------------

// Row 2^21 starts at element 2^31 (byte 2^32). Rows 0, 2^21 - 1, 2^21, 2^21 + 1 and the last each
// have their own values; every other row repeats one pattern.
constexpr std::int64_t kCols = 1024;
constexpr std::int64_t kRows = (std::int64_t{1} << 21) + 3;
const std::vector<std::int64_t> kOwnRows = {0, (1 << 21) - 1, 1 << 21, (1 << 21) + 1, kRows - 1};
const std::vector<std::int64_t> kCheckedRows = {0, 1, (1 << 21) - 2, (1 << 21) - 1, 1 << 21, (1 << 21) + 1, kRows - 1};

TEST_F(LargeExtents, LayerNormPast2To31Elements) {
  static_assert(kRows * kCols > k2To31);
  const std::size_t bytes = static_cast<std::size_t>(kRows * kCols) * kHalf;
  if (!fits(2 * bytes)) GTEST_SKIP() << "needs " << 2 * bytes / (1 << 30) << " GiB free";
  std::mt19937_64 rng(14);
  const Problem problem{"layernorm", DType::f16, Shape({{"rows", kRows}, {"cols", kCols}})};
  void* x = alloc(bytes);
  void* gamma = alloc(kCols * kHalf);
  void* beta = alloc(kCols * kHalf);
  void* y = alloc(bytes);
  std::map<std::int64_t, std::vector<double>> x_rows;
  const std::vector<double> pattern = draw(kCols, -1, 3, rng);
  upload(x, 0, pattern);
  replicate(x, kCols, kRows);
  for (std::int64_t r : kCheckedRows) x_rows[r] = pattern;
  for (std::int64_t r : kOwnRows) upload(x, r * kCols, x_rows[r] = draw(kCols, -1, 3, rng));
  const std::vector<double> g = draw(kCols, 0.5, 1.5, rng), b = draw(kCols, -0.5, 0.5, rng);
  upload(gamma, 0, g);
  upload(beta, 0, b);

  const Primitive& primitive = *catalogue().find_primitive("layernorm");
  const Problem one_row{"layernorm", DType::f16, Shape({{"rows", 1}, {"cols", kCols}})};
  const std::vector<double> scalars = default_scalars(primitive);
  std::map<std::int64_t, std::vector<double>> expected;
  for (std::int64_t r : kCheckedRows) {
    HostTensors host{x_rows[r], g, b, std::vector<double>(kCols)};
    primitive.reference(one_row, scalars, host);
    expected[r] = host[3];
  }
  const int ran = run_every_config(problem, {x, gamma, beta, y}, scalars, [&] { poison(y, bytes); },
                                   [&](const std::string& name) {
                                     for (std::int64_t r : kCheckedRows)
                                       expect_close(download(y, r * kCols, kCols), expected[r],
                                                    tolerance_for(primitive, problem), name + " row " + std::to_string(r));
                                   });
  EXPECT_GE(ran, 5) << "the five hand-written variants run rows x 1024 in f16 (cuDNN may refuse at run time)";
}

TEST_F(LargeExtents, ResidualLayerNormPast2To31Elements) {
  const std::size_t bytes = static_cast<std::size_t>(kRows * kCols) * kHalf;
  if (!fits(4 * bytes)) GTEST_SKIP() << "needs " << 4 * bytes / (1 << 30) << " GiB free";
  std::mt19937_64 rng(1414);
  const Problem problem{"residual_layernorm", DType::f16, Shape({{"rows", kRows}, {"cols", kCols}})};
  void* x = alloc(bytes);
  void* r = alloc(bytes);
  void* gamma = alloc(kCols * kHalf);
  void* beta = alloc(kCols * kHalf);
  void* h = alloc(bytes);
  void* y = alloc(bytes);
  std::map<std::int64_t, std::vector<double>> x_rows, r_rows;
  for (auto [tensor, rows, low, high] : {std::tuple{x, &x_rows, -1.0, 3.0}, std::tuple{r, &r_rows, -1.0, 1.0}}) {
    const std::vector<double> pattern = draw(kCols, low, high, rng);
    upload(tensor, 0, pattern);
    replicate(tensor, kCols, kRows);
    for (std::int64_t row : kCheckedRows) (*rows)[row] = pattern;
    for (std::int64_t row : kOwnRows) upload(tensor, row * kCols, (*rows)[row] = draw(kCols, low, high, rng));
  }
  const std::vector<double> g = draw(kCols, 0.5, 1.5, rng), b = draw(kCols, -0.5, 0.5, rng);
  upload(gamma, 0, g);
  upload(beta, 0, b);

  const Primitive& primitive = *catalogue().find_primitive("residual_layernorm");
  const Problem one_row{"residual_layernorm", DType::f16, Shape({{"rows", 1}, {"cols", kCols}})};
  const std::vector<double> scalars = default_scalars(primitive);
  std::map<std::int64_t, std::pair<std::vector<double>, std::vector<double>>> expected;  // h, y
  for (std::int64_t row : kCheckedRows) {
    HostTensors host{x_rows[row], r_rows[row], g, b, std::vector<double>(kCols), std::vector<double>(kCols)};
    primitive.reference(one_row, scalars, host);
    expected[row] = {host[4], host[5]};
  }
  const Tolerance tol = tolerance_for(primitive, problem);
  const int ran = run_every_config(
      problem, {x, r, gamma, beta, h, y}, scalars, [&] {
        poison(h, bytes);
        poison(y, bytes);
      },
      [&](const std::string& name) {
        for (std::int64_t row : kCheckedRows) {
          expect_close(download(h, row * kCols, kCols), expected[row].first, tol, name + " h row " + std::to_string(row));
          expect_close(download(y, row * kCols, kCols), expected[row].second, tol, name + " y row " + std::to_string(row));
        }
      });
  EXPECT_GE(ran, 4) << "unfused, fused_vec, fused_register, fused_pipelined (and fused_ring on sm_90)";
}

// ---- the padded output's mask product: activation_backward.relu over n just past 2^31 ----------

TEST_F(LargeExtents, ReluBackwardPast2To31Elements) {
  constexpr std::int64_t n = k2To31 + 4099;  // an odd tail of scalar elements past the packs
  const std::size_t bytes = static_cast<std::size_t>(n) * kHalf;
  if (!fits(3 * bytes)) GTEST_SKIP() << "needs " << 3 * bytes / (1 << 30) << " GiB free";
  void* x = alloc(bytes);
  void* dy = alloc(bytes);
  void* dx = alloc(bytes);
  // x: 0x3c3c (1.06) everywhere but [2^31 + 1000, 2^31 + 2000), 0xbcbc (-1.06); dy: 0x4040 (2.125)
  // but [2^31 + 1500, 2^31 + 2500), 0x4242 (3.13). So dx is dy or 0 by region.
  SHAPETUNE_CUDA_CHECK(cudaMemset(x, 0x3c, bytes));
  SHAPETUNE_CUDA_CHECK(cudaMemset(static_cast<__half*>(x) + k2To31 + 1000, 0xbc, 1000 * kHalf));
  SHAPETUNE_CUDA_CHECK(cudaMemset(dy, 0x40, bytes));
  SHAPETUNE_CUDA_CHECK(cudaMemset(static_cast<__half*>(dy) + k2To31 + 1500, 0x42, 1000 * kHalf));
  const double two = half_value(0x4040), three = half_value(0x4242);
  ASSERT_GT(half_value(0x3c3c), 0);
  ASSERT_LT(half_value(0xbcbc), 0);
  auto expected_at = [&](std::int64_t i) {
    const bool negative = i >= k2To31 + 1000 && i < k2To31 + 2000;
    const double d = i >= k2To31 + 1500 && i < k2To31 + 2500 ? three : two;
    return negative ? 0.0 : d;
  };
  const std::int64_t window = k2To31 - 4096;  // to n: across 2^31 and the tail
  std::vector<double> head_expected(4096), window_expected(static_cast<std::size_t>(n - window));
  for (std::int64_t i = 0; i < 4096; ++i) head_expected[static_cast<std::size_t>(i)] = expected_at(i);
  for (std::int64_t i = window; i < n; ++i) window_expected[static_cast<std::size_t>(i - window)] = expected_at(i);

  const Problem problem{"activation_backward.relu", DType::f16, Shape({{"n", n}})};
  const int ran = run_every_config(problem, {x, dy, dx}, {}, [&] { poison(dx, bytes); }, [&](const std::string& name) {
    expect_close(download(dx, 0, 4096), head_expected, {0, 0}, name + " first 4096");
    expect_close(download(dx, static_cast<std::size_t>(window), window_expected.size()), window_expected, {0, 0},
                 name + " from 2^31 - 4096 to the end");
  });
  EXPECT_EQ(ran, 2) << "scalar and vec; cuDNN refuses n past 2^31 - 1";
}

// ---- attention: Q, K, V and O of just past 2^31 elements each --------------------------------

// B 32, H 1024, S 1040, hd 64: 2.18e9 elements a tensor. Head g = b H + h of Q, K and V is S hd
// contiguous elements; head 32263 straddles element 2^31. Heads 0, 32263, 32264 and the last have
// their own values, every other head repeats one.
TEST_F(LargeExtents, CausalAttentionPast2To31ElementsPerTensor) {
  constexpr std::int64_t B = 32, H = 1024, S = 1040, hd = 64, head = S * hd;
  static_assert(B * H * head > k2To31);
  constexpr std::int64_t straddling = k2To31 / head;
  static_assert(straddling * head < k2To31 && (straddling + 1) * head > k2To31);
  const std::size_t bytes = static_cast<std::size_t>(B * H * head) * kHalf;
  if (!fits(4 * bytes)) GTEST_SKIP() << "needs " << 4 * bytes / (1 << 30) << " GiB free";
  const std::vector<std::int64_t> own = {0, straddling, straddling + 1, B * H - 1};
  const std::vector<std::int64_t> checked = {0, 1, straddling - 1, straddling, straddling + 1, B * H - 1};
  std::mt19937_64 rng(100000);
  std::map<std::int64_t, std::array<std::vector<double>, 3>> qkv;  // of the checked heads
  void* tensors[3];
  for (int j = 0; j < 3; ++j) {
    tensors[j] = alloc(bytes);
    const std::vector<double> pattern = draw(static_cast<std::size_t>(head), -2, 2, rng);
    upload(tensors[j], 0, pattern);
    replicate(tensors[j], static_cast<std::size_t>(head), static_cast<std::size_t>(B * H));
    for (std::int64_t g : checked) qkv[g][j] = pattern;
    for (std::int64_t g : own) upload(tensors[j], static_cast<std::size_t>(g * head), qkv[g][j] = draw(static_cast<std::size_t>(head), -2, 2, rng));
  }
  void* o = alloc(bytes);

  const Primitive& primitive = *catalogue().find_primitive("attention.causal.split");
  const Problem problem{"attention.causal.split", DType::f16, Shape({{"B", B}, {"H", H}, {"S", S}, {"hd", hd}})};
  const Problem one_head{"attention.causal.split", DType::f16, Shape({{"B", 1}, {"H", 1}, {"S", S}, {"hd", hd}})};
  std::map<std::int64_t, std::vector<double>> expected;
  for (std::int64_t g : checked) {
    HostTensors host{qkv[g][0], qkv[g][1], qkv[g][2], std::vector<double>(static_cast<std::size_t>(head))};
    primitive.reference(one_head, {}, host);
    expected[g] = host[3];
  }
  // O is [B, S, H, hd]: head (b, h) is S rows of hd, H hd elements apart.
  auto read_head = [&](std::int64_t g) {
    const std::int64_t b = g / H, h = g % H;
    std::vector<__half> rows(static_cast<std::size_t>(head));
    SHAPETUNE_CUDA_CHECK(cudaMemcpy2D(rows.data(), hd * kHalf, static_cast<const __half*>(o) + (b * S * H + h) * hd,
                                      H * hd * kHalf, hd * kHalf, S, cudaMemcpyDeviceToHost));
    std::vector<double> out(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) out[i] = __half2float(rows[i]);
    return out;
  };
  const int ran = run_every_config(problem, {tensors[0], tensors[1], tensors[2], o}, {}, [&] { poison(o, bytes); },
                                   [&](const std::string& name) {
                                     for (std::int64_t g : checked)
                                       expect_close(read_head(g), expected[g], tolerance_for(primitive, problem),
                                                    name + " head " + std::to_string(g));
                                   });
  EXPECT_GE(ran, 1) << "flash_mma (sm_80+); flash_wgmma and cuDNN SDPA on sm_90; naive's scores do not fit";
}

// ---- GEMM with a bias: C of just past 2^31 elements ------------------------------------------

// m = 2^21 + 5, n = 1024, k = 64, nt: row 2^21 of C starts at element 2^31. A's rows 0, 2^21 - 1,
// 2^21, 2^21 + 1 and the last have their own values, every other row repeats one.
TEST_F(LargeExtents, GemmBiasPast2To31Outputs) {
  constexpr std::int64_t m = (std::int64_t{1} << 21) + 5, n = 1024, k = 64;
  static_assert(m * n > k2To31);
  const std::size_t c_bytes = static_cast<std::size_t>(m * n) * kHalf;
  if (!fits(c_bytes + static_cast<std::size_t>(m * k) * kHalf)) GTEST_SKIP() << "needs " << c_bytes / (1 << 30) << " GiB free";
  const std::vector<std::int64_t> own = {0, (1 << 21) - 1, 1 << 21, (1 << 21) + 1, m - 1};
  const std::vector<std::int64_t> checked = {0, 1, (1 << 21) - 1, 1 << 21, (1 << 21) + 1, m - 1};
  std::mt19937_64 rng(3200000);
  void* a = alloc(static_cast<std::size_t>(m * k) * kHalf);
  void* b = alloc(n * k * kHalf);
  void* bias = alloc(n * kHalf);
  void* c = alloc(c_bytes);
  std::map<std::int64_t, std::vector<double>> a_rows;
  const std::vector<double> pattern = draw(k, -1, 1, rng);
  upload(a, 0, pattern);
  replicate(a, k, m);
  for (std::int64_t r : checked) a_rows[r] = pattern;
  for (std::int64_t r : own) upload(a, static_cast<std::size_t>(r * k), a_rows[r] = draw(k, -1, 1, rng));
  const std::vector<double> b_values = draw(n * k, -1, 1, rng), bias_values = draw(n, -1, 1, rng);
  upload(b, 0, b_values);
  upload(bias, 0, bias_values);

  const Primitive& primitive = *catalogue().find_primitive("gemm_bias.nt");
  const Problem problem{"gemm_bias.nt", DType::f16, Shape({{"m", m}, {"n", n}, {"k", k}})};
  const Problem one_row{"gemm_bias.nt", DType::f16, Shape({{"m", 1}, {"n", n}, {"k", k}})};
  const std::vector<double> scalars = default_scalars(primitive);  // alpha 1, beta 0: C is not read
  std::map<std::int64_t, std::vector<double>> expected;
  for (std::int64_t r : checked) {
    HostTensors host{a_rows[r], b_values, bias_values, std::vector<double>(n)};
    primitive.reference(one_row, scalars, host);
    expected[r] = host[3];
  }
  const int ran = run_every_config(problem, {a, b, bias, c}, scalars, [&] { poison(c, c_bytes); },
                                   [&](const std::string& name) {
                                     for (std::int64_t r : checked)
                                       expect_close(download(c, static_cast<std::size_t>(r * n), n), expected[r],
                                                    tolerance_for(primitive, problem), name + " row " + std::to_string(r));
                                   });
  EXPECT_GE(ran, 7) << "the CUDA-core ladder but split_k, and mma_sync (wgmma too on sm_90)";
}

// ---- the QKV projection: Q, K and V of just past 2^31 elements each -------------------------

// B 2, S 2^20 + 5, H 16, hd 64 (D 1024): Q, K and V [B, H, S, hd] hold 2.15e9 elements each, and
// head (1, 15) straddles element 2^31 from position 1048566 on. x's rows (b S + s) at (1, 1048566),
// (1, 1048567), the first and the last have their own values, every other row repeats one. The
// library variants' fp32 staging takes 26 GiB more (43 GiB in all).
TEST_F(LargeExtents, QkvProjectionPast2To31ElementsPerOutput) {
  constexpr std::int64_t B = 2, S = (std::int64_t{1} << 20) + 5, H = 16, hd = 64, D = H * hd, rows = B * S;
  static_assert(rows * D > k2To31);
  const std::size_t bytes = static_cast<std::size_t>(rows * D) * kHalf;
  const std::size_t staging = static_cast<std::size_t>(rows * 3 * D) * sizeof(float);
  if (!fits(4 * bytes + staging)) GTEST_SKIP() << "needs " << (4 * bytes + staging) / (1 << 30) << " GiB free";
  constexpr std::int64_t crossing = (k2To31 - (B * H - 1) * S * hd) / hd;  // position of element 2^31 in the last head
  static_assert(crossing > 0 && crossing < S);
  const std::vector<std::int64_t> own = {0, S + crossing, S + crossing + 1, rows - 1};
  const std::vector<std::int64_t> checked = {0, 1, S + crossing - 1, S + crossing, S + crossing + 1, rows - 1};
  std::mt19937_64 rng(9800000000);
  void* x = alloc(bytes);
  void* w = alloc(3 * D * D * kHalf);
  void* bias = alloc(3 * D * kHalf);
  void* out[3] = {alloc(bytes), alloc(bytes), alloc(bytes)};
  std::map<std::int64_t, std::vector<double>> x_rows;
  const std::vector<double> pattern = draw(D, -1, 1, rng);
  upload(x, 0, pattern);
  replicate(x, D, rows);
  for (std::int64_t r : checked) x_rows[r] = pattern;
  for (std::int64_t r : own) upload(x, static_cast<std::size_t>(r * D), x_rows[r] = draw(D, -1, 1, rng));
  const std::vector<double> w_values = draw(3 * D * D, -1, 1, rng), bias_values = draw(3 * D, -1, 1, rng);
  upload(w, 0, w_values);
  upload(bias, 0, bias_values);

  const Primitive& primitive = *catalogue().find_primitive("qkv_projection");
  const Problem problem{"qkv_projection", DType::f16, Shape({{"B", B}, {"S", S}, {"H", H}, {"hd", hd}})};
  const Problem one_row{"qkv_projection", DType::f16, Shape({{"B", 1}, {"S", 1}, {"H", H}, {"hd", hd}})};
  std::map<std::int64_t, std::array<std::vector<double>, 3>> expected;  // each [H, hd]
  for (std::int64_t r : checked) {
    HostTensors host{x_rows[r], w_values, bias_values, std::vector<double>(D), std::vector<double>(D),
                     std::vector<double>(D)};
    primitive.reference(one_row, {}, host);
    expected[r] = {host[3], host[4], host[5]};
  }
  // Row (b, s) of Q, K or V: hd elements per head, S hd apart, from ((b H) S + s) hd.
  auto read_row = [&](const void* tensor, std::int64_t row) {
    const std::int64_t b = row / S, s = row % S;
    std::vector<__half> values(static_cast<std::size_t>(D));
    SHAPETUNE_CUDA_CHECK(cudaMemcpy2D(values.data(), hd * kHalf, static_cast<const __half*>(tensor) + (b * H * S + s) * hd,
                                      S * hd * kHalf, hd * kHalf, H, cudaMemcpyDeviceToHost));
    std::vector<double> row_values(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) row_values[i] = __half2float(values[i]);
    return row_values;
  };
  const int ran = run_every_config(problem, {x, w, bias, out[0], out[1], out[2]}, {},
                                   [&] {
                                     for (void* o : out) poison(o, bytes);
                                   },
                                   [&](const std::string& name) {
                                     for (std::int64_t r : checked)
                                       for (int j = 0; j < 3; ++j)
                                         expect_close(read_row(out[j], r), expected[r][static_cast<std::size_t>(j)],
                                                      tolerance_for(primitive, problem),
                                                      name + " " + "qkv"[j] + " row " + std::to_string(r));
                                   });
  EXPECT_EQ(ran, device_.limits.compute_capability == 90 ? 4 : 3)
      << "split, packed (cuBLAS and the head-split pass), packed_head_split (and wgmma_head_split on sm_90)";
}

}  // namespace
}  // namespace shapetune
