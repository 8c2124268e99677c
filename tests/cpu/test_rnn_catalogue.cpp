// The recurrent family's host side: the float64 references against hand-computed steps and
// limiting cases, the tensors and cost model, the tolerance's growth, and what persistent
// refuses before any launch.
#include <gtest/gtest.h>

#include <cmath>

#include "baselines/reference.hpp"
#include "kernels/rnn/rnn.cuh"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double identity(double v) { return v; }

TEST(RnnReference, OneLstmStepByHand) {
  // T = N = H = 1, D = 2: gates = W_ih x + b_ih + W_hh h0 + b_hh, in the order i, f, g, o.
  const double x[2] = {0.5, -1.0}, h0 = 0.3, c0 = -0.2;
  const double w_ih[8] = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8};
  const double w_hh[4] = {0.9, -1.0, 1.1, -1.2}, b_ih[4] = {0.01, 0.02, 0.03, 0.04}, b_hh[4] = {-0.1, 0.2, -0.3, 0.4};
  double g[4];
  for (int k = 0; k < 4; ++k) g[k] = w_ih[2 * k] * x[0] + w_ih[2 * k + 1] * x[1] + b_ih[k] + w_hh[k] * h0 + b_hh[k];
  const double c = sigmoid(g[1]) * c0 + sigmoid(g[0]) * std::tanh(g[2]);
  const double h = sigmoid(g[3]) * std::tanh(c);
  double y = 0, h_t = 0, c_t = 0;
  reference::lstm_forward({1, 1, 2, 1}, x, &h0, &c0, w_ih, w_hh, b_ih, b_hh, identity, &y, &h_t, &c_t);
  EXPECT_DOUBLE_EQ(y, h);
  EXPECT_DOUBLE_EQ(h_t, h);
  EXPECT_DOUBLE_EQ(c_t, c);
}

TEST(RnnReference, OneGruStepByHand) {
  // b_hn sits inside r (W_hn h + b_hn); the other biases add.
  const double x = 0.7, h0 = -0.4;
  const double w_ih[3] = {0.3, -0.5, 0.8}, w_hh[3] = {-0.2, 0.6, 1.3}, b_ih[3] = {0.1, 0.2, 0.3}, b_hh[3] = {0.4, -0.5, 0.6};
  const double r = sigmoid(w_ih[0] * x + b_ih[0] + w_hh[0] * h0 + b_hh[0]);
  const double z = sigmoid(w_ih[1] * x + b_ih[1] + w_hh[1] * h0 + b_hh[1]);
  const double n = std::tanh(w_ih[2] * x + b_ih[2] + r * (w_hh[2] * h0 + b_hh[2]));
  double y = 0, h_t = 0;
  reference::gru_forward({1, 1, 1, 1}, &x, &h0, w_ih, w_hh, b_ih, b_hh, identity, &y, &h_t);
  EXPECT_DOUBLE_EQ(y, (1 - z) * n + z * h0);
}

TEST(RnnReference, StepsCarryTheStateAndRoundH) {
  // A forget gate stuck open and an input gate shut: c stays c0 over every step, h = o tanh(c0).
  constexpr int T = 5;
  const double x[T] = {1, 2, 3, 4, 5}, h0 = 0.25, c0 = 0.6;
  const double w_ih[4] = {0, 0, 0, 0}, w_hh[4] = {0, 0, 0, 0}, b_ih[4] = {-60, 60, 0, 0}, b_hh[4] = {0, 0, 0, 0};
  double y[T], h_t, c_t;
  reference::lstm_forward({T, 1, 1, 1}, x, &h0, &c0, w_ih, w_hh, b_ih, b_hh, identity, y, &h_t, &c_t);
  for (double v : y) EXPECT_NEAR(v, 0.5 * std::tanh(0.6), 1e-12);
  EXPECT_NEAR(c_t, 0.6, 1e-12);
  // GRU with z stuck at 1 keeps h0; rounded to bf16 on every step it stays h0's bf16 value.
  const double gw_ih[3] = {1, 1, 1}, gw_hh[3] = {1, 1, 1}, gb_ih[3] = {0, 60, 0}, gb_hh[3] = {0, 0, 0};
  double gy[T], gh_t;
  const double h_start = 0.123456789;
  reference::gru_forward({T, 1, 1, 1}, x, &h_start, gw_ih, gw_hh, gb_ih, gb_hh, reference::round_to_bf16, gy, &gh_t);
  for (double v : gy) EXPECT_EQ(v, reference::round_to_bf16(h_start));
  EXPECT_NE(reference::round_to_bf16(h_start), h_start);
}

TEST(RnnCatalogue, TensorsCostAndTolerance) {
  const Primitive& lstm = *catalogue().find_primitive("lstm.forward");
  const Primitive& gru = *catalogue().find_primitive("gru.forward");
  const Problem p{"lstm.forward", DType::f32, Shape({{"T", 64}, {"N", 32}, {"D", 128}, {"H", 256}})};
  const auto specs = lstm.tensors(p);
  ASSERT_EQ(specs.size(), 10u);
  EXPECT_EQ(specs[3].name, "w_ih");
  EXPECT_EQ(specs[3].extents, (std::vector<std::int64_t>{1024, 128}));
  EXPECT_EQ(specs[7].extents, (std::vector<std::int64_t>{64, 32, 256}));
  EXPECT_EQ(specs[9].name, "c_t");
  EXPECT_EQ(gru.tensors({"gru.forward", DType::f16, p.shape}).size(), 8u);
  // 2 T N G H (D + H) FLOPs.
  EXPECT_DOUBLE_EQ(lstm.cost(p).flops, 2.0 * 64 * 32 * 4 * 256 * (128 + 256));
  EXPECT_DOUBLE_EQ(gru.cost({"gru.forward", DType::f32, p.shape}).flops, 2.0 * 64 * 32 * 3 * 256 * (128 + 256));
  // The tolerance grows with the steps.
  const Tolerance t64 = tolerance_for(lstm, p);
  const Tolerance t1000 =
      tolerance_for(lstm, {"lstm.forward", DType::f32, Shape({{"T", 1000}, {"N", 32}, {"D", 128}, {"H", 256}})});
  EXPECT_GT(t1000.atol, t64.atol);
  EXPECT_GT(t1000.rtol, t64.rtol);
}

