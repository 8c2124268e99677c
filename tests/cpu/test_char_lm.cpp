// The character-level LSTM/GRU runners' host side: `train lstm|gru` option errors (raised before
// any device is needed), the statistical suite's options and summary, shapes/char_lm.yaml against
// the runner's problems, the parameter layout and its seeded initialisation, the float64 training
// step against finite differences of its own loss (the reference the GPU tests compare with), the
// reference Adam, bits per character, the safetensors round trip and sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "models/char_lm.hpp"
#include "models/safetensors.hpp"
#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using test_support::run_shapetune;

CharLmShape tiny(RecurrentCell cell, int layers) { return CharLmShape{cell, 5, 3, 4, layers}; }

TEST(CharLmOptions, BadValuesAreUsageErrorsBeforeAnyDeviceIsNeeded) {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"train", "lstm", "--layers", "3"}, "--layers must be between 1 and 2"},
      {{"train", "gru", "--hidden", "0"}, "--hidden must be between 1 and 8192"},
      {{"train", "lstm", "--dtype", "f16"}, "f32 only"},
      {{"train", "lstm", "--epochs", "2", "--steps", "5"}, "--epochs or --steps, not both"},
      {{"train", "gru", "--seq-len", "x"}, "--seq-len expects an integer"},
      {{"train", "lstm", "--seq-len", "65536", "--batch", "65536"}, "at most 2^24"},
      {{"train", "lstm", "--temperature", "-1"}, "--temperature must be between"},
      {{"train", "mlp", "--hidden", "64"}, "is an option of `train lstm`"},
      {{"train", "lstm", "--train-limit", "5"}, "is an option of `train mlp`"},
  };
  for (const auto& c : cases) {
    const auto r = run_shapetune(c.args);
    EXPECT_NE(r.code, 0) << c.args[1] << " " << c.args[2];
    EXPECT_CONTAINS(r.err, c.says);
  }
}

TEST(CharLmOptions, HelpNamesTheRunnersAndSharedOptionsOnce) {
  const auto r = run_shapetune({"train", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "`lstm` (character-level language model");
  EXPECT_CONTAINS(r.out, "lstm, gru: streams a batch");
  std::size_t count = 0;
  for (std::size_t at = r.out.find("--batch B"); at != std::string::npos; at = r.out.find("--batch B", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << r.out;
}

TEST(CharLmTimingSuite, OptionErrorsAreUsageErrorsBeforeAnyDeviceIsNeeded) {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"train", "gru", "--warmup-steps", "10"}, "--warmup-steps sets a count of the statistical suite: add --timing-suite"},
      {{"train", "gru", "--timed-steps", "100"}, "--timed-steps sets a count of the statistical suite: add --timing-suite"},
      {{"train", "gru", "--timing-suite", "--timed-steps", "9"}, "--timed-steps must be between 10 and 100000"},
      {{"train", "lstm", "--timing-suite", "--timed-steps", "many"}, "--timed-steps expects an integer"},
      {{"train", "gru", "--timing-suite", "--warmup-steps", "-1"}, "--warmup-steps must be between 0 and 100000"},
      {{"train", "gru", "--timing-suite", "--warmup-steps", "100001"}, "--warmup-steps must be between 0 and 100000"},
      {{"train", "mlp", "--timing-suite"}, "--timing-suite is an option of `train lstm`"},
      {{"train", "logreg", "--timed-steps", "150"}, "--timed-steps is an option of `train lstm`"},
  };
  for (const auto& c : cases) {
    const auto r = run_shapetune(c.args);
    EXPECT_EQ(r.code, 2) << c.args[1] << " " << c.args[2];
    EXPECT_CONTAINS(r.err, c.says);
  }
}

