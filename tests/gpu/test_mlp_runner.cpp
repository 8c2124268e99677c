// The MLP runner on a GPU: analytic gradients through the dispatched operations against the
// float64 network, the graph-replayed Adam steps against a host Adam, and one epoch on 10,000
// Fashion-MNIST images.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "models/idx.hpp"
#include "models/mlp.hpp"
#include "support/fashion_mnist.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

// |got - want| <= atol + rtol |want| per element, atol relative to the largest gradient: the
// float GEMMs sum up to 784 products, whose rounding is relative to the sum's terms.
void expect_gradients_match(const GradientResult& got, const GradientResult& want, const std::string& what) {
  ASSERT_EQ(got.gradients.size(), want.gradients.size());
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << what;
  double max_abs = 0;
  for (float g : want.gradients) max_abs = std::max(max_abs, static_cast<double>(std::abs(g)));
  ASSERT_GT(max_abs, 0);
  int bad = 0;
  for (std::size_t i = 0; i < got.gradients.size(); ++i) {
    const double g = got.gradients[i], w = want.gradients[i];
    if (!(std::abs(g - w) <= 1e-5 * max_abs + 1e-3 * std::abs(w)) && bad++ < 5)
      ADD_FAILURE() << what << ": gradient " << i << " is " << g << ", float64 says " << w;
  }
  EXPECT_EQ(bad, 0) << what;
}

class MlpGradients : public ::testing::TestWithParam<DispatchMode> {};

TEST_P(MlpGradients, MatchTheFloat64NetworkOnAwkwardBatches) {
  SHAPETUNE_REQUIRE_GPU();
  MlpOptions o;
  o.dispatch = GetParam();
  MlpTrainer trainer(o);  // no database: every problem takes its default (or library) variant
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> px(-0.8f, 2.8f);  // the normalised pixel range
  for (int rows : {1, 5, 33}) {
    std::vector<float> x(static_cast<std::size_t>(rows) * 784);
    for (auto& v : x) v = px(rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
    const GradientResult got = trainer.gradients(x, labels);
    const GradientResult want = mlp_reference_gradients(trainer.parameters(), x, labels);
    expect_gradients_match(got, want, "batch " + std::to_string(rows));
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, MlpGradients, ::testing::Values(DispatchMode::tuned, DispatchMode::library),
                         [](const auto& info) { return info.param == DispatchMode::tuned ? "tuned" : "library"; });

// Host Adam (no decay) on float state, as the kernels compute it up to rounding.
void host_adam(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v, const std::vector<float>& g,
               int t, double lr) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (std::size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * static_cast<double>(g[i]);
    const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
    p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

// Training on exactly one batch: each epoch is one replay of the step graph and one Adam step
// (launched after it, or inside it as a child graph swapped for the next step's). The batch's order is shuffled, but the mean loss and its
// gradients do not depend on the order, so a host Adam over gradients() predicts every step.
class MlpTraining : public ::testing::TestWithParam<bool> {};

TEST_P(MlpTraining, GraphReplaysTakeTheAdamStepsOfTheHost) {
  SHAPETUNE_REQUIRE_GPU();
  SHAPETUNE_REQUIRE_FASHION_MNIST();
  FashionMnist data = load_fashion_mnist(test_support::fashion_mnist_dir());
  MlpOptions o;
  o.adam_in_graph = GetParam();
  o.batch = 64;
  o.train_limit = 64;
  const std::vector<std::uint8_t> pixels(data.train.pixels.begin(), data.train.pixels.begin() + 64 * 784);
  const std::vector<float> x = mlp_normalise(pixels);
  const std::vector<std::int32_t> labels(data.train.labels.begin(), data.train.labels.begin() + 64);
  MlpTrainer trainer(o, std::move(data));
  const std::vector<float> p0 = trainer.parameters();
  std::vector<double> p(p0.begin(), p0.end()), m(p.size(), 0.0), v(p.size(), 0.0);
  // The graph sums the batch's rows in another order than gradients() did, so gradients that
  // cancel to rounding noise may differ in sign, and Adam's first steps turn a sign into a full
  // step of lr. Those parameters are left out (and counted); the rest must agree.
  std::vector<bool> noisy(p.size(), false);
  for (int t = 1; t <= 3; ++t) {
    const GradientResult g = trainer.gradients(x, labels);
    float max_g = 0;
    for (float gi : g.gradients) max_g = std::max(max_g, std::abs(gi));
    for (std::size_t i = 0; i < p.size(); ++i) noisy[i] = noisy[i] || (g.gradients[i] != 0 && std::abs(g.gradients[i]) < 1e-4f * max_g);
    host_adam(p, m, v, g.gradients, t, o.lr);
    const EpochResult e = trainer.train_epoch();
    EXPECT_EQ(e.steps, 1);
    EXPECT_NEAR(e.train_loss, g.loss, 1e-5 * g.loss) << "step " << t;
    const std::vector<float> got = trainer.parameters();
    int bad = 0;
    std::size_t compared = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (noisy[i]) continue;
      ++compared;
      // A step moves a parameter by up to lr; allow a thousandth of it plus float rounding of p.
      if (!(std::abs(got[i] - p[i]) <= 1e-3 * o.lr + 1e-6 * std::abs(p[i])) && bad++ < 5)
        ADD_FAILURE() << "step " << t << ": parameter " << i << " is " << got[i] << ", host Adam says " << p[i];
    }
    EXPECT_EQ(bad, 0) << "step " << t;
    EXPECT_GT(compared, p.size() * 9 / 10) << "step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Adam, MlpTraining, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "in_graph" : "after_graph"; });  // adam_in_graph

class MlpEpoch : public ::testing::TestWithParam<DispatchMode> {};

// Library dispatch too: its cuBLAS calls are captured into the step's graph with Adam's update.
TEST_P(MlpEpoch, OneEpochOnTenThousandImagesReaches75Percent) {
  SHAPETUNE_REQUIRE_GPU();
  SHAPETUNE_REQUIRE_FASHION_MNIST();
  MlpOptions o;
  o.dispatch = GetParam();
  o.train_limit = 10000;
  MlpTrainer trainer(o, load_fashion_mnist(test_support::fashion_mnist_dir()));
  const EpochResult e = trainer.train_epoch();
  EXPECT_EQ(e.steps, 10000 / 128);
  EXPECT_GE(e.test_accuracy, 0.75) << "loss " << e.train_loss;
  EXPECT_TRUE(std::isfinite(e.train_loss));

  // Same seed, same device, same variants: the same parameters, bit for bit.
  MlpTrainer again(o, load_fashion_mnist(test_support::fashion_mnist_dir()));
  again.train_epoch();
  EXPECT_EQ(trainer.parameters(), again.parameters());
}

INSTANTIATE_TEST_SUITE_P(Dispatch, MlpEpoch, ::testing::Values(DispatchMode::tuned, DispatchMode::library),
                         [](const auto& info) { return std::string(dispatch_mode_name(info.param)); });

}  // namespace
}  // namespace shapetune