TEST(RnnCatalogue, BackwardPrimitivesTensorsCostAndTolerance) {
  for (const char* name : {"lstm.backward", "gru.backward"}) {
    const Primitive* p = catalogue().find_primitive(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->default_variant, "stepwise");
    EXPECT_EQ(catalogue().variant_names(name),
              "stepwise, stepwise_graph, persistent, persistent_stepwise, persistent_block, cudnn");
    EXPECT_TRUE(catalogue().find_variant(name, "cudnn")->baseline);
  }
  const Shape shape({{"T", 64}, {"N", 32}, {"D", 128}, {"H", 256}});
  const Primitive& lstm = *catalogue().find_primitive("lstm.backward");
  const Problem p{"lstm.backward", DType::bf16, shape};
  const auto specs = lstm.tensors(p);
  std::vector<std::string> names;
  for (const TensorSpec& spec : specs) names.push_back(spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "dy", "dh_t", "dc_t",
                                             "dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh"}));
  for (std::size_t k = 0; k < specs.size(); ++k) {
    EXPECT_EQ(specs[k].role, k < 10 ? TensorRole::input : TensorRole::output) << specs[k].name;
    EXPECT_EQ(specs[k].dtype, DType::bf16) << specs[k].name;
  }
  EXPECT_EQ(specs[10].extents, (std::vector<std::int64_t>{64, 32, 128}));
  EXPECT_EQ(specs[13].extents, (std::vector<std::int64_t>{1024, 128}));
  EXPECT_EQ(specs[14].extents, (std::vector<std::int64_t>{1024, 256}));
  EXPECT_EQ(specs[16].extents, (std::vector<std::int64_t>{1024}));
  const auto gru_specs = catalogue().find_primitive("gru.backward")->tensors({"gru.backward", DType::f32, shape});
  ASSERT_EQ(gru_specs.size(), 14u);
  EXPECT_EQ(gru_specs[6].name, "dy");
  EXPECT_EQ(gru_specs[10].name, "dw_ih");
  EXPECT_EQ(gru_specs[10].extents, (std::vector<std::int64_t>{768, 128}));
  // The forward recomputed and a backward of twice its products: 3 x 2 T N G H (D + H).
  EXPECT_DOUBLE_EQ(lstm.cost(p).flops, 3 * 2.0 * 64 * 32 * 4 * 256 * (128 + 256));
  // The weight gradients sum T N terms: atol grows with them, and with T as the forward's does.
  const Tolerance forward = tolerance_for(*catalogue().find_primitive("lstm.forward"), {"lstm.forward", DType::bf16, shape});
  const Tolerance backward = tolerance_for(lstm, p);
  EXPECT_GT(backward.atol, forward.atol);
  EXPECT_GT(backward.rtol, forward.rtol);
  const Tolerance wider = tolerance_for(lstm, {"lstm.backward", DType::bf16, Shape({{"T", 64}, {"N", 128}, {"D", 128}, {"H", 256}})});
  EXPECT_DOUBLE_EQ(wider.atol, 2 * backward.atol);
  EXPECT_EQ(wider.rtol, backward.rtol);
  // The stepwise rung's workspace is known before any launch; f32 needs no widened copies.
  const Variant& stepwise = *catalogue().find_variant("lstm.backward", "stepwise");
  EXPECT_GT(stepwise.workspace_bytes(p, {}), stepwise.workspace_bytes({"lstm.backward", DType::f32, shape}, {}));
}

// tf32 is f32 whose products may be taken in TF32: listed by the layers (not by the cells, which
// take no products), stored as f32, measured against f32's reference with an atol widened for
// TF32 products; the other dtypes' tolerances stay as they were.
TEST(RnnCatalogue, Tf32IsF32StorageWithAToleranceForTf32Products) {
  const std::vector<DType> layer_dtypes{DType::f32, DType::f16, DType::bf16, DType::tf32};
  for (const char* name : {"lstm.forward", "gru.forward", "lstm.backward", "gru.backward"})
    EXPECT_EQ(catalogue().find_primitive(name)->dtypes, layer_dtypes) << name;
  for (const char* name : {"lstm_cell.forward", "gru_cell.forward", "lstm_cell.backward", "gru_cell.backward"})
    EXPECT_EQ(catalogue().find_primitive(name)->dtypes, (std::vector<DType>{DType::f32, DType::f16, DType::bf16}))
        << name;

  const Shape shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}});
  for (const char* name : {"lstm.forward", "gru.backward"}) {
    const Primitive& p = *catalogue().find_primitive(name);
    const auto tf32 = p.tensors({name, DType::tf32, shape});
    const auto f32 = p.tensors({name, DType::f32, shape});
    ASSERT_EQ(tf32.size(), f32.size()) << name;
    for (std::size_t k = 0; k < tf32.size(); ++k) {
      EXPECT_EQ(tf32[k].dtype, DType::f32) << name << " " << tf32[k].name;
      EXPECT_EQ(tf32[k].extents, f32[k].extents) << name << " " << tf32[k].name;
    }
    EXPECT_EQ(p.cost({name, DType::tf32, shape}).bytes, p.cost({name, DType::f32, shape}).bytes) << name;
  }
  // The stepwise backward reads and writes fp32 tensors in place, as for f32: no widened copies.
  const Variant& stepwise = *catalogue().find_variant("lstm.backward", "stepwise");
  EXPECT_EQ(stepwise.workspace_bytes({"lstm.backward", DType::tf32, shape}, {}),
            stepwise.workspace_bytes({"lstm.backward", DType::f32, shape}, {}));

  // The forward's tolerances at T = 64 (growth 1 + log2(64) / 4 = 2.5): f32, f16, bf16 unchanged.
  const Primitive& lstm = *catalogue().find_primitive("lstm.forward");
  const auto at = [&](DType dtype, std::int64_t T, std::int64_t D, std::int64_t H) {
    return tolerance_for(lstm, {"lstm.forward", dtype, Shape({{"T", T}, {"N", 8}, {"D", D}, {"H", H}})});
  };
  EXPECT_DOUBLE_EQ(at(DType::f32, 64, 128, 128).atol, 4e-6 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::f32, 64, 128, 128).rtol, 2e-5 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::f16, 64, 128, 128).atol, 1e-3 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::f16, 64, 128, 128).rtol, 2e-3 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::bf16, 64, 128, 128).atol, 8e-3 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::bf16, 64, 128, 128).rtol, 1.6e-2 * 2.5);
  EXPECT_DOUBLE_EQ(at(DType::f32, 64, 1024, 32).atol, at(DType::f32, 64, 128, 128).atol) << "f32 ignores D and H";
  // tf32: f32's atol plus the gate bound 2^-9 sqrt(1 + D/H), times the same growth; f32's rtol.
  const Tolerance tf32 = at(DType::tf32, 64, 128, 128);
  EXPECT_DOUBLE_EQ(tf32.atol, (4e-6 + 0x1p-9 * std::sqrt(2.0)) * 2.5);
  EXPECT_DOUBLE_EQ(tf32.rtol, at(DType::f32, 64, 128, 128).rtol);
  EXPECT_DOUBLE_EQ(at(DType::tf32, 1, 128, 128).atol, 4e-6 + 0x1p-9 * std::sqrt(2.0)) << "one step: no growth";
  EXPECT_DOUBLE_EQ(at(DType::tf32, 64, 384, 128).atol, (4e-6 + 0x1p-9 * 2) * 2.5) << "wider inputs, longer sums";
  EXPECT_GT(at(DType::tf32, 1000, 128, 128).atol, tf32.atol);
  EXPECT_GT(tf32.atol, at(DType::f16, 64, 128, 128).atol) << "TF32 rounds every operand, f16 only h's storage";
  EXPECT_LT(tf32.atol, at(DType::bf16, 64, 128, 128).atol);
  // What `list` shows: T = 64, D = H = 128.
  EXPECT_DOUBLE_EQ(lstm.tolerance(DType::tf32).atol, tf32.atol);

  // The backward: 4 times the forward's atol (its error sits there) with the same sqrt(T N / 32)
  // growth, twice its rtol as for every dtype.
  const Primitive& backward = *catalogue().find_primitive("lstm.backward");
  const Tolerance b = tolerance_for(backward, {"lstm.backward", DType::tf32, shape});
  const Tolerance f = tolerance_for(lstm, {"lstm.forward", DType::tf32, shape});
  EXPECT_DOUBLE_EQ(b.atol, 4 * f.atol * std::sqrt(64.0 * 64 / 32));
  EXPECT_DOUBLE_EQ(b.rtol, 2 * f.rtol);
  const Tolerance b32 = tolerance_for(backward, {"lstm.backward", DType::f32, shape});
  const Tolerance f32 = tolerance_for(lstm, {"lstm.forward", DType::f32, shape});
  EXPECT_DOUBLE_EQ(b32.atol, f32.atol * std::sqrt(64.0 * 64 / 32)) << "f32's backward unchanged";
  EXPECT_DOUBLE_EQ(b32.rtol, 2 * f32.rtol);
  // 16 bits: twice the forward's atol (saved 16-bit activations' errors share signs).
  const Tolerance b16 = tolerance_for(backward, {"lstm.backward", DType::bf16, shape});
  const Tolerance f16 = tolerance_for(lstm, {"lstm.forward", DType::bf16, shape});
  EXPECT_DOUBLE_EQ(b16.atol, 2 * f16.atol * std::sqrt(64.0 * 64 / 32));

  // Every rung takes tf32 where it takes f32: the same refusals.
  const DeviceLimits h200 = nominal_device_limits();
  for (const char* name : {"lstm.forward", "gru.forward", "lstm.backward", "gru.backward"})
    for (const Variant* v : catalogue().variants(name))
      for (const Shape& s : {shape, Shape({{"T", 8}, {"N", 64}, {"D", 8}, {"H", 1024}})}) {
        const Support a = v->supports({name, DType::f32, s}, v->default_config, h200);
        const Support t = v->supports({name, DType::tf32, s}, v->default_config, h200);
        EXPECT_EQ(a.ok, t.ok) << name << " " << v->name << " " << s.key();
        EXPECT_EQ(a.reason, t.reason) << name << " " << v->name << " " << s.key();
      }
}

