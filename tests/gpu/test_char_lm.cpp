// The character-level LSTM/GRU runners on a GPU: the graph-replayed training steps of a tiny model
// against the float64 reference (models/char_lm.hpp, itself checked against finite differences
// by the CPU tests), the validation graph against the reference forward, two runs bit for bit,
// the timing suite's steps against train_epoch's, and the loss falling over 100 steps on the
// Jargon File.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "models/char_lm.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

constexpr int kSeqLen = 4, kBatch = 3;

// `size` characters (a word more at most) of seven symbols, with enough structure (words of a
// few letters) that the gradients are not noise.
std::string tiny_text(std::size_t size) {
  std::mt19937_64 rng(17);
  const std::string letters = "abcde";
  std::string text;
  while (text.size() < size) {
    const std::size_t word = 1 + rng() % 4;
    for (std::size_t i = 0; i < word; ++i) text += letters[rng() % letters.size()];
    text += rng() % 5 == 0 ? '\n' : ' ';
  }
  return text;
}

CharCorpus tiny_corpus() { return char_corpus_from_bytes(tiny_text(2000), "tiny"); }

struct Tiny {
  CharCorpus corpus = tiny_corpus();
  CharCorpusSplit split = split_char_corpus(corpus, CharSplitOptions{kSeqLen, kBatch, 0.1});
};

struct ReferenceRun {
  std::vector<double> losses;
  std::vector<double> parameters;
};

// `steps` training steps of the float64 model from the zero state, the state carried, Adam after
// each: what CharLmTrainer::train_epoch(steps) computes in float32.
ReferenceRun reference_training(const CharLmShape& s, const std::vector<float>& init, const TbpttBatches& batches,
                                int steps, double lr) {
  ReferenceRun r;
  r.parameters.assign(init.begin(), init.end());
  std::vector<double> m(init.size(), 0.0), v(init.size(), 0.0);
  CharLmState state = zero_char_lm_state(s, kBatch);
  std::vector<std::int32_t> inputs(kSeqLen * kBatch), targets(inputs.size());
  for (int i = 0; i < steps; ++i) {
    batches.fill(i, inputs, targets);
    CharLmReferenceStep step = char_lm_reference_step(s, r.parameters, inputs, targets, kSeqLen, kBatch, state);
    r.losses.push_back(step.loss);
    char_lm_reference_adam(r.parameters, m, v, step.gradients, lr, i + 1);
    state = std::move(step.state);
  }
  return r;
}

// Losses: fp32 sums of at most a few hundred terms, relative 2e-5 over 20 steps. Parameters:
// every Adam step moves an element by at most about lr, and by m_hat / sqrt(v_hat) lr, which is
// insensitive to a gradient's rounding unless the gradient is near zero, where fp32 may even take
// its sign the other way: all but 1% of the elements within 2e-3 lr steps of float64, every
// element within 2 lr steps (the most Adam can have moved the two apart).
void expect_training_matches(const std::vector<double>& gpu_losses, const std::vector<float>& gpu,
                             const ReferenceRun& ref, double lr, int steps, const std::string& what) {
  ASSERT_EQ(gpu_losses.size(), ref.losses.size()) << what;
  for (std::size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(gpu_losses[i], ref.losses[i], 2e-5 * std::abs(ref.losses[i])) << what << ", step " << i + 1;
  ASSERT_EQ(gpu.size(), ref.parameters.size());
  std::size_t loose = 0;
  double worst = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double d = std::abs(gpu[i] - ref.parameters[i]);
    worst = std::max(worst, d);
    loose += d > 2e-3 * lr * steps + 1e-6;
  }
  EXPECT_LE(worst, 2 * lr * steps) << what;
  EXPECT_LE(static_cast<double>(loose), 0.01 * static_cast<double>(gpu.size())) << what << ": worst " << worst;
}

using Case = std::tuple<RecurrentCell, int, DispatchMode>;
class CharLmTraining : public ::testing::TestWithParam<Case> {};

TEST_P(CharLmTraining, OneAndTwentyStepsMatchTheFloat64Reference) {
  SHAPETUNE_REQUIRE_GPU();
  const auto [cell, layers, dispatch] = GetParam();
  const Tiny data;
  const CharLmShape shape{cell, static_cast<int>(data.corpus.vocabulary.size()), 6, 8, layers};
  const std::vector<float> init = char_lm_initial_parameters(shape, 3);
  CharLmOptions o;
  o.dispatch = dispatch;
  o.seq_len = kSeqLen;
  o.batch = kBatch;
  o.lr = 3e-3;
  for (int steps : {1, 20}) {
    CharLmTrainer trainer(o, shape, init, data.split.train, data.split.validation);
    const CharLmEpoch epoch = trainer.train_epoch(steps);
    const ReferenceRun ref = reference_training(shape, init, data.split.train, steps, o.lr);
    expect_training_matches(epoch.step_losses, trainer.parameters(), ref, o.lr, steps,
                            std::to_string(steps) + " steps");
    EXPECT_EQ(epoch.step_milliseconds.size(), static_cast<std::size_t>(steps));
  }
}