TEST(CharLmTimingSuite, HelpExplainsTheSuite) {
  const auto r = run_shapetune({"train", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "--timing-suite");
  EXPECT_CONTAINS(r.out, "lstm, gru: the suite's untimed steps (default 50; needs --timing-suite)");
  EXPECT_CONTAINS(r.out, "lstm, gru: the suite's timed steps, at least 10 (default 150; needs --timing-suite)");
  EXPECT_CONTAINS(r.out, "50 warm-up and\n150 timed training steps");
}

TEST(CharLmTimingSuite, DefaultsAreTheOriginalWorksAndBadCountsAreRefused) {
  const CharLmTimingSuiteOptions defaults;
  EXPECT_EQ(defaults.warmup_steps, 50);
  EXPECT_EQ(defaults.timed_steps, 150);
  EXPECT_NO_THROW(validate(defaults));
  EXPECT_NO_THROW(validate(CharLmTimingSuiteOptions{0, 10}));
  EXPECT_THROW(validate(CharLmTimingSuiteOptions{-1, 150}), std::invalid_argument);
  EXPECT_THROW(validate(CharLmTimingSuiteOptions{50, 9}), std::invalid_argument);
  EXPECT_THROW(validate(CharLmTimingSuiteOptions{50, 100001}), std::invalid_argument);
}

// Percentiles interpolate linearly between order statistics at q (n - 1): for 150 steps of
// 1, 2, ..., 150 ms in a scrambled order the median is 75.5 ms, p10 = 1 + 0.1 x 149 = 15.9 ms and
// p90 = 1 + 0.9 x 149 = 135.1 ms.
TEST(CharLmTimingSuite, SummaryIsTheMedianP10AndP90OfTheTimedSteps) {
  CharLmTimingSuite suite;
  suite.warmup_steps = 50;
  for (int i = 0; i < 150; ++i) suite.step_milliseconds.push_back(1 + (i * 37) % 150);  // 37 is prime to 150
  const SampleSummary t = suite.summary();
  EXPECT_EQ(t.count, 150);
  EXPECT_DOUBLE_EQ(t.median, 75.5);
  EXPECT_NEAR(t.p10, 15.9, 1e-12);
  EXPECT_NEAR(t.p90, 135.1, 1e-12);
  EXPECT_EQ(t.min, 1);
  EXPECT_EQ(suite.step_milliseconds[1], 38) << "the steps stay in the order they ran";

  CharLmTimingSuite small;
  small.step_milliseconds = {4, 1, 3, 2, 5, 10, 7, 6, 9, 8, 11};  // 1..11: the median is 6, p10 2, p90 10
  EXPECT_DOUBLE_EQ(small.summary().median, 6);
  EXPECT_DOUBLE_EQ(small.summary().p10, 2);
  EXPECT_DOUBLE_EQ(small.summary().p90, 10);
  EXPECT_THROW(CharLmTimingSuite{}.summary(), std::invalid_argument);
}

// The default corpus' distinct characters: the V of shapes/char_lm.yaml.
constexpr int kJargonVocabulary = 155;

// shapes/char_lm.yaml holds exactly the problems the runners resolve at batch 64, --seq-len 64
// and 128, --hidden 128, 256 and 512 (the embedding as wide), 1 and 2 layers, LSTM and GRU, on
// the default corpus, so sweeping it tunes every dispatched launch of those runs.
TEST(CharLmShapes, TheMatrixIsExactlyTheRunnersProblems) {
  std::set<std::string> in_runner;
  for (const RecurrentCell cell : {RecurrentCell::lstm, RecurrentCell::gru})
    for (const int seq_len : {64, 128})
      for (const int hidden : {128, 256, 512})
        for (const int layers : {1, 2}) {
          const CharLmShape s{cell, kJargonVocabulary, hidden, hidden, layers};
          for (const ModelOp& op : char_lm_operations(s, seq_len, 64, char_lm_flat_size(s))) {
            EXPECT_NE(catalogue().find_primitive(op.problem.primitive), nullptr) << op.problem.primitive;
            in_runner.insert(op.problem.key());
          }
        }
  const ShapeFile file = load_shape_file((test_support::source_dir() / "shapes" / "char_lm.yaml").string(), catalogue());
  std::set<std::string> in_file;
  for (const auto& p : file.problems) EXPECT_TRUE(in_file.insert(p.problem.key()).second) << "twice: " << p.problem.key();
  for (const auto& key : in_runner) EXPECT_TRUE(in_file.count(key)) << "missing from the file: " << key;
  for (const auto& key : in_file) EXPECT_TRUE(in_runner.count(key)) << "not a problem of the runner: " << key;
}

TEST(CharLmShapes, TheDefaultCorpusHasTheFilesVocabulary) {
  if (!std::filesystem::exists(kDefaultCharCorpus))
    GTEST_SKIP() << kDefaultCharCorpus << " is absent (Debian's jargon-text package)";
  EXPECT_EQ(load_char_corpus(kDefaultCharCorpus).vocabulary.size(), kJargonVocabulary)
      << "the corpus changed: shapes/char_lm.yaml's V (the head's n, softmax_xent's classes, Adam's n) with it";
}

TEST(CharLmLayout, PyTorchNamesShapesAndAlignedOffsets) {
  const auto layout = char_lm_layout(CharLmShape{RecurrentCell::lstm, 7, 3, 5, 2});
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> want = {
      {"embedding.weight", {7, 3}},      {"rnn.weight_ih_l0", {20, 3}}, {"rnn.weight_hh_l0", {20, 5}},
      {"rnn.bias_ih_l0", {20}},          {"rnn.bias_hh_l0", {20}},      {"rnn.weight_ih_l1", {20, 5}},
      {"rnn.weight_hh_l1", {20, 5}},     {"rnn.bias_ih_l1", {20}},      {"rnn.bias_hh_l1", {20}},
      {"head.weight", {7, 5}},           {"head.bias", {7}}};
  ASSERT_EQ(layout.size(), want.size());
  std::int64_t end = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(layout[i].name, want[i].first);
    EXPECT_EQ(layout[i].shape, want[i].second) << layout[i].name;
    EXPECT_EQ(layout[i].offset % kCharLmAlignment, 0) << layout[i].name;
    EXPECT_GE(layout[i].offset, end) << layout[i].name;
    end = layout[i].offset + layout[i].size;
  }
  EXPECT_GE(char_lm_flat_size(CharLmShape{RecurrentCell::lstm, 7, 3, 5, 2}), end);
  const auto gru = char_lm_layout(CharLmShape{RecurrentCell::gru, 7, 3, 5, 1});
  EXPECT_EQ(gru[1].shape, (std::vector<std::int64_t>{15, 3}));
  EXPECT_EQ(gru.size(), 7u);
  EXPECT_THROW(char_lm_layout(CharLmShape{RecurrentCell::gru, 7, 3, 5, 3}), std::invalid_argument);
  EXPECT_THROW(char_lm_layout(CharLmShape{RecurrentCell::gru, 1, 3, 5, 1}), std::invalid_argument);
}

