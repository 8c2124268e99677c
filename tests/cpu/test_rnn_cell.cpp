// The recurrent cells' host side: the step references composed over T steps with the products
// around them reproduce the whole-sequence references (forward and backward, with h rounded as a
// 16-bit h is); the catalogue's cell primitives (tensor order, roles, dtypes, cost, what they
// refuse) at awkward shapes, their references wired as the sequence's at T = 1.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "baselines/reference.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using Vec = std::vector<double>;

Vec uniform(std::size_t n, double bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> draw(-bound, bound);
  Vec v(n);
  for (double& e : v) e = draw(rng);
  return v;
}

// out[n][r] = sum_k in[n][k] w[r][k] (in [batch, width], w [rows, width]).
Vec times_transposed(const double* in, const Vec& w, std::int64_t batch, std::int64_t rows, std::int64_t width) {
  Vec out(static_cast<std::size_t>(batch * rows), 0.0);
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < width; ++k) out[n * rows + r] += in[n * width + k] * w[r * width + k];
  return out;
}

// out[n][k] += sum_r grad[n][r] w[r][k].
void add_back_through(const Vec& grad, const Vec& w, std::int64_t batch, std::int64_t rows, std::int64_t width,
                      double* out) {
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < width; ++k) out[n * width + k] += grad[n * rows + r] * w[r * width + k];
}

// dw[r][k] += sum_n grad[n][r] in[n][k]; db[r] += sum_n grad[n][r].
void add_weights(const Vec& grad, const double* in, std::int64_t batch, std::int64_t rows, std::int64_t width, Vec& dw,
                 Vec& db) {
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t r = 0; r < rows; ++r) {
      db[r] += grad[n * rows + r];
      for (std::int64_t k = 0; k < width; ++k) dw[r * width + k] += grad[n * rows + r] * in[n * width + k];
    }
}

void expect_near(const Vec& got, const Vec& want, const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << name << "[" << i << "]";
}

struct Layer {
  reference::RnnShape s;
  int G;
  Vec x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy, dh_t, dc_t;
  Layer(reference::RnnShape shape, int gates, std::uint64_t seed) : s(shape), G(gates) {
    std::mt19937_64 rng(seed);
    const auto T = s.steps, N = s.batch, D = s.input, H = s.hidden;
    x = uniform(T * N * D, 1, rng), h0 = uniform(N * H, 0.5, rng), c0 = uniform(N * H, 0.5, rng);
    w_ih = uniform(G * H * D, 0.6, rng), w_hh = uniform(G * H * H, 0.6, rng);
    b_ih = uniform(G * H, 0.3, rng), b_hh = uniform(G * H, 0.3, rng);
    dy = uniform(T * N * H, 1, rng), dh_t = uniform(N * H, 1, rng), dc_t = uniform(N * H, 1, rng);
  }
};

// What the stepwise rung keeps of a forward made of cells: every step's saved activations, the
// h each step read, and c0 then every step's c (LSTM).
struct CellTape {
  Vec y, h_t, c_t, saved, h_prev, cells;
};

CellTape cells_forward(const Layer& l, bool lstm, reference::Rounding round_h) {
  const auto T = l.s.steps, N = l.s.batch, D = l.s.input, H = l.s.hidden, NH = N * H, GH = l.G * H;
  CellTape tape;
  tape.y.resize(T * NH), tape.saved.resize(T * N * 4 * H), tape.h_prev.resize(T * NH);
  tape.cells = l.c0;
  tape.cells.resize((T + 1) * NH);
  Vec h = l.h0;
  for (std::int64_t t = 0; t < T; ++t) {
    std::copy(h.begin(), h.end(), tape.h_prev.begin() + t * NH);
    const Vec gx = times_transposed(l.x.data() + t * N * D, l.w_ih, N, GH, D);
    const Vec gh = times_transposed(h.data(), l.w_hh, N, GH, H);
    double* saved = tape.saved.data() + t * N * 4 * H;
    if (lstm)
      reference::lstm_cell_forward(N, H, gx.data(), gh.data(), l.b_ih.data(), l.b_hh.data(),
                                   tape.cells.data() + t * NH, round_h, h.data(), tape.cells.data() + (t + 1) * NH,
                                   saved);
    else
      reference::gru_cell_forward(N, H, gx.data(), gh.data(), l.b_ih.data(), l.b_hh.data(), tape.h_prev.data() + t * NH,
                                  round_h, h.data(), saved);
    std::copy(h.begin(), h.end(), tape.y.begin() + t * NH);
  }
  tape.h_t = h;
  tape.c_t.assign(tape.cells.end() - NH, tape.cells.end());
  return tape;
}