TEST_P(CharLmTraining, ValidationIsTheReferenceForwardFromTheZeroState) {
  SHAPETUNE_REQUIRE_GPU();
  const auto [cell, layers, dispatch] = GetParam();
  const Tiny data;
  const CharLmShape shape{cell, static_cast<int>(data.corpus.vocabulary.size()), 6, 8, layers};
  const std::vector<float> init = char_lm_initial_parameters(shape, 5);
  CharLmOptions o;
  o.dispatch = dispatch;
  o.seq_len = kSeqLen;
  o.batch = kBatch;
  CharLmTrainer trainer(o, shape, init, data.split.train, data.split.validation);
  const std::vector<double> p(init.begin(), init.end());
  CharLmState state = zero_char_lm_state(shape, kBatch);
  std::vector<std::int32_t> inputs(kSeqLen * kBatch), targets(inputs.size());
  double sum = 0;
  for (std::int64_t i = 0; i < data.split.validation.batches(); ++i) {
    data.split.validation.fill(i, inputs, targets);
    CharLmReferenceStep step = char_lm_reference_step(shape, p, inputs, targets, kSeqLen, kBatch, state, false);
    sum += step.loss;
    state = std::move(step.state);
  }
  const double want = sum / static_cast<double>(data.split.validation.batches());
  EXPECT_NEAR(trainer.validation_loss(), want, 2e-5 * want);
  EXPECT_NEAR(trainer.validation_loss(), want, 2e-5 * want) << "a second pass starts from the zero state again";
}

INSTANTIATE_TEST_SUITE_P(CharLm, CharLmTraining,
                         ::testing::Combine(::testing::Values(RecurrentCell::lstm, RecurrentCell::gru),
                                            ::testing::Values(1, 2),
                                            ::testing::Values(DispatchMode::tuned, DispatchMode::library)),
                         [](const auto& info) {
                           return std::string(recurrent_cell_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "_layers_" +
                                  std::string(dispatch_mode_name(std::get<2>(info.param)));
                         });

TEST(CharLmTraining, TwoRunsOfOneSeedAreBitIdentical) {
  SHAPETUNE_REQUIRE_GPU();
  const Tiny data;
  for (RecurrentCell cell : {RecurrentCell::lstm, RecurrentCell::gru}) {
    const CharLmShape shape{cell, static_cast<int>(data.corpus.vocabulary.size()), 6, 8, 2};
    const std::vector<float> init = char_lm_initial_parameters(shape, 9);
    CharLmOptions o;
    o.seq_len = kSeqLen;
    o.batch = kBatch;
    std::vector<float> params[2];
    std::vector<double> losses[2];
    for (int run = 0; run < 2; ++run) {
      CharLmTrainer trainer(o, shape, init, data.split.train, data.split.validation);
      losses[run] = trainer.train_epoch(20).step_losses;
      const auto more = trainer.train_epoch(20).step_losses;  // a second epoch: state reset, Adam runs on
      losses[run].insert(losses[run].end(), more.begin(), more.end());
      params[run] = trainer.parameters();
    }
    EXPECT_EQ(losses[0], losses[1]) << recurrent_cell_name(cell);
    ASSERT_EQ(params[0].size(), params[1].size());
    EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0)
        << recurrent_cell_name(cell);
  }
}