TEST(RnnCatalogue, PersistentRefusesWhatCannotBeResidentOrHeld) {
  const Variant& v = *catalogue().find_variant("lstm.forward", "persistent");
  const DeviceLimits h200 = nominal_device_limits();
  const Shape target({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 256}});
  EXPECT_TRUE(v.supports({"lstm.forward", DType::f32, target}, v.default_config, h200).ok);
  // H = 1024 with one unit a block: 1024 blocks, more than 132 SMs hold with this shared memory.
  const Shape wide({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 1024}});
  const auto config = [](std::int64_t units, std::int64_t threads, std::int64_t groups) {
    return Config({{"units_per_block", units}, {"block_size", threads}, {"batch_groups", groups}, {"k_split", 1}});
  };
  const Support one_unit = v.supports({"lstm.forward", DType::f32, wide}, config(1, 64, 1), h200);
  EXPECT_FALSE(one_unit.ok);
  // 16 units of H = 1024 in fp32: 64 gate rows of 4 KiB and 64 h rows: over 227 KiB.
  const Support sixteen = v.supports({"lstm.forward", DType::f32, wide}, config(16, 256, 1), h200);
  EXPECT_FALSE(sixteen.ok);
  EXPECT_NE(sixteen.reason.find("shared memory"), std::string::npos) << sixteen.reason;
  // More batch groups than rows.
  const Shape one_row({{"T", 8}, {"N", 1}, {"D", 8}, {"H", 8}});
  EXPECT_FALSE(v.supports({"lstm.forward", DType::f32, one_row}, config(1, 64, 2), h200).ok);
}

// The register rung: a warp a unit, W_hh in 1, 2 or 4 chunks of 128 columns a lane (so H <= 512),
// at most 64 rows a batch group; its shared memory is the group's h rows (rounded up to 8) of the
// chunks' width, 32 input gates a warp per 8 rows and the LSTM's cell state.
TEST(RnnCatalogue, PersistentRegistersPlanAndRefusals) {
  namespace kr = kernels::rnn;
  const kr::RegisterPlan p = kr::register_plan(kr::Cell::lstm, 64, 512, {8, 2});
  EXPECT_EQ(p.blocks, 128);
  EXPECT_EQ(p.threads, 256);
  EXPECT_EQ(p.rows_per_group, 32);
  EXPECT_EQ(p.chunks, 4);
  EXPECT_EQ(p.shared_bytes, (32 * 512 + 8 * 4 * 32 + 8 * 32) * sizeof(float));
  const kr::RegisterPlan gru = kr::register_plan(kr::Cell::gru, 13, 100, {4, 2});  // 7 and 6 rows, 25 unit blocks
  EXPECT_EQ(gru.blocks, 50);
  EXPECT_EQ(gru.chunks, 1);
  EXPECT_EQ(gru.shared_bytes, (8 * 128 + 4 * 32) * sizeof(float));
  EXPECT_EQ(kr::register_plan(kr::Cell::lstm, 64, 257, {8, 2}).chunks, 4);
  EXPECT_EQ(kr::register_plan(kr::Cell::lstm, 65, 128, {8, 1}).blocks, 0) << "65 rows in one group";
  EXPECT_EQ(kr::register_plan(kr::Cell::lstm, 64, 513, {8, 2}).blocks, 0) << "H past 512";
  EXPECT_EQ(kr::register_plan(kr::Cell::lstm, 64, 128, {9, 2}).blocks, 0) << "9 warps";

  const Variant& v = *catalogue().find_variant("gru.forward", "persistent_registers");
  const DeviceLimits h200 = nominal_device_limits();
  const auto shape = [](std::int64_t n, std::int64_t h) { return Shape({{"T", 8}, {"N", n}, {"D", 8}, {"H", h}}); };
  EXPECT_TRUE(v.supports({"gru.forward", DType::f32, shape(64, 512)}, v.default_config, h200).ok);
  const Support wide = v.supports({"gru.forward", DType::f32, shape(64, 1024)}, v.default_config, h200);
  EXPECT_FALSE(wide.ok);
  EXPECT_NE(wide.reason.find("4 chunks of 128 columns"), std::string::npos) << wide.reason;
  const Config one_group({{"units_per_block", 8}, {"batch_groups", 1}});
  const Support rows = v.supports({"gru.forward", DType::f32, shape(100, 128)}, one_group, h200);
  EXPECT_FALSE(rows.ok);
  EXPECT_NE(rows.reason.find("more than 64 rows"), std::string::npos) << rows.reason;
  // 2 units a block at H 512 and 8 groups: 2048 blocks of 64 threads, more than 132 SMs hold.
  const Config small({{"units_per_block", 2}, {"batch_groups", 8}});
  const Support grid = v.supports({"gru.forward", DType::f32, shape(64, 512)}, small, h200);
  EXPECT_FALSE(grid.ok);
  EXPECT_NE(grid.reason.find("cannot be resident"), std::string::npos) << grid.reason;
}