class RnnCellComposition : public ::testing::TestWithParam<reference::RnnShape> {};

TEST_P(RnnCellComposition, LstmCellsMakeTheLayerForwardAndBackward) {
  const Layer l(GetParam(), 4, 11);
  const auto T = l.s.steps, N = l.s.batch, D = l.s.input, H = l.s.hidden, NH = N * H, GH = 4 * H;
  const reference::Rounding round_h = reference::round_to_bf16;  // the cells must round h as the layer does
  const CellTape tape = cells_forward(l, true, round_h);
  Vec y(T * NH), h_t(NH), c_t(NH);
  reference::lstm_forward(l.s, l.x.data(), l.h0.data(), l.c0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(),
                          l.b_hh.data(), round_h, y.data(), h_t.data(), c_t.data());
  expect_near(tape.y, y, "y");
  expect_near(tape.h_t, h_t, "h_t");
  expect_near(tape.c_t, c_t, "c_t");

  Vec dx(T * N * D, 0.0), dw_ih(GH * D, 0.0), dw_hh(GH * H, 0.0), db(GH, 0.0), db_unused(GH, 0.0);
  Vec dh = l.dh_t, dc = l.dc_t, d_gates(N * GH);
  for (std::int64_t t = T - 1; t >= 0; --t) {
    reference::lstm_cell_backward(N, H, tape.saved.data() + t * N * 4 * H, tape.cells.data() + t * NH,
                                  tape.cells.data() + (t + 1) * NH, l.dy.data() + t * NH, dh.data(), dc.data(),
                                  d_gates.data());
    add_back_through(d_gates, l.w_ih, N, GH, D, dx.data() + t * N * D);
    std::fill(dh.begin(), dh.end(), 0.0);  // the LSTM's carried dh is d_gates W_hh alone
    add_back_through(d_gates, l.w_hh, N, GH, H, dh.data());
    add_weights(d_gates, l.x.data() + t * N * D, N, GH, D, dw_ih, db);
    add_weights(d_gates, tape.h_prev.data() + t * NH, N, GH, H, dw_hh, db_unused);
  }
  Vec rx(T * N * D), rh0(NH), rc0(NH), rw_ih(GH * D), rw_hh(GH * H), rb_ih(GH), rb_hh(GH);
  reference::lstm_backward(l.s, l.x.data(), l.h0.data(), l.c0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(),
                           l.b_hh.data(), round_h, l.dy.data(), l.dh_t.data(), l.dc_t.data(), rx.data(), rh0.data(),
                           rc0.data(), rw_ih.data(), rw_hh.data(), rb_ih.data(), rb_hh.data());
  expect_near(dx, rx, "dx");
  expect_near(dh, rh0, "dh0");
  expect_near(dc, rc0, "dc0");
  expect_near(dw_ih, rw_ih, "dw_ih");
  expect_near(dw_hh, rw_hh, "dw_hh");
  expect_near(db, rb_ih, "db_ih");
  expect_near(db, rb_hh, "db_hh");
}