TEST(CharLmLayout, InitialisationIsTheSeedsAndPyTorchsDistributions) {
  const CharLmShape s{RecurrentCell::lstm, 50, 64, 100, 2};
  const auto a = char_lm_initial_parameters(s, 7), b = char_lm_initial_parameters(s, 7),
             c = char_lm_initial_parameters(s, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const double bound = 1 / std::sqrt(100.0);
  std::vector<bool> covered(a.size(), false);
  for (const CharLmTensor& t : char_lm_layout(s)) {
    double sum = 0, squares = 0, largest = 0;
    for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const double v = a[static_cast<std::size_t>(i)];
      sum += v, squares += v * v, largest = std::max(largest, std::abs(v));
      covered[static_cast<std::size_t>(i)] = true;
    }
    const double n = static_cast<double>(t.size), mean = sum / n, var = squares / n - mean * mean;
    if (t.name == "embedding.weight") {  // N(0, 1), 3200 draws
      EXPECT_NEAR(mean, 0, 0.1);
      EXPECT_NEAR(var, 1, 0.1);
    } else {  // U(-bound, bound): variance bound^2 / 3
      EXPECT_LE(largest, bound) << t.name;
      EXPECT_NEAR(var, bound * bound / 3, 0.35 * bound * bound / 3) << t.name;
    }
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!covered[i]) {
      ASSERT_EQ(a[i], 0.f) << "padding at " << i;
    }
}