// The block rung: G H x k_split threads (at most 512), each a slice of ceil(H / k_split) columns
// of its gate row in 16-byte chunks, register_quads of them in registers; its shared memory is
// the other chunks, the block's h rows (every slice's width) and the k_split partial sums a row.
TEST(RnnCatalogue, PersistentBlockPlanAndRefusals) {
  namespace kr = kernels::rnn;
  const kr::BlockPlan p = kr::block_plan(kr::Cell::lstm, 64, 128, {2, 1, 16});
  EXPECT_EQ(p.blocks, 32);
  EXPECT_EQ(p.threads, 512);
  EXPECT_EQ(p.quads, 32);
  EXPECT_EQ(p.shared_bytes, (4 * 16 * 512 + 2 * 128 + 1 * 2 * 512) * sizeof(float));
  const kr::BlockPlan odd = kr::block_plan(kr::Cell::gru, 7, 17, {4, 2, 0});  // slices of 9 columns: 3 chunks
  EXPECT_EQ(odd.blocks, 2);
  EXPECT_EQ(odd.threads, 102);
  EXPECT_EQ(odd.quads, 3);
  EXPECT_EQ(odd.shared_bytes, (4 * 3 * 102 + 4 * 2 * 12 + 2 * 4 * 51) * sizeof(float));
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 256, {2, 1, 16}).blocks, 0) << "1024 threads";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 16, {2, 1, 8}).blocks, 0) << "8 chunks of a 4-chunk slice";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {3, 1, 8}).blocks, 0) << "3 rows a block";
  // All 32 chunks of the GRU's rows at H 128 in registers: 384 threads, no W_hh in shared memory.
  const kr::BlockPlan all = kr::block_plan(kr::Cell::gru, 64, 128, {1, 1, 32});
  EXPECT_EQ(all.threads, 384);
  EXPECT_EQ(all.shared_bytes, (1 * 128 + 1 * 1 * 384) * sizeof(float));
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {4, 1, 24}).blocks, 0) << "24 chunks at 4 rows";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {1, 1, 24}).blocks, 0) << "24 chunks at 512 threads";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 1, 12}).blocks, 0) << "12 chunks: not built";
  // Projecting blocks share the launch's shared memory: their tile (64 depths of 64 x rows and
  // 96 W_ih columns, 40 KiB) where the recurrence needs less.
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 1, 32, 1}).shared_bytes, 64 * (64 + 96) * sizeof(float));
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {2, 1, 16, 1}).shared_bytes, p.shared_bytes);
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {2, 1, 16, 2}).blocks, 0) << "project is 0 or 1";

  const Variant& v = *catalogue().find_variant("lstm.forward", "persistent_block");
  const DeviceLimits h200 = nominal_device_limits();
  const auto shape = [](std::int64_t n, std::int64_t h) { return Shape({{"T", 8}, {"N", n}, {"D", 8}, {"H", h}}); };
  EXPECT_TRUE(v.supports({"lstm.forward", DType::f32, shape(64, 128)}, v.default_config, h200).ok);
  const Support wide = v.supports({"lstm.forward", DType::f32, shape(64, 256)}, v.default_config, h200);
  EXPECT_FALSE(wide.ok);
  EXPECT_NE(wide.reason.find("1024 threads"), std::string::npos) << wide.reason;
  // 8 of 32 chunks in registers at H 128: the other 24 take 192 KiB, with h and the sums past 227.
  const Config few({{"rows_per_block", 4}, {"k_split", 1}, {"register_quads", 0}, {"project", 0}, {"unit_groups", 0}, {"group_units", 1}});
  const Support shared = v.supports({"lstm.forward", DType::f32, shape(64, 128)}, few, h200);
  EXPECT_FALSE(shared.ok);
  EXPECT_NE(shared.reason.find("shared memory"), std::string::npos) << shared.reason;
  const Config all_in_registers({{"rows_per_block", 1}, {"k_split", 1}, {"register_quads", 32}, {"project", 1}, {"unit_groups", 0}, {"group_units", 1}});
  const Support lstm_wide = v.supports({"lstm.forward", DType::f32, shape(64, 128)}, all_in_registers, h200);
  EXPECT_FALSE(lstm_wide.ok);
  EXPECT_NE(lstm_wide.reason.find("at most 384"), std::string::npos) << lstm_wide.reason;
  const Variant& gru = *catalogue().find_variant("gru.forward", "persistent_block");
  EXPECT_TRUE(gru.supports({"gru.forward", DType::f32, shape(64, 128)}, all_in_registers, h200).ok);
  const Config wide_rows({{"rows_per_block", 4}, {"k_split", 1}, {"register_quads", 24}, {"project", 0}, {"unit_groups", 0}, {"group_units", 1}});
  const Support gru_rows = gru.supports({"gru.forward", DType::f32, shape(64, 128)}, wide_rows, h200);
  EXPECT_FALSE(gru_rows.ok);
  EXPECT_NE(gru_rows.reason.find("2 rows"), std::string::npos) << gru_rows.reason;
}

