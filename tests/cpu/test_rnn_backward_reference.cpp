// The float64 backward references of the recurrent family against central finite differences
// of the float64 forward references: every gradient tensor of both cells at a tiny shape.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "baselines/reference.hpp"

namespace shapetune {
namespace {

constexpr reference::RnnShape kShape{3, 2, 3, 4};  // T, N, D, H
double identity(double v) { return v; }

std::vector<double> uniform(std::size_t n, double bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> draw(-bound, bound);
  std::vector<double> v(n);
  for (double& e : v) e = draw(rng);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Each element of `input` nudged both ways: (L(+eps) - L(-eps)) / 2 eps against `gradient`. The
// step balances the truncation error (eps^2 times a third derivative of order 1) against the
// cancellation (1e-16 / eps): both near 1e-10, far below the 1e-6 asked.
void expect_gradient(const std::string& name, std::vector<double>& input, const std::vector<double>& gradient,
                     const std::function<double()>& loss) {
  constexpr double eps = 1e-5;
  ASSERT_EQ(input.size(), gradient.size()) << name;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const double kept = input[i];
    input[i] = kept + eps;
    const double up = loss();
    input[i] = kept - eps;
    const double down = loss();
    input[i] = kept;
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(gradient[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << name << "[" << i << "]";
  }
}

TEST(RnnBackwardReference, LstmMatchesFiniteDifferences) {
  const auto [T, N, D, H] = kShape;
  const std::int64_t G = 4 * H;
  std::mt19937_64 rng(20);
  auto x = uniform(T * N * D, 1, rng), h0 = uniform(N * H, 0.5, rng), c0 = uniform(N * H, 0.5, rng);
  auto w_ih = uniform(G * D, 0.8, rng), w_hh = uniform(G * H, 0.8, rng), b_ih = uniform(G, 0.5, rng),
       b_hh = uniform(G, 0.5, rng);
  const auto dy = uniform(T * N * H, 1, rng), dh_t = uniform(N * H, 1, rng), dc_t = uniform(N * H, 1, rng);

  std::vector<double> dx(x.size()), dh0(h0.size()), dc0(c0.size()), dw_ih(w_ih.size()), dw_hh(w_hh.size()),
      db_ih(b_ih.size()), db_hh(b_hh.size());
  reference::lstm_backward(kShape, x.data(), h0.data(), c0.data(), w_ih.data(), w_hh.data(), b_ih.data(),
                           b_hh.data(), identity, dy.data(), dh_t.data(), dc_t.data(), dx.data(), dh0.data(),
                           dc0.data(), dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data());
  const auto loss = [&] {
    std::vector<double> y(T * N * H), h_t(N * H), c_t(N * H);
    reference::lstm_forward(kShape, x.data(), h0.data(), c0.data(), w_ih.data(), w_hh.data(), b_ih.data(),
                            b_hh.data(), identity, y.data(), h_t.data(), c_t.data());
    return dot(dy, y) + dot(dh_t, h_t) + dot(dc_t, c_t);
  };
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dh0", h0, dh0, loss);
  expect_gradient("dc0", c0, dc0, loss);
  expect_gradient("dw_ih", w_ih, dw_ih, loss);
  expect_gradient("dw_hh", w_hh, dw_hh, loss);
  expect_gradient("db_ih", b_ih, db_ih, loss);
  expect_gradient("db_hh", b_hh, db_hh, loss);
}

TEST(RnnBackwardReference, GruMatchesFiniteDifferences) {
  const auto [T, N, D, H] = kShape;
  const std::int64_t G = 3 * H;
  std::mt19937_64 rng(21);
  auto x = uniform(T * N * D, 1, rng), h0 = uniform(N * H, 0.5, rng);
  auto w_ih = uniform(G * D, 0.8, rng), w_hh = uniform(G * H, 0.8, rng), b_ih = uniform(G, 0.5, rng),
       b_hh = uniform(G, 0.5, rng);
  const auto dy = uniform(T * N * H, 1, rng), dh_t = uniform(N * H, 1, rng);

  std::vector<double> dx(x.size()), dh0(h0.size()), dw_ih(w_ih.size()), dw_hh(w_hh.size()), db_ih(b_ih.size()),
      db_hh(b_hh.size());
  reference::gru_backward(kShape, x.data(), h0.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), identity,
                          dy.data(), dh_t.data(), dx.data(), dh0.data(), dw_ih.data(), dw_hh.data(), db_ih.data(),
                          db_hh.data());
  const auto loss = [&] {
    std::vector<double> y(T * N * H), h_t(N * H);
    reference::gru_forward(kShape, x.data(), h0.data(), w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(),
                           identity, y.data(), h_t.data());
    return dot(dy, y) + dot(dh_t, h_t);
  };
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dh0", h0, dh0, loss);
  expect_gradient("dw_ih", w_ih, dw_ih, loss);
  expect_gradient("dw_hh", w_hh, dw_hh, loss);
  expect_gradient("db_ih", b_ih, db_ih, loss);
  expect_gradient("db_hh", b_hh, db_hh, loss);
  // The candidate's biases differ (r scales b_hn's gradient); r and z's are the same.
  for (std::int64_t k = 0; k < 2 * H; ++k) EXPECT_DOUBLE_EQ(db_ih[k], db_hh[k]);
  EXPECT_NE(db_ih[2 * H], db_hh[2 * H]);
}

}  // namespace
}  // namespace shapetune