TEST(CharLm, BitsPerCharacterIsNatsOverLnTwo) {
  EXPECT_DOUBLE_EQ(bits_per_character(std::log(2.0)), 1.0);
  EXPECT_NEAR(bits_per_character(std::log(96.0)), std::log2(96.0), 1e-12);
  EXPECT_EQ(bits_per_character(0), 0);
}

struct Batch {
  std::vector<std::int32_t> inputs, targets;
};
Batch random_batch(const CharLmShape& s, int seq_len, int batch, std::mt19937_64& rng) {
  Batch b;
  for (int i = 0; i < seq_len * batch; ++i) {
    b.inputs.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(s.vocab)));
    b.targets.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(s.vocab)));
  }
  return b;
}

class CharLmReference : public ::testing::TestWithParam<std::tuple<RecurrentCell, int>> {};

// The analytic gradient of every parameter against a central difference of the loss, from a
// carried state that is not zero (the detached state must not leak into the gradient).
TEST_P(CharLmReference, GradientsMatchFiniteDifferences) {
  const auto [cell, layers] = GetParam();
  const CharLmShape s = tiny(cell, layers);
  const int T = 3, B = 2;
  std::mt19937_64 rng(5);
  const std::vector<float> init = char_lm_initial_parameters(s, 3);
  std::vector<double> p(init.begin(), init.end());
  const Batch first = random_batch(s, T, B, rng), batch = random_batch(s, T, B, rng);
  const CharLmState carried =
      char_lm_reference_step(s, p, first.inputs, first.targets, T, B, zero_char_lm_state(s, B), false).state;
  EXPECT_NE(carried.h[0], zero_char_lm_state(s, B).h[0]);
  const CharLmReferenceStep step = char_lm_reference_step(s, p, batch.inputs, batch.targets, T, B, carried);
  EXPECT_GT(step.loss, 0);
  const auto layout = char_lm_layout(s);
  int checked = 0;
  for (const CharLmTensor& t : layout)
    for (std::int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double h = 1e-6, saved = p[k];
      p[k] = saved + h;
      const double up = char_lm_reference_step(s, p, batch.inputs, batch.targets, T, B, carried, false).loss;
      p[k] = saved - h;
      const double down = char_lm_reference_step(s, p, batch.inputs, batch.targets, T, B, carried, false).loss;
      p[k] = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(step.gradients[k], fd, 1e-8 + 1e-5 * std::abs(fd)) << t.name << "[" << i - t.offset << "]";
      ++checked;
    }
  EXPECT_EQ(checked, [&] {
    int n = 0;
    for (const auto& t : layout) n += static_cast<int>(t.size);
    return n;
  }());
  for (std::size_t k = 0; k < step.gradients.size(); ++k) {
    bool inside = false;
    for (const auto& t : layout) inside |= static_cast<std::int64_t>(k) >= t.offset && static_cast<std::int64_t>(k) < t.offset + t.size;
    if (!inside) {
      ASSERT_EQ(step.gradients[k], 0.0) << "padding at " << k;
    }
  }
}

// Two batches with the state carried are one longer sequence cut in two: the second batch's
// predictions are those of the T = 6 run's last three steps.
TEST_P(CharLmReference, CarriedStateContinuesTheSequence) {
  const auto [cell, layers] = GetParam();
  const CharLmShape s = tiny(cell, layers);
  const int B = 2;
  std::mt19937_64 rng(9);
  const std::vector<float> init = char_lm_initial_parameters(s, 4);
  const std::vector<double> p(init.begin(), init.end());
  const Batch a = random_batch(s, 3, B, rng), b = random_batch(s, 3, B, rng);
  Batch whole = a;
  whole.inputs.insert(whole.inputs.end(), b.inputs.begin(), b.inputs.end());
  whole.targets.insert(whole.targets.end(), b.targets.begin(), b.targets.end());
  const auto zero = zero_char_lm_state(s, B);
  const auto first = char_lm_reference_step(s, p, a.inputs, a.targets, 3, B, zero, false);
  const auto second = char_lm_reference_step(s, p, b.inputs, b.targets, 3, B, first.state, false);
  const auto both = char_lm_reference_step(s, p, whole.inputs, whole.targets, 6, B, zero, false);
  EXPECT_NEAR((first.loss + second.loss) / 2, both.loss, 1e-12);
  for (int l = 0; l < layers; ++l)
    for (std::size_t i = 0; i < both.state.h[static_cast<std::size_t>(l)].size(); ++i)
      EXPECT_NEAR(second.state.h[static_cast<std::size_t>(l)][i], both.state.h[static_cast<std::size_t>(l)][i], 1e-14);
}