TEST_P(RnnCellComposition, GruCellsMakeTheLayerForwardAndBackward) {
  const Layer l(GetParam(), 3, 12);
  const auto T = l.s.steps, N = l.s.batch, D = l.s.input, H = l.s.hidden, NH = N * H, GH = 3 * H;
  const reference::Rounding round_h = reference::round_to_f16;
  const CellTape tape = cells_forward(l, false, round_h);
  Vec y(T * NH), h_t(NH);
  reference::gru_forward(l.s, l.x.data(), l.h0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(), l.b_hh.data(),
                         round_h, y.data(), h_t.data());
  expect_near(tape.y, y, "y");
  expect_near(tape.h_t, h_t, "h_t");

  Vec dx(T * N * D, 0.0), dw_ih(GH * D, 0.0), dw_hh(GH * H, 0.0), db_ih(GH, 0.0), db_hh(GH, 0.0);
  Vec dh = l.dh_t, d_input(N * GH), d_hidden(N * GH);
  for (std::int64_t t = T - 1; t >= 0; --t) {
    // The cell leaves dh z in dh; the product through W_hh adds to it.
    reference::gru_cell_backward(N, H, tape.saved.data() + t * N * 4 * H, tape.h_prev.data() + t * NH,
                                 l.dy.data() + t * NH, dh.data(), d_input.data(), d_hidden.data());
    add_back_through(d_input, l.w_ih, N, GH, D, dx.data() + t * N * D);
    add_back_through(d_hidden, l.w_hh, N, GH, H, dh.data());
    add_weights(d_input, l.x.data() + t * N * D, N, GH, D, dw_ih, db_ih);
    add_weights(d_hidden, tape.h_prev.data() + t * NH, N, GH, H, dw_hh, db_hh);
  }
  Vec rx(T * N * D), rh0(NH), rw_ih(GH * D), rw_hh(GH * H), rb_ih(GH), rb_hh(GH);
  reference::gru_backward(l.s, l.x.data(), l.h0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(), l.b_hh.data(),
                          round_h, l.dy.data(), l.dh_t.data(), rx.data(), rh0.data(), rw_ih.data(), rw_hh.data(),
                          rb_ih.data(), rb_hh.data());
  expect_near(dx, rx, "dx");
  expect_near(dh, rh0, "dh0");
  expect_near(dw_ih, rw_ih, "dw_ih");
  expect_near(dw_hh, rw_hh, "dw_hh");
  expect_near(db_ih, rb_ih, "db_ih");
  expect_near(db_hh, rb_hh, "db_hh");
}

// T, N, D, H: one unit; a single row; H not a multiple of 4; H = 100.
INSTANTIATE_TEST_SUITE_P(Shapes, RnnCellComposition,
                         ::testing::Values(reference::RnnShape{3, 1, 2, 1}, reference::RnnShape{4, 3, 5, 7},
                                           reference::RnnShape{2, 2, 3, 100}));

// ---- the catalogue's cell primitives ------------------------------------------------------------

Shape cell_shape(std::int64_t N, std::int64_t H) { return Shape({{"N", N}, {"H", H}}); }

std::vector<std::string> names_of(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& s : specs) names.push_back(s.name);
  return names;
}

TEST(RnnCellCatalogue, TensorsRolesAndDtypes) {
  const Shape shape = cell_shape(3, 100);
  const auto lstm = catalogue().find_primitive("lstm_cell.forward")->tensors({"lstm_cell.forward", DType::bf16, shape});
  EXPECT_EQ(names_of(lstm), (std::vector<std::string>{"gx", "gh", "b_ih", "b_hh", "c_prev", "h", "c", "saved"}));
  // Storage type: the biases and h; fp32: the GEMMs' products, the cell state, the saved gates.
  const std::vector<DType> lstm_types = {DType::f32, DType::f32, DType::bf16, DType::bf16,
                                         DType::f32, DType::bf16, DType::f32, DType::f32};
  for (std::size_t k = 0; k < lstm.size(); ++k) {
    EXPECT_EQ(lstm[k].dtype, lstm_types[k]) << lstm[k].name;
    EXPECT_EQ(lstm[k].role, k < 5 ? TensorRole::input : TensorRole::output) << lstm[k].name;
  }
  EXPECT_EQ(lstm[0].extents, (std::vector<std::int64_t>{3, 400}));
  EXPECT_EQ(lstm[2].extents, (std::vector<std::int64_t>{400}));
  EXPECT_EQ(lstm[7].extents, (std::vector<std::int64_t>{3, 400}));

  const auto gru = catalogue().find_primitive("gru_cell.forward")->tensors({"gru_cell.forward", DType::f16, shape});
  EXPECT_EQ(names_of(gru), (std::vector<std::string>{"gx", "gh", "b_ih", "b_hh", "h_prev", "h", "saved"}));
  EXPECT_EQ(gru[0].extents, (std::vector<std::int64_t>{3, 300}));
  EXPECT_EQ(gru[4].dtype, DType::f16);
  EXPECT_EQ(gru[6].extents, (std::vector<std::int64_t>{3, 400}));  // r, z, n and W_hn h + b_hn

  const auto lstm_back =
      catalogue().find_primitive("lstm_cell.backward")->tensors({"lstm_cell.backward", DType::f16, shape});
  EXPECT_EQ(names_of(lstm_back), (std::vector<std::string>{"saved", "c_prev", "c", "dy", "dh", "dc", "d_gates"}));
  EXPECT_EQ(lstm_back[3].dtype, DType::f16);
  EXPECT_EQ(lstm_back[4].role, TensorRole::input);
  EXPECT_EQ(lstm_back[5].role, TensorRole::inout);
  EXPECT_EQ(lstm_back[6].extents, (std::vector<std::int64_t>{3, 400}));

  const auto gru_back =
      catalogue().find_primitive("gru_cell.backward")->tensors({"gru_cell.backward", DType::f32, shape});
  EXPECT_EQ(names_of(gru_back), (std::vector<std::string>{"saved", "h_prev", "dy", "dh", "d_input", "d_hidden"}));
  EXPECT_EQ(gru_back[3].role, TensorRole::inout);
  EXPECT_EQ(gru_back[5].extents, (std::vector<std::int64_t>{3, 300}));
}