// The block rung's unit groups: H x k_split threads in whole warps, a lane's share of a gate row
// ceil(H / (4 k_split)) 16-byte chunks, register_quads of its G x that in registers (whole chunks,
// a multiple of G); its shared memory is the other chunks, two buffers of the block's h rows and
// the G + 1 bias rows.
TEST(RnnCatalogue, PersistentBlockUnitGroupsPlanAndRefusals) {
  namespace kr = kernels::rnn;
  const kr::BlockPlan gru = kr::block_plan(kr::Cell::gru, 64, 128, {1, 4, 24, 0, 1});  // all of W_hh in registers
  EXPECT_EQ(gru.blocks, 64);
  EXPECT_EQ(gru.threads, 512);
  EXPECT_EQ(gru.quads, 8);
  EXPECT_EQ(gru.shared_bytes, (2 * 1 * 128 + 4 * 128) * sizeof(float));  // h buffers, biases
  const kr::BlockPlan lstm = kr::block_plan(kr::Cell::lstm, 64, 128, {2, 4, 16, 0, 1});
  EXPECT_EQ(lstm.blocks, 32);
  EXPECT_EQ(lstm.threads, 512);
  EXPECT_EQ(lstm.shared_bytes, (4 * 16 * 512 + 2 * 2 * 128 + 5 * 128) * sizeof(float));
  // H 100 over 4 lanes: 7 chunks a lane (a row 112 wide, zero past 100), 400 threads in 13 warps.
  const kr::BlockPlan odd = kr::block_plan(kr::Cell::lstm, 7, 100, {2, 4, 24, 0, 1});
  EXPECT_EQ(odd.blocks, 4);
  EXPECT_EQ(odd.threads, 416);
  EXPECT_EQ(odd.quads, 7);
  EXPECT_EQ(odd.shared_bytes, (4 * (28 - 24) * 416 + 2 * 2 * 112 + 5 * 100) * sizeof(float));
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 4, 16, 0, 1}).blocks, 0) << "16 chunks: not whole G = 3 rows";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 1, 24, 0, 1}).blocks, 0) << "k_split 1";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {4, 4, 24, 0, 1}).blocks, 0) << "4 rows";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {2, 2, 0, 0, 1}).blocks, 32) << "2 rows over 2 lanes";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {1, 8, 16, 0, 1}).blocks, 0) << "1024 threads with 64 registers";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {1, 4, 32, 0, 1}).blocks, 0) << "512 threads with 128 registers";
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 64, 128, {1, 2, 32, 0, 1}).threads, 256);
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 16, {1, 4, 24, 0, 1}).blocks, 0) << "24 chunks of a lane's 3";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 4, 24, 0, 2}).blocks, 0) << "unit_groups is 0 or 1";

  const Variant& v = *catalogue().find_variant("gru.forward", "persistent_block");
  const DeviceLimits h200 = nominal_device_limits();
  const Shape shape({{"T", 8}, {"N", 64}, {"D", 8}, {"H", 128}});
  const auto groups = [](int rows, int split, int quads, int units = 1) {
    return Config({{"rows_per_block", rows}, {"k_split", split}, {"register_quads", quads}, {"project", 0},
                   {"unit_groups", 1}, {"group_units", units}});
  };
  EXPECT_TRUE(v.supports({"gru.forward", DType::f32, shape}, groups(1, 4, 24), h200).ok);
  const auto refusal = [&](const Config& c) { return v.supports({"gru.forward", DType::f32, shape}, c, h200).reason; };
  EXPECT_NE(refusal(groups(1, 4, 16)).find("multiple of 3"), std::string::npos) << refusal(groups(1, 4, 16));
  EXPECT_NE(refusal(groups(1, 1, 24)).find("2, 4 or 8 lanes"), std::string::npos) << refusal(groups(1, 1, 24));
  EXPECT_NE(refusal(groups(2, 8, 24)).find("at most 512"), std::string::npos) << refusal(groups(2, 8, 24));
  // All of the GRU's W_hh in shared memory at 8 lanes: 192 KiB, which fits.
  EXPECT_TRUE(v.supports({"gru.forward", DType::f32, shape}, groups(1, 8, 0), h200).ok);
  const Config rows8({{"rows_per_block", 1}, {"k_split", 8}, {"register_quads", 0}, {"project", 0}, {"unit_groups", 0},
                      {"group_units", 1}});
  EXPECT_NE(refusal(rows8).find("1, 2 or 4 threads"), std::string::npos) << refusal(rows8);
  // Two units a group: the GRU's 64 pairs over 8 lanes, 4 chunks a lane, 2 x 3 x 4 = 24 in registers.
  const kr::BlockPlan pairs = kr::block_plan(kr::Cell::gru, 64, 128, {1, 8, 24, 0, 1, 2});
  EXPECT_EQ(pairs.blocks, 64);
  EXPECT_EQ(pairs.threads, 512);
  EXPECT_EQ(pairs.quads, 4);
  EXPECT_EQ(pairs.shared_bytes, (2 * 1 * 128 + 4 * 128) * sizeof(float));
  // H 100 in 50 pairs over 8 lanes (400 threads in 13 warps): the LSTM's 32 chunks (2 x 4 x 4) in
  // registers need at most 256 threads, refused; 16 of them fit.
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 7, 100, {1, 8, 32, 0, 1, 2}).blocks, 0);
  EXPECT_EQ(kr::block_plan(kr::Cell::lstm, 7, 100, {1, 8, 16, 0, 1, 2}).threads, 416);
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {2, 8, 24, 0, 1, 2}).blocks, 0) << "2 rows with 2 units";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 8, 16, 0, 1, 2}).blocks, 0) << "not whole chunks of 6 rows";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 8, 18, 0, 1, 2}).blocks, 0) << "18 chunks: not built";
  EXPECT_EQ(kr::block_plan(kr::Cell::gru, 64, 128, {1, 1, 24, 0, 0, 2}).blocks, 0) << "the row layout has 1";
  EXPECT_TRUE(v.supports({"gru.forward", DType::f32, shape}, groups(1, 8, 24, 2), h200).ok);
  EXPECT_NE(refusal(groups(2, 8, 24, 2)).find("1 row a block"), std::string::npos) << refusal(groups(2, 8, 24, 2));
  EXPECT_NE(refusal(groups(1, 8, 8, 2)).find("multiple of 6"), std::string::npos) << refusal(groups(1, 8, 8, 2));
  Config row_units = rows8;
  row_units.set("group_units", 2);
  EXPECT_NE(refusal(row_units).find("axis of the unit groups"), std::string::npos) << refusal(row_units);
}

// The block rung's backward chain: H x k_split threads, each a slice of ceil(G H / k_split) gate
// rows of one column of W_hh in 16-byte chunks; at most k_split rows a block (a cell thread each).
// Its variant refuses what its fixed forward refuses.
TEST(RnnCatalogue, PersistentBlockBackwardPlanAndRefusals) {
  namespace kr = kernels::rnn;
  const kr::BlockPlan p = kr::block_backward_plan(kr::Cell::lstm, 64, 128, {1, 4, 16});
  EXPECT_EQ(p.blocks, 64);
  EXPECT_EQ(p.threads, 512);
  EXPECT_EQ(p.quads, 32);
  EXPECT_EQ(p.shared_bytes, (4 * 16 * 512 + 1 * 4 * 4 * 32 + 4 * 1 * 128) * sizeof(float));
  EXPECT_EQ(kr::block_backward_plan(kr::Cell::gru, 7, 17, {2, 2, 0}).quads, 7);  // 51 rows in slices of 28
  EXPECT_EQ(kr::block_backward_plan(kr::Cell::lstm, 64, 128, {2, 1, 0}).blocks, 0) << "2 rows, 1 thread a unit";
  EXPECT_EQ(kr::block_backward_plan(kr::Cell::lstm, 64, 256, {1, 4, 16}).blocks, 0) << "1024 threads";
  EXPECT_EQ(kr::block_backward_plan(kr::Cell::lstm, 64, 128, {1, 4, 8}).blocks, 0) << "built for 0 or 16 chunks";

  const Variant& v = *catalogue().find_variant("lstm.backward", "persistent_block");
  const DeviceLimits h200 = nominal_device_limits();
  const auto shape = [](std::int64_t h) { return Shape({{"T", 8}, {"N", 64}, {"D", 8}, {"H", h}}); };
  EXPECT_TRUE(v.supports({"lstm.backward", DType::f32, shape(128)}, v.default_config, h200).ok);
  // One thread a unit at H 128 with no chunk in registers: 128 chunks of a column in shared
  // memory, 256 KiB. With 16 in registers it just fits (226.5 KiB).
  const Config none({{"rows_per_block", 1}, {"k_split", 1}, {"register_quads", 0}});
  const Support shared = v.supports({"lstm.backward", DType::f32, shape(128)}, none, h200);
  EXPECT_FALSE(shared.ok);
  EXPECT_NE(shared.reason.find("shared memory"), std::string::npos) << shared.reason;
  const Config some({{"rows_per_block", 1}, {"k_split", 1}, {"register_quads", 16}});
  EXPECT_TRUE(v.supports({"lstm.backward", DType::f32, shape(128)}, some, h200).ok);
  // 2 rows a block need 2 cell threads a unit.
  const Config rows({{"rows_per_block", 2}, {"k_split", 1}, {"register_quads", 16}});
  EXPECT_FALSE(v.supports({"lstm.backward", DType::f32, shape(64)}, rows, h200).ok);
}