// The statistical suite's steps are training steps: on a corpus of a few batches an epoch, the
// suite (warm-up 5, timed two epochs' worth) wraps the data twice and ends where two full epochs
// and five steps of train_epoch end, bit for bit; every timed step has a positive time.
TEST(CharLmTraining, TheTimingSuiteTrainsAsEpochsDoAndWrapsTheData) {
  SHAPETUNE_REQUIRE_GPU();
  const CharCorpus corpus = char_corpus_from_bytes(tiny_text(300), "short");
  const CharCorpusSplit split = split_char_corpus(corpus, CharSplitOptions{kSeqLen, kBatch, 0.1});
  const std::int64_t per_epoch = split.train.batches();
  ASSERT_GE(per_epoch, 5);
  ASSERT_LE(per_epoch, 40) << "the suite should wrap the data";
  for (RecurrentCell cell : {RecurrentCell::lstm, RecurrentCell::gru}) {
    const CharLmShape shape{cell, static_cast<int>(corpus.vocabulary.size()), 6, 8, 2};
    const std::vector<float> init = char_lm_initial_parameters(shape, 4);
    CharLmOptions o;
    o.seq_len = kSeqLen;
    o.batch = kBatch;
    CharLmTrainer suite_trainer(o, shape, init, split.train, split.validation);
    const CharLmTimingSuite suite =
        suite_trainer.timing_suite(CharLmTimingSuiteOptions{5, static_cast<int>(2 * per_epoch)});
    EXPECT_EQ(suite.warmup_steps, 5);
    ASSERT_EQ(static_cast<std::int64_t>(suite.step_milliseconds.size()), 2 * per_epoch);
    for (double ms : suite.step_milliseconds) {
      EXPECT_TRUE(std::isfinite(ms)) << recurrent_cell_name(cell);
      EXPECT_GT(ms, 0) << recurrent_cell_name(cell);
    }
    const SampleSummary t = suite.summary();
    EXPECT_LE(t.p10, t.median);
    EXPECT_LE(t.median, t.p90);

    CharLmTrainer epochs(o, shape, init, split.train, split.validation);
    for (const std::int64_t steps : {per_epoch, per_epoch, std::int64_t{5}}) epochs.train_epoch(steps);
    const std::vector<float> a = suite_trainer.parameters(), b = epochs.parameters();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << recurrent_cell_name(cell);
    EXPECT_EQ(suite_trainer.validation_loss(), epochs.validation_loss()) << recurrent_cell_name(cell);

    // --op-times: every op of a training step once, in launch order: the embedding's gather, each
    // layer's backward-through-time op's forward half (layer 0 first), the head and the loss, their
    // gradients, each layer's backward half (the last layer first), the embedding's gradient, Adam.
    // The resolutions list the layers' inference forwards (the evaluation step's) first, then the
    // head, the loss and their gradients, the layers' backward ops (the last first) and Adam.
    const std::vector<OpTime> times = epochs.op_times(2, 5);
    const std::vector<OpResolution>& r = epochs.resolutions();
    ASSERT_EQ(r.size(), 10u) << recurrent_cell_name(cell);
    const std::vector<std::string> want = {"embedding gather", r[8].op.name + ": forward half",
                                           r[7].op.name + ": forward half", r[2].op.name, r[3].op.name,
                                           r[4].op.name, r[5].op.name, r[6].op.name,
                                           r[7].op.name + ": backward half", r[8].op.name + ": backward half",
                                           "embedding gradient", r[9].op.name};
    ASSERT_EQ(times.size(), want.size()) << recurrent_cell_name(cell);
    for (std::size_t i = 0; i < times.size(); ++i) {
      EXPECT_EQ(times[i].name, want[i]);
      EXPECT_GT(times[i].median_us, 0) << times[i].name;
    }
  }
}

TEST(CharLmTraining, LossFallsOverOneHundredStepsOnTheJargonFile) {
  SHAPETUNE_REQUIRE_GPU();
  if (!std::filesystem::exists(kDefaultCharCorpus))
    GTEST_SKIP() << kDefaultCharCorpus << " is absent (Debian's jargon-text package)";
  const CharCorpus corpus = load_char_corpus(kDefaultCharCorpus);
  CharLmOptions o;
  o.seq_len = 64;
  o.batch = 32;
  o.lr = 2e-3;
  const CharCorpusSplit split = split_char_corpus(corpus, CharSplitOptions{o.seq_len, o.batch, 0.1});
  for (RecurrentCell cell : {RecurrentCell::lstm, RecurrentCell::gru}) {
    const CharLmShape shape{cell, static_cast<int>(corpus.vocabulary.size()), 64, 128, 1};
    CharLmTrainer trainer(o, shape, char_lm_initial_parameters(shape, 1), split.train, split.validation);
    const double before = trainer.validation_loss();
    const CharLmEpoch epoch = trainer.train_epoch(100);
    ASSERT_EQ(epoch.step_losses.size(), 100u);
    double last = 0;
    for (std::size_t i = 90; i < 100; ++i) last += epoch.step_losses[i] / 10;
    // From about ln V (near-uniform predictions) to well below: a character model that learns
    // letter frequencies alone is at ~3 nats; 100 steps of Adam at 2e-3 get past that.
    EXPECT_LT(last, 0.8 * epoch.step_losses.front()) << recurrent_cell_name(cell);
    const double after = trainer.validation_loss();
    EXPECT_LT(after, 0.85 * before) << recurrent_cell_name(cell);
  }
}

}  // namespace
}  // namespace shapetune