TEST(RnnCellCatalogue, CostIsEveryTensorsBytesAndEveryShapeIsSupported) {
  // LSTM forward at N = 2, H = 3, f16: gx, gh 2 x 12 fp32 each; biases 12 f16 each; c_prev, c
  // 6 fp32 each; h 6 f16; saved 2 x 12 fp32.
  const Primitive& lstm = *catalogue().find_primitive("lstm_cell.forward");
  EXPECT_DOUBLE_EQ(lstm.cost({"lstm_cell.forward", DType::f16, cell_shape(2, 3)}).bytes,
                   (24 + 24 + 12 + 24) * 4.0 + (12 + 12 + 6) * 2.0);
  // The GRU backward's dh is read and written: 2 x 6 fp32.
  const Primitive& gru_back = *catalogue().find_primitive("gru_cell.backward");
  EXPECT_DOUBLE_EQ(gru_back.cost({"gru_cell.backward", DType::f32, cell_shape(2, 3)}).bytes,
                   (24 + 6 + 6 + 2 * 6 + 18 + 18) * 4.0);
  EXPECT_GT(gru_back.cost({"gru_cell.backward", DType::f32, cell_shape(2, 3)}).flops, 0);

  const DeviceLimits h200 = nominal_device_limits();
  for (const char* name : {"lstm_cell.forward", "gru_cell.forward", "lstm_cell.backward", "gru_cell.backward"}) {
    const Primitive& p = *catalogue().find_primitive(name);
    EXPECT_EQ(p.default_variant, "fused") << name;
    EXPECT_EQ(catalogue().variant_names(name), "fused") << name;
    for (const auto& [N, H] : std::vector<std::pair<int, int>>{{1, 1}, {1, 100}, {7, 3}, {64, 1024}})
      for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        const Problem problem{name, dtype, cell_shape(N, H)};
        EXPECT_TRUE(p.validate_shape(problem.shape).ok) << problem.key();
        EXPECT_TRUE(catalogue().find_variant(name, "fused")->supports(problem, {}, h200).ok) << problem.key();
      }
    EXPECT_FALSE(p.validate_shape(cell_shape(1, std::int64_t{1} << 29)).ok) << name;
    EXPECT_FALSE(p.validate_shape(cell_shape(std::int64_t{1} << 20, std::int64_t{1} << 12)).ok) << name;
    // One step: the tolerance has no T to grow with, and 16-bit h is looser than fp32.
    EXPECT_GT(p.tolerance(DType::f32).atol, 0);
  }
  EXPECT_GT(lstm.tolerance(DType::bf16).atol, lstm.tolerance(DType::f32).atol);
}

HostTensors draw(const std::vector<TensorSpec>& specs, std::mt19937_64& rng) {
  HostTensors t;
  for (const TensorSpec& s : specs) {
    std::uniform_real_distribution<double> u(s.low, s.high);
    Vec v(static_cast<std::size_t>(s.elements()));
    for (double& e : v) e = s.role == TensorRole::output ? std::nan("") : u(rng);
    t.push_back(std::move(v));
  }
  return t;
}