// The lane groups of k_split: the rows a lane group takes follow from the threads left per unit,
// and a config whose block is not whole lane groups per unit (or not whole warps, or over the
// kernel's 512 threads, or k_split not a power of 2) has no plan.
TEST(RnnCatalogue, PersistentPlanSplitsUnitsOverLaneGroups) {
  namespace kr = kernels::rnn;
  // H 512, N 64 in two batch groups: 32 rows a block; 512 threads of k_split 16 are 32 lane
  // groups, 8 per unit, so each takes 4 rows.
  const kr::PersistentPlan split = kr::persistent_plan(kr::Cell::lstm, 64, 512, {4, 512, 2, 16});
  EXPECT_EQ(split.blocks, 256);
  EXPECT_EQ(split.rows_per_group, 32);
  EXPECT_EQ(split.rows_per_thread, 4);
  // The same threads one lane a unit: 128 lanes per unit, one row each.
  EXPECT_EQ(kr::persistent_plan(kr::Cell::lstm, 64, 512, {4, 512, 2, 1}).rows_per_thread, 1);
  // 64 rows for 8 lane groups a unit would be 8 rows each; for 2 (k_split 16 of 128 threads), 32: none.
  EXPECT_EQ(kr::persistent_plan(kr::Cell::gru, 64, 512, {4, 512, 1, 16}).rows_per_thread, 8);
  EXPECT_EQ(kr::persistent_plan(kr::Cell::gru, 64, 512, {4, 128, 1, 16}).rows_per_thread, 0);
  for (const kr::PersistentConfig bad : {kr::PersistentConfig{4, 512, 1, 3}, kr::PersistentConfig{16, 128, 1, 16},
                                         kr::PersistentConfig{1, 48, 1, 1}, kr::PersistentConfig{1, 1024, 1, 1}})
    EXPECT_EQ(kr::persistent_plan(kr::Cell::lstm, 64, 512, bad).blocks, 0)
        << bad.units_per_block << " " << bad.block_size << " " << bad.k_split;

  const Variant& v = *catalogue().find_variant("lstm.forward", "persistent");
  const DeviceLimits h200 = nominal_device_limits();
  const Problem char_model{"lstm.forward", DType::f32, Shape({{"T", 64}, {"N", 64}, {"D", 512}, {"H", 512}})};
  // Two 256-thread blocks an SM: 256 blocks, lane groups of 8 taking 4 rows each.
  EXPECT_EQ(kr::persistent_plan(kr::Cell::lstm, 64, 512, {4, 256, 2, 8}).rows_per_thread, 4);
  const Config split_config({{"units_per_block", 4}, {"block_size", 256}, {"batch_groups", 2}, {"k_split", 8}});
  EXPECT_TRUE(v.supports(char_model, split_config, h200).ok) << v.supports(char_model, split_config, h200).reason;
  // The backward's forward axis: 2 runs this split forward first. At H 512 the rule's k_split-1
  // forward (units 16, 256 threads, 4 groups) is supported too; the split one must be, with the
  // chain config the H100 measured (8 units, 4 groups, k_split 8).
  const Variant& backward = *catalogue().find_variant("lstm.backward", "persistent");
  const Problem char_backward{"lstm.backward", DType::f32, char_model.shape};
  for (const std::int64_t forward : {0, 2}) {
    const Config c({{"forward", forward}, {"units_per_block", 8}, {"batch_groups", 4}, {"k_split", 8}});
    const Support s = backward.supports(char_backward, c, h200);
    EXPECT_TRUE(s.ok) << forward << ": " << s.reason;
  }
  // A winner stored before k_split existed completes to the rung as first built.
  const Config stored({{"units_per_block", 4}, {"block_size", 256}, {"batch_groups", 2}});
  EXPECT_EQ(complete_config(v, stored).at("k_split"), 1);
}

// persistent_stepwise: persistent's forward (its `forward` axis), stepwise's backward (its step
// product in `chain_splits` slices, 0 by default: cuBLAS's one product, as stepwise) on
// persistent's workspace (stepwise's layout first, which the stepwise backward reads), both
// halves for a trainer. It refuses what the forward it runs refuses (the cluster forward off
// Hopper), not what the persistent chain would (it runs no chain).
TEST(RnnCatalogue, PersistentStepwiseIsPersistentsForwardAndStepwisesBackward) {
  const DeviceLimits h200 = nominal_device_limits();
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  for (const char* name : {"lstm.backward", "gru.backward"}) {
    const Variant& v = *catalogue().find_variant(name, "persistent_stepwise");
    const Variant& persistent = *catalogue().find_variant(name, "persistent");
    ASSERT_EQ(v.params.axes().size(), 3u) << name;
    EXPECT_EQ(v.params.axes()[0].name, "forward");
    EXPECT_EQ(v.params.axes()[0].values, persistent.params.axes()[0].values);
    EXPECT_EQ(v.params.axes()[1].name, "chain_splits");
    EXPECT_EQ(v.params.axes()[1].values, (std::vector<std::int64_t>{0, 4, 8, 16}));
    EXPECT_EQ(v.params.axes()[2].name, "products");
    EXPECT_EQ(v.params.axes()[2].values, (std::vector<std::int64_t>{0, 1}));
    EXPECT_EQ(v.default_config.at("forward"), 2) << "the k_split forward that won at H 512";
    // A winner stored before the axes existed ran cuBLAS's single product and fp32 products.
    EXPECT_EQ(complete_config(v, Config({{"forward", 3}})).at("chain_splits"), 0);
    EXPECT_EQ(complete_config(v, Config({{"forward", 3}})).at("products"), 0);
    EXPECT_TRUE(v.forward_half && v.backward_half) << name;
    const Problem p{name, DType::f32, Shape({{"T", 64}, {"N", 64}, {"D", 512}, {"H", 512}})};
    EXPECT_EQ(v.workspace_bytes(p, v.default_config), persistent.workspace_bytes(p, persistent.default_config));
    EXPECT_GE(v.workspace_bytes(p, v.default_config),
              catalogue().find_variant(name, "stepwise")->workspace_bytes(p, {}));
    // The grid forwards at the character model's H 512; the cluster one where a cluster holds W_hh.
    for (const std::int64_t forward : {0, 2})
      EXPECT_TRUE(v.supports(p, Config({{"forward", forward}}), h200).ok) << forward;
    // Split TF32 products: the split operands' room (the gates' gradients, x, W_ih, h: each twice)
    // on top of the fp32 products' workspace; refused for tf32 problems and without TF32 tensor cores.
    {
      const std::int64_t T = 64, N = 64, D = 512, H = 512, GH = (std::string(name) == "lstm.backward" ? 4 : 3) * H;
      const std::int64_t gradients = std::string(name) == "lstm.backward" ? 1 : 2;
      const Config split({{"forward", 3}, {"chain_splits", 8}, {"products", 1}});
      const Config fp32({{"forward", 3}, {"chain_splits", 8}, {"products", 0}});
      EXPECT_GE(v.workspace_bytes(p, split) - v.workspace_bytes(p, fp32),
                static_cast<std::size_t>(4 * 2 * (gradients * T * N * GH + T * N * D + GH * D + T * N * H)));
      EXPECT_TRUE(v.supports(p, split, h200).ok);
      const Problem tf32{name, DType::tf32, p.shape};
      const Support refused = v.supports(tf32, split, h200);
      EXPECT_FALSE(refused.ok);
      EXPECT_NE(refused.reason.find("TF32 already"), std::string::npos) << refused.reason;
      EXPECT_TRUE(v.supports(tf32, fp32, h200).ok);
      const Support on_t4 = v.supports(p, Config({{"forward", 0}, {"products", 1}}), t4);
      EXPECT_FALSE(on_t4.ok);
      EXPECT_NE(on_t4.reason.find("TF32 tensor cores"), std::string::npos) << on_t4.reason;
      // A 16-bit problem splits only the gates' gradients: its x, W_ih and h are exact in TF32.
      const Problem half{name, DType::f16, p.shape};
      EXPECT_LT(v.workspace_bytes(half, split) - v.workspace_bytes(half, fp32),
                v.workspace_bytes(p, split) - v.workspace_bytes(p, fp32));
    }
    const Problem small{name, DType::f32, Shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}})};
    EXPECT_TRUE(v.supports(small, Config({{"forward", 1}}), h200).ok);
    // The slices must divide G H (384 or 512 at H 128; the GRU's 3 x 100 = 300 takes 4, not 8).
    for (const std::int64_t splits : {4, 8, 16})
      EXPECT_TRUE(v.supports(small, Config({{"forward", 0}, {"chain_splits", splits}}), h200).ok) << splits;
    const Problem odd{name, DType::f32, Shape({{"T", 5}, {"N", 2}, {"D", 33}, {"H", 100}})};
    EXPECT_TRUE(v.supports(odd, Config({{"forward", 0}, {"chain_splits", 4}}), h200).ok);
    const Support uneven = v.supports(odd, Config({{"forward", 0}, {"chain_splits", 8}}), h200);
    EXPECT_EQ(uneven.ok, std::string(name) == "lstm.backward") << uneven.reason;
    if (!uneven.ok) {
      EXPECT_NE(uneven.reason.find("do not split into 8 equal slices"), std::string::npos) << uneven.reason;
    }
    const Support off_hopper = v.supports(small, Config({{"forward", 1}}), t4);
    EXPECT_FALSE(off_hopper.ok);
    EXPECT_NE(off_hopper.reason.find("the forward it runs first, persistent_cluster{"), std::string::npos)
        << off_hopper.reason;
    // Where the persistent chain cannot be placed (one unit a block in 8 groups at H 1024: more
    // blocks than the chip holds), any refusal of persistent_stepwise is its forward's.
    const Problem wide{name, DType::f32, Shape({{"T", 8}, {"N", 64}, {"D", 64}, {"H", 1024}})};
    const Support chain = persistent.supports(
        wide, Config({{"forward", 0}, {"units_per_block", 1}, {"batch_groups", 8}, {"k_split", 4}}), h200);
    EXPECT_FALSE(chain.ok);
    EXPECT_EQ(chain.reason.find("the forward it runs first"), std::string::npos) << chain.reason;
    for (const std::int64_t forward : {0, 1, 2}) {
      const Support s = v.supports(wide, Config({{"forward", forward}}), h200);
      if (!s.ok) {
        EXPECT_NE(s.reason.find("the forward it runs first"), std::string::npos) << s.reason;
      }
    }
  }
}