INSTANTIATE_TEST_SUITE_P(CharLm, CharLmReference,
                         ::testing::Combine(::testing::Values(RecurrentCell::lstm, RecurrentCell::gru),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(recurrent_cell_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "_layers";
                         });

TEST(CharLmReference, AdamsFirstStepMovesEachParameterByTheLearningRate) {
  std::vector<double> p = {1, -2, 3, 0.5}, m(4, 0), v(4, 0);
  const std::vector<double> g = {0.5, -3, 1e-3, 0};
  char_lm_reference_adam(p, m, v, g, 0.01, 1);
  // m_hat / sqrt(v_hat) = g / |g| on step 1; eps only matters where g is near it.
  EXPECT_NEAR(p[0], 1 - 0.01, 1e-9);
  EXPECT_NEAR(p[1], -2 + 0.01, 1e-9);
  EXPECT_NEAR(p[2], 3 - 0.01, 1e-7);
  EXPECT_EQ(p[3], 0.5);
  char_lm_reference_adam(p, m, v, g, 0.01, 2);
  EXPECT_NEAR(p[0], 1 - 0.02, 1e-9);
}

TEST(CharLmWeights, SafetensorsRoundTripAndShapeErrors) {
  test_support::TempDir dir;
  const CharLmShape s = tiny(RecurrentCell::gru, 2);
  const std::vector<float> flat = char_lm_initial_parameters(s, 11);
  save_char_lm_weights(dir.file("w.safetensors"), s, flat, "abcde");
  EXPECT_EQ(load_char_lm_weights(dir.file("w.safetensors"), s), flat);
  const SafetensorsFile file = read_safetensors(dir.file("w.safetensors"));
  EXPECT_EQ(file.metadata().at("cell"), "gru");
  EXPECT_EQ(file.metadata().at("vocabulary"), "abcde");
  EXPECT_EQ(file.tensor("rnn.weight_hh_l1").shape, (std::vector<std::int64_t>{12, 4}));
  try {
    load_char_lm_weights(dir.file("w.safetensors"), CharLmShape{RecurrentCell::gru, 5, 3, 6, 2});
    ADD_FAILURE() << "a wrong hidden size loaded";
  } catch (const DataError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "rnn.weight_ih_l0 is [12, 3]; this model's is [18, 3]");
  }
  EXPECT_THROW(load_char_lm_weights(dir.file("w.safetensors"), tiny(RecurrentCell::lstm, 2)), DataError);
  EXPECT_THROW(load_char_lm_weights(dir.file("w.safetensors"), tiny(RecurrentCell::gru, 1)), DataError)
      << "a file of two layers is not silently read as one";
}

TEST(CharLmSample, GreedyIsDeterministicAndSamplesStayInTheVocabulary) {
  const CharLmShape s = tiny(RecurrentCell::lstm, 2);
  const std::vector<float> flat = char_lm_initial_parameters(s, 2);
  const auto greedy = char_lm_sample(s, flat, {1, 2}, 40, 0, 1);
  EXPECT_EQ(greedy, char_lm_sample(s, flat, {1, 2}, 40, 0, 99));
  ASSERT_EQ(greedy.size(), 40u);
  const auto hot = char_lm_sample(s, flat, {1}, 200, 1.5, 3);
  EXPECT_EQ(hot, char_lm_sample(s, flat, {1}, 200, 1.5, 3));
  std::vector<int> seen(static_cast<std::size_t>(s.vocab), 0);
  for (auto id : hot) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, s.vocab);
    ++seen[static_cast<std::size_t>(id)];
  }
  EXPECT_GE(std::count_if(seen.begin(), seen.end(), [](int n) { return n > 0; }), 3);
}

}  // namespace
}  // namespace shapetune