// The catalogue's cell references, in their tensor order, against the layer's at T = 1: the
// forward's h (and c) are the layer's y (and c_t); the backward fed the forward's saved
// activations gives the layer's dh0 (dc0) and bias gradients once the products are added.
TEST(RnnCellCatalogue, ReferencesAreTheLayersAtOneStep) {
  for (const auto& [N, H] : std::vector<std::pair<int, int>>{{1, 1}, {3, 100}, {2, 7}})
    for (const bool lstm : {true, false}) {
      const std::string cell = lstm ? "lstm_cell" : "gru_cell";
      const int G = lstm ? 4 : 3;
      const std::int64_t D = 5, NH = N * H, GH = G * H;
      const Layer l({1, N, D, H}, G, 100 + static_cast<std::uint64_t>(N * H));
      const Problem forward{cell + ".forward", DType::f32, cell_shape(N, H)};
      const Primitive& fp = *catalogue().find_primitive(forward.primitive);
      std::mt19937_64 rng(7);
      HostTensors f = draw(fp.tensors(forward), rng);
      f[0] = times_transposed(l.x.data(), l.w_ih, N, GH, D);
      f[1] = times_transposed(l.h0.data(), l.w_hh, N, GH, H);
      f[2] = l.b_ih, f[3] = l.b_hh, f[4] = lstm ? l.c0 : l.h0;
      fp.reference(forward, {}, f);
      const reference::Rounding same = reference::round_to_f32;
      Vec y(NH), h_t(NH), c_t(NH);
      if (lstm)
        reference::lstm_forward(l.s, l.x.data(), l.h0.data(), l.c0.data(), l.w_ih.data(), l.w_hh.data(),
                                l.b_ih.data(), l.b_hh.data(), same, y.data(), h_t.data(), c_t.data());
      else
        reference::gru_forward(l.s, l.x.data(), l.h0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(),
                               l.b_hh.data(), same, y.data(), h_t.data());
      expect_near(f[5], y, forward.key() + " h");
      if (lstm) expect_near(f[6], c_t, forward.key() + " c");
      const Vec& saved = f[lstm ? 7 : 6];

      const Problem backward{cell + ".backward", DType::f32, cell_shape(N, H)};
      const Primitive& bp = *catalogue().find_primitive(backward.primitive);
      HostTensors b = draw(bp.tensors(backward), rng);
      Vec dh0, db_ih(GH, 0.0), db_hh(GH, 0.0), unused_w(GH * H, 0.0);
      if (lstm) {
        b[0] = saved, b[1] = l.c0, b[2] = f[6], b[3] = l.dy, b[4] = l.dh_t, b[5] = l.dc_t;
        bp.reference(backward, {}, b);
        dh0.assign(NH, 0.0);
        add_back_through(b[6], l.w_hh, N, GH, H, dh0.data());
        add_weights(b[6], l.h0.data(), N, GH, H, unused_w, db_ih);
      } else {
        b[0] = saved, b[1] = l.h0, b[2] = l.dy, b[3] = l.dh_t;
        bp.reference(backward, {}, b);
        dh0 = b[3];
        add_back_through(b[5], l.w_hh, N, GH, H, dh0.data());
        add_weights(b[4], l.h0.data(), N, GH, H, unused_w, db_ih);
        add_weights(b[5], l.h0.data(), N, GH, H, unused_w, db_hh);
      }
      Vec rx(N * D), rh0(NH), rc0(NH), rw_ih(GH * D), rw_hh(GH * H), rb_ih(GH), rb_hh(GH);
      if (lstm)
        reference::lstm_backward(l.s, l.x.data(), l.h0.data(), l.c0.data(), l.w_ih.data(), l.w_hh.data(),
                                 l.b_ih.data(), l.b_hh.data(), same, l.dy.data(), l.dh_t.data(), l.dc_t.data(),
                                 rx.data(), rh0.data(), rc0.data(), rw_ih.data(), rw_hh.data(), rb_ih.data(),
                                 rb_hh.data());
      else
        reference::gru_backward(l.s, l.x.data(), l.h0.data(), l.w_ih.data(), l.w_hh.data(), l.b_ih.data(),
                                l.b_hh.data(), same, l.dy.data(), l.dh_t.data(), rx.data(), rh0.data(), rw_ih.data(),
                                rw_hh.data(), rb_ih.data(), rb_hh.data());
      expect_near(dh0, rh0, backward.key() + " dh0");
      expect_near(db_ih, rb_ih, backward.key() + " db_ih");
      if (lstm) expect_near(b[5], rc0, backward.key() + " dc0");
      else expect_near(db_hh, rb_hh, backward.key() + " db_hh");
    }
}

}  // namespace
}  // namespace shapetune