TEST(RnnCatalogue, PersistentClusterRefusesOffHopperAndWhatABlockCannotHold) {
  const Variant& v = *catalogue().find_variant("lstm.forward", "persistent_cluster");
  const DeviceLimits h200 = nominal_device_limits();
  const Problem target{"lstm.forward", DType::f32, Shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}})};
  EXPECT_TRUE(v.supports(target, v.default_config, h200).ok) << v.supports(target, v.default_config, h200).reason;
  // A T4 (sm_75) and an sm_89 part: the sm_90a kernel is not in their code.
  for (const int cc : {75, 89}) {
    DeviceLimits other = h200;
    other.compute_capability = cc;
    const Support s = v.supports(target, v.default_config, other);
    EXPECT_FALSE(s.ok);
    EXPECT_NE(s.reason.find("sm_90a"), std::string::npos) << s.reason;
  }
  const auto config = [](int cluster, int rows, int k_split, int rows_per_thread, int exchange = 0) {
    return Config({{"cluster_size", cluster}, {"rows_per_cluster", rows}, {"k_split", k_split},
                   {"rows_per_thread", rows_per_thread}, {"exchange", exchange}});
  };
  // The async exchange adds the two buffers' mbarriers and nothing else; there is no third exchange.
  EXPECT_TRUE(v.supports(target, config(8, 8, 8, 4, 1), h200).ok);
  EXPECT_EQ(kernels::rnn::cluster_plan(kernels::rnn::Cell::lstm, 64, 128, {8, 8, 8, 4, 1}).shared_bytes,
            kernels::rnn::cluster_plan(kernels::rnn::Cell::lstm, 64, 128, {8, 8, 8, 4, 0}).shared_bytes + 16);
  EXPECT_FALSE(v.supports(target, config(8, 8, 8, 4, 2), h200).ok);
  // A row stored before the axis existed completes to the exchange it measured: stores and a barrier.
  EXPECT_EQ(complete_config(v, Config({{"cluster_size", 8}, {"rows_per_cluster", 8}, {"k_split", 8},
                                       {"rows_per_thread", 4}}))
                .at("exchange"),
            0);
  // H = 512 in fp32: W_hh is 4 MiB, more than 4 blocks (or even 16) hold in shared memory.
  const Problem wide{"lstm.forward", DType::f32, Shape({{"T", 8}, {"N", 64}, {"D", 8}, {"H", 512}})};
  const Support four = v.supports(wide, config(4, 4, 4, 1), h200);
  EXPECT_FALSE(four.ok);
  EXPECT_NE(four.reason.find("shared memory"), std::string::npos) << four.reason;
  EXPECT_FALSE(v.supports(wide, config(16, 4, 4, 1), h200).ok);
  // 32 units x 16 rows x 16 lanes: 8192 threads a block.
  const Support threads = v.supports(target, config(4, 16, 16, 1), h200);
  EXPECT_FALSE(threads.ok);
  EXPECT_NE(threads.reason.find("threads"), std::string::npos) << threads.reason;
  // One row: rows_per_cluster 1 is the only distinct split; 2 and up would repeat it.
  const Problem one_row{"lstm.forward", DType::f32, Shape({{"T", 8}, {"N", 1}, {"D", 8}, {"H", 64}})};
  EXPECT_TRUE(v.supports(one_row, config(8, 1, 4, 1), h200).ok);
  EXPECT_FALSE(v.supports(one_row, config(8, 2, 4, 1), h200).ok);
  // More blocks than hidden units.
  const Problem narrow{"lstm.forward", DType::f32, Shape({{"T", 8}, {"N", 4}, {"D", 8}, {"H", 3}})};
  EXPECT_FALSE(v.supports(narrow, config(4, 4, 4, 1), h200).ok);
}

Config backward_config(int forward, int units, int groups, int k_split) {
  return Config({{"forward", forward}, {"units_per_block", units}, {"batch_groups", groups}, {"k_split", k_split}});
}

TEST(RnnCatalogue, PersistentBackwardTakesIssue20sTargetsAndRefusesWhatCannotBeHeld) {
  const DeviceLimits h200 = nominal_device_limits();
  const Shape targets[] = {Shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}}),
                           Shape({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 256}}),
                           Shape({{"T", 32}, {"N", 32}, {"D", 128}, {"H", 128}}),
                           Shape({{"T", 128}, {"N", 64}, {"D", 256}, {"H", 512}})};
  for (const char* name : {"lstm.backward", "gru.backward"}) {
    const Variant& v = *catalogue().find_variant(name, "persistent");
    for (const Shape& shape : targets)
      for (const DType dtype : {DType::f32, DType::tf32, DType::f16, DType::bf16}) {
        const Problem p{name, dtype, shape};
        const Support s = v.supports(p, v.default_config, h200);
        EXPECT_TRUE(s.ok) << p.key() << ": " << s.reason;
      }
    // More batch groups than rows, more units in a block than hidden units.
    const Problem small{name, DType::f32, Shape({{"T", 8}, {"N", 3}, {"D", 8}, {"H", 6}})};
    EXPECT_TRUE(v.supports(small, backward_config(0, 4, 2, 4), h200).ok);
    EXPECT_FALSE(v.supports(small, backward_config(0, 4, 4, 4), h200).ok);
    EXPECT_FALSE(v.supports(small, backward_config(0, 8, 1, 4), h200).ok);
    // 16 units x 64 rows a block: 16 lanes x 8 rows per thread still make 2048 threads.
    const Support threads = v.supports({name, DType::f32, targets[0]}, backward_config(0, 16, 1, 16), h200);
    EXPECT_FALSE(threads.ok);
    EXPECT_NE(threads.reason.find("threads"), std::string::npos) << threads.reason;
    // H = 2048: 16 columns of W_hh (G H = 8192 rows) are 512 KiB, over a block's 227 KiB at any tile.
    const Problem huge{name, DType::f16, Shape({{"T", 4}, {"N", 8}, {"D", 8}, {"H", 2048}})};
    const Support columns = v.supports(huge, backward_config(0, 16, 1, 8), h200);
    EXPECT_FALSE(columns.ok);
    EXPECT_NE(columns.reason.find("shared memory"), std::string::npos) << columns.reason;
    // H = 1024 with one unit a block in 8 batch groups: 8192 blocks, more than 132 SMs hold.
    const Problem wide{name, DType::f32, Shape({{"T", 4}, {"N", 64}, {"D", 8}, {"H", 1024}})};
    const Support resident = v.supports(wide, backward_config(0, 1, 8, 4), h200);
    EXPECT_FALSE(resident.ok);
    EXPECT_NE(resident.reason.find("resident"), std::string::npos) << resident.reason;
  }
}

TEST(RnnCatalogue, PersistentBackwardRefusesWhatItsForwardRefuses) {
  const DeviceLimits h200 = nominal_device_limits();
  const Shape h128({{"T", 64}, {"N", 64}, {"D", 128}, {"H", 128}});
  const Shape h512({{"T", 128}, {"N", 64}, {"D", 256}, {"H", 512}});
  const Variant& lstm = *catalogue().find_variant("lstm.backward", "persistent");
  const Variant& gru = *catalogue().find_variant("gru.backward", "persistent");
  // The cluster forward on Hopper at H = 128; off Hopper only the grid forward.
  EXPECT_TRUE(lstm.supports({"lstm.backward", DType::f32, h128}, backward_config(1, 4, 4, 8), h200).ok);
  DeviceLimits t4 = h200;
  t4.compute_capability = 75;
  const Support off_hopper = lstm.supports({"lstm.backward", DType::f32, h128}, backward_config(1, 4, 4, 8), t4);
  EXPECT_FALSE(off_hopper.ok);
  EXPECT_NE(off_hopper.reason.find("persistent_cluster"), std::string::npos) << off_hopper.reason;
  EXPECT_NE(off_hopper.reason.find("sm_90a"), std::string::npos) << off_hopper.reason;
  EXPECT_TRUE(lstm.supports({"lstm.backward", DType::f32, h128}, backward_config(0, 4, 4, 8), t4).ok);
  // H = 512: the LSTM's W_hh (4 MiB) is more than 16 blocks' shared memory, so the cluster forward
  // refuses it, with its reason; the GRU's (3 MiB) fits.
  const Support lstm_cluster = lstm.supports({"lstm.backward", DType::f32, h512}, backward_config(1, 4, 4, 8), h200);
  EXPECT_FALSE(lstm_cluster.ok);
  EXPECT_NE(lstm_cluster.reason.find("persistent_cluster"), std::string::npos) << lstm_cluster.reason;
  EXPECT_NE(lstm_cluster.reason.find("shared memory"), std::string::npos) << lstm_cluster.reason;
  EXPECT_TRUE(gru.supports({"gru.backward", DType::f32, h512}, backward_config(1, 4, 4, 8), h200).ok);
  // One hidden unit: no cluster of 2 blocks has a unit for each.
  const Problem one_unit{"gru.backward", DType::f32, Shape({{"T", 3}, {"N", 2}, {"D", 5}, {"H", 1}})};
  EXPECT_FALSE(gru.supports(one_unit, backward_config(1, 1, 1, 4), h200).ok);
  EXPECT_TRUE(gru.supports(one_unit, backward_config(0, 1, 1, 4), h200).ok);
}

TEST(RnnCatalogue, PersistentBackwardPlanTilesTheRowsItCannotHoldWhole) {
  namespace kr = kernels::rnn;
  const kr::ChipBudget h200{227 * 1024, 228 * 1024, 132};
  // H = 128: one unit a block in one group; W's column and all 64 rows of G H = 512 fit whole.
  const kr::BackwardPlan whole = kr::persistent_backward_plan(kr::Cell::lstm, 64, 128, {1, 1, 8}, h200);
  EXPECT_EQ(whole.blocks, 128);
  EXPECT_EQ(whole.tile, 512);
  EXPECT_EQ(whole.threads, 256);  // 64 rows, two a lane group of 8 lanes
  EXPECT_EQ(whole.rows_per_thread, 2);
  EXPECT_EQ(whole.shared_bytes, std::size_t{65} * 516 * 4);
  // H = 512 (G H = 2048): 16 units and 16 rows of 2052 floats are 257 KiB; the rows go in two
  // equal tiles of 1024 columns.
  const kr::BackwardPlan tiled = kr::persistent_backward_plan(kr::Cell::lstm, 64, 512, {16, 4, 8}, h200);
  EXPECT_EQ(tiled.blocks, 128);
  EXPECT_EQ(tiled.tile, 1024);
  EXPECT_LE(tiled.shared_bytes, h200.shared_per_block);
  // The grid's 512 blocks share the SMs four to one: a quarter of an SM each, so narrower tiles.
  const kr::BackwardPlan shared = kr::persistent_backward_plan(kr::Cell::lstm, 64, 512, {4, 4, 8}, h200);
  EXPECT_EQ(shared.blocks, 512);
  EXPECT_GT(shared.tile, 0);
  EXPECT_EQ(shared.tile % 32, 0);
  EXPECT_LE(4 * (shared.shared_bytes + 1024), h200.shared_per_sm);
  // W's columns alone past the budget: no tile.
  EXPECT_EQ(kr::persistent_backward_plan(kr::Cell::lstm, 8, 2048, {16, 1, 8}, h200).tile, 0);
  // Invalid: k_split not a power of 2.
  EXPECT_EQ(kr::persistent_backward_plan(kr::Cell::gru, 8, 64, {4, 1, 6}, h200).threads, 0);
}

TEST(RnnCatalogue, StepwiseGraphSitsBesideStepwise) {
  EXPECT_EQ(catalogue().variant_names("lstm.forward"),
            "stepwise, stepwise_graph, persistent, persistent_registers, persistent_block, persistent_cluster, cudnn");
  EXPECT_EQ(catalogue().variant_names("gru.backward"),
            "stepwise, stepwise_graph, persistent, persistent_stepwise, persistent_block, cudnn");
  const Problem p{"lstm.backward", DType::f16, Shape({{"T", 9}, {"N", 5}, {"D", 24}, {"H", 17}})};
  // The same workspace as stepwise: the graph replays stepwise's launches on it.
  EXPECT_EQ(catalogue().find_variant(p.primitive, "stepwise_graph")->workspace_bytes(p, {}),
            catalogue().find_variant(p.primitive, "stepwise")->workspace_bytes(p, {}));
}

}  // namespace
}  // namespace shapetune
