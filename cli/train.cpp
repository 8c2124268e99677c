#include "cli/train.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <ostream>

#include "cli/runner_options.hpp"
#include "core/build_info.hpp"
#include "core/json.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "models/char_lm.hpp"
#include "models/logreg.hpp"
#include "models/mlp.hpp"
#include "models/safetensors.hpp"
#include "models/runner.hpp"

namespace shapetune::cli {
namespace {

// What `train` parses for every runner.
struct TrainCommon {
  RunnerOptions runner;
  std::uint64_t seed = 1;
  std::optional<std::string> results_path;
  std::string command_line;
};

// A runner `train` can run: its name, one line for --help, its own options, and how it runs.
struct TrainRunner {
  std::string name;
  std::string summary;
  std::vector<OptionSpec> options;
  std::function<int(const ParsedArgs&, const TrainCommon&, std::ostream& out, std::ostream& err)> run;
  // Validates the runner's options before anything needs a device (UsageError); may be empty.
  std::function<void(const ParsedArgs&)> check;
};

// The opening of every runner's results JSON: what ran, where, and how each operation resolved.
JsonObject run_json(std::string_view model, const TrainCommon& c, const DeviceInfo& device,
                    const std::vector<OpResolution>& resolutions) {
  std::vector<std::string> resolved;
  for (const auto& r : resolutions)
    resolved.push_back(JsonObject()
                           .add("op", json_string(r.op.name))
                           .add("problem", json_string(r.op.problem.key()))
                           .add("variant", json_string(r.variant))
                           .add("config", json_string(r.config))
                           .add("source", json_string(r.source))
                           .inline_text());
  JsonObject o;
  o.add("model", json_string(model))
      .add("command", json_string(c.command_line))
      .add("git_sha", json_string(build_git_sha()))
      .add("device_key", json_string(device.fingerprint.key()))
      .add("device_name", json_string(device.fingerprint.name))
      .add("dispatch", json_string(dispatch_mode_name(c.runner.dispatch)))
      .add("db", json_string(c.runner.db_path))
      .add("seed", json_integer(static_cast<std::int64_t>(c.seed)))
      .add("measured_at", json_string(utc_now_iso8601()))
      .add("resolutions", json_block_array(resolved, "  "));
  return o;
}

int write_results(const std::string& path, const JsonObject& results, std::ostream& err) {
  std::ofstream file(path, std::ios::trunc);
  file << results.block_text("") << "\n";
  file.close();
  if (!file) {
    err << "error: cannot write " << path << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  err << "wrote " << path << "\n";
  return 0;
}

// ---- mlp --------------------------------------------------------------------------------------

int run_mlp(const ParsedArgs& a, const TrainCommon& c, std::ostream& out, std::ostream& err) {
  MlpOptions o;
  o.db_path = c.runner.db_path;
  o.dispatch = c.runner.dispatch;
  o.device = c.runner.device;
  o.seed = c.seed;
  o.epochs = static_cast<int>(a.integer("epochs", 15, 1, 100000));
  o.batch = static_cast<int>(a.integer("batch", 128, 1, 1 << 20));
  o.lr = a.number("lr", 1e-3, 1e-12, 10);
  o.train_limit = a.integer("train-limit", 0, 0, INT64_MAX);
  o.adam_in_graph = !a.has("adam-after-graph");
  const std::string data_dir = a.value("data").value_or(kFashionMnistDir);

  FashionMnist data;
  try {
    data = load_fashion_mnist(data_dir);
  } catch (const DataError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  std::unique_ptr<MlpTrainer> trainer;
  try {
    trainer = std::make_unique<MlpTrainer>(o, std::move(data));
  } catch (const StoreError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  const DeviceInfo& device = trainer->device();
  out << "mlp 784-256-128-10 on " << device.fingerprint.name << ", batch " << o.batch << ", " << o.epochs
      << " epochs, dispatch " << dispatch_mode_name(o.dispatch)
      << (o.db_path.empty() ? " (no --db: defaults)" : " from " + o.db_path) << ", seed " << o.seed << "\n";
  print_resolutions(trainer->resolutions(), out);
  out << "\nepoch  train loss  test acc  train s   images/s\n" << std::flush;
  std::vector<std::string> epochs;
  for (int e = 0; e < o.epochs; ++e) {
    const EpochResult r = trainer->train_epoch();
    out << std::right << std::setw(5) << r.epoch << "  " << std::fixed << std::setprecision(4) << std::setw(10)
        << r.train_loss << "  " << std::setprecision(2) << std::setw(7) << 100 * r.test_accuracy << "%  "
        << std::setprecision(3) << std::setw(7) << r.train_seconds << "  " << std::setprecision(0) << std::setw(9)
        << r.images_per_second << "\n"
        << std::defaultfloat << std::flush;
    epochs.push_back(JsonObject()
                         .add("epoch", json_integer(r.epoch))
                         .add("train_loss", json_number(r.train_loss))
                         .add("test_accuracy", json_number(r.test_accuracy))
                         .add("train_seconds", json_number(r.train_seconds))
                         .add("images_per_second", json_number(r.images_per_second))
                         .add("steps", json_integer(r.steps))
                         .inline_text());
    if (!std::isfinite(r.train_loss)) {
      err << "error: the training loss is not finite at epoch " << r.epoch << "\n";
      return 1;
    }
  }
  if (!c.results_path) return 0;
  JsonObject results = run_json("mlp", c, device, trainer->resolutions());
  results.add("batch", json_integer(o.batch))
      .add("lr", json_number(o.lr))
      .add("adam_in_graph", json_bool(o.adam_in_graph))
      .add("train_limit", json_integer(o.train_limit))
      .add("epochs", json_block_array(epochs, "  "));
  return write_results(*c.results_path, results, err);
}

// ---- logreg -----------------------------------------------------------------------------------

LogregOptions logreg_options(const ParsedArgs& a) {
  LogregOptions o;
  try {
    if (auto classes = a.value("classes")) o.classes = parse_logreg_classes(*classes);
    o.epochs = static_cast<int>(a.integer("epochs", 50, 1, 1000000));
    o.batch = a.integer("batch", 0, 0, INT32_MAX);
    o.lr = a.number("lr", 0.01, 1e-12, 10);
    o.shuffle = a.has("shuffle");
    const std::string dtype = a.value("dtype").value_or("f32");
    const auto parsed = parse_dtype(dtype);
    if (!parsed || (*parsed != DType::f32 && *parsed != DType::f16 && *parsed != DType::bf16))
      throw UsageError("--dtype must be f32, f16 or bf16, got '" + dtype + "'");
    o.dtype = *parsed;
    if (o.shuffle && o.batch == 0) throw UsageError("--shuffle needs --batch: a full batch has no order");
    validate(o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return o;
}

int run_logreg(const ParsedArgs& a, const TrainCommon& c, std::ostream& out, std::ostream& err) {
  LogregOptions o = logreg_options(a);
  o.db_path = c.runner.db_path;
  o.dispatch = c.runner.dispatch;
  o.device = c.runner.device;
  o.seed = c.seed;
  const std::string data_dir = a.value("data").value_or(kFashionMnistDir);
  LogregData data;
  std::unique_ptr<LogregTrainer> trainer;
  try {
    data = select_classes(load_fashion_mnist(data_dir), o.classes);
    trainer = std::make_unique<LogregTrainer>(o, data);
  } catch (const DataError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const StoreError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  const DeviceInfo& device = trainer->device();
  out << "logistic regression, Fashion-MNIST class " << o.classes[0] << " (label 0) vs " << o.classes[1]
      << " (label 1), " << data.train.count << " training and " << data.test.count << " test rows, on "
      << device.fingerprint.name << ", "
      << (o.batch == 0 ? std::string("full batch") : "batch " + std::to_string(o.batch) + (o.shuffle ? ", shuffled" : ", file order"))
      << ", " << trainer->steps_per_epoch() << " steps an epoch, " << o.epochs << " epochs, lr " << o.lr << ", X "
      << dtype_name(o.dtype) << ", dispatch " << dispatch_mode_name(o.dispatch)
      << (o.db_path.empty() ? " (no --db: defaults)" : " from " + o.db_path) << ", w and b from zero\n";
  print_resolutions(trainer->resolutions(), out);
  out << "\nepoch  train loss  train acc  test loss  test acc  median step ms\n" << std::flush;
  std::vector<std::string> epochs;
  for (int e = 0; e < o.epochs; ++e) {
    const LogregEpoch r = trainer->train_epoch();
    out << std::right << std::setw(5) << r.epoch << "  " << std::fixed << std::setprecision(4) << std::setw(10)
        << r.train_loss() << "  " << std::setprecision(2) << std::setw(8) << 100 * r.train_accuracy << "%  "
        << std::setprecision(4) << std::setw(9) << r.test_loss << "  " << std::setprecision(2) << std::setw(7)
        << 100 * r.test_accuracy << "%  " << std::setprecision(4) << std::setw(14) << r.median_step_ms() << "\n"
        << std::defaultfloat << std::flush;
    epochs.push_back(JsonObject()
                         .add("epoch", json_integer(r.epoch))
                         .add("steps", json_integer(static_cast<std::int64_t>(r.step_losses.size())))
                         .add("train_loss", json_number(r.train_loss()))
                         .add("train_accuracy", json_number(r.train_accuracy))
                         .add("test_loss", json_number(r.test_loss))
                         .add("test_accuracy", json_number(r.test_accuracy))
                         .add("median_step_ms", json_number(r.median_step_ms()))
                         .inline_text());
    if (!std::isfinite(r.train_loss()) || !std::isfinite(r.test_loss)) {
      err << "error: the loss is not finite at epoch " << r.epoch << "\n";
      return 1;
    }
  }
  if (auto path = a.value("save-weights")) {
    try {
      save_logreg_weights(*path, trainer->parameters(), o.classes);
    } catch (const DataError& e) {
      err << "error: " << e.what() << "\n";
      return 2;
    }
  }
  if (!c.results_path) return 0;
  JsonObject results = run_json("logreg", c, device, trainer->resolutions());
  std::string classes = "[";
  classes.append(std::to_string(o.classes[0])).append(", ").append(std::to_string(o.classes[1])).append("]");
  results.add("classes", classes)
      .add("train_rows", json_integer(data.train.count))
      .add("test_rows", json_integer(data.test.count))
      .add("batch", json_integer(o.batch))
      .add("shuffle", json_bool(o.shuffle))
      .add("lr", json_number(o.lr))
      .add("dtype", json_string(dtype_name(o.dtype)))
      .add("epochs", json_block_array(epochs, "  "));
  return write_results(*c.results_path, results, err);
}

// ---- lstm, gru --------------------------------------------------------------------------------

struct CharLmRun {
  CharLmOptions trainer;
  int layers = 2, hidden = 256, embed = 0;  // embed 0: the hidden size
  int epochs = 5;
  std::int64_t steps = 0;  // > 0: this many steps in all, instead of --epochs
  int sample = 200;
  double temperature = 0.8;
  std::string data = kDefaultCharCorpus;
  std::optional<std::string> weights, save_weights, save_trained, save_batches;
  std::optional<CharLmTimingSuiteOptions> timing_suite;  // --timing-suite
  bool op_times = false;                                  // --op-times
};

CharLmRun char_lm_run(const ParsedArgs& a) {
  CharLmRun r;
  r.layers = static_cast<int>(a.integer("layers", 2, 1, 2));
  r.hidden = static_cast<int>(a.integer("hidden", 256, 1, 8192));
  r.embed = static_cast<int>(a.integer("embed", r.hidden, 1, 8192));
  r.trainer.seq_len = static_cast<int>(a.integer("seq-len", 128, 1, 1 << 16));
  r.trainer.batch = static_cast<int>(a.integer("batch", 64, 1, 1 << 16));
  if (std::int64_t{r.trainer.seq_len} * r.trainer.batch > (std::int64_t{1} << 24))
    throw UsageError("--seq-len x --batch must be at most 2^24 (a step's predictions)");
  if (a.has("epochs") && a.has("steps")) throw UsageError("give --epochs or --steps, not both");
  r.epochs = static_cast<int>(a.integer("epochs", 5, 1, 100000));
  r.steps = a.integer("steps", 0, 1, INT64_MAX);
  r.trainer.lr = a.number("lr", 2e-3, 1e-12, 10);
  const std::string dtype = a.value("dtype").value_or("f32");
  if (dtype != "f32")
    throw UsageError("--dtype " + dtype + ": the character models train in f32 only (16-bit training is not built)");
  r.sample = static_cast<int>(a.integer("sample", 200, 0, 1000000));
  r.temperature = a.number("temperature", 0.8, 0, 100);
  r.data = a.value("data").value_or(kDefaultCharCorpus);
  r.weights = a.value("weights");
  r.save_weights = a.value("save-weights");
  r.save_trained = a.value("save-trained");
  r.save_batches = a.value("save-batches");
  r.op_times = a.has("op-times");
  if (a.has("timing-suite")) {
    CharLmTimingSuiteOptions suite;
    suite.warmup_steps = static_cast<int>(a.integer("warmup-steps", suite.warmup_steps, 0, 100000));
    suite.timed_steps = static_cast<int>(a.integer("timed-steps", suite.timed_steps, 10, 100000));
    r.timing_suite = suite;
  } else if (a.has("warmup-steps") || a.has("timed-steps")) {
    throw UsageError(std::string(a.has("warmup-steps") ? "--warmup-steps" : "--timed-steps") +
                     " sets a count of the statistical suite: add --timing-suite");
  }
  return r;
}

// Every batch of both splits as safetensors, I32 [batches, T, B]: inputs and targets (an epoch of
// training, in order), validation_inputs and validation_targets. What the PyTorch peer trains and
// validates on, so it needs no copy of the batching.
void save_batches(const std::string& path, const CharCorpusSplit& split) {
  struct Tokens {
    std::vector<std::int32_t> inputs, targets;
    std::vector<std::int64_t> shape;
  };
  auto tokens = [](const TbpttBatches& batches) {
    const std::size_t R = static_cast<std::size_t>(batches.seq_len()) * static_cast<std::size_t>(batches.batch());
    Tokens t;
    t.inputs.resize(R * static_cast<std::size_t>(batches.batches()));
    t.targets.resize(t.inputs.size());
    for (std::int64_t i = 0; i < batches.batches(); ++i)
      batches.fill(i, std::span(t.inputs).subspan(static_cast<std::size_t>(i) * R, R),
                   std::span(t.targets).subspan(static_cast<std::size_t>(i) * R, R));
    t.shape = {batches.batches(), batches.seq_len(), batches.batch()};
    return t;
  };
  const Tokens train = tokens(split.train), validation = tokens(split.validation);
  const std::vector<SafetensorsTensor> tensors = {
      {"inputs", "I32", train.shape, std::as_bytes(std::span<const std::int32_t>(train.inputs))},
      {"targets", "I32", train.shape, std::as_bytes(std::span<const std::int32_t>(train.targets))},
      {"validation_inputs", "I32", validation.shape, std::as_bytes(std::span<const std::int32_t>(validation.inputs))},
      {"validation_targets", "I32", validation.shape, std::as_bytes(std::span<const std::int32_t>(validation.targets))}};
  write_safetensors(path, tensors);
}

// The suite's summary and every timed step, on one line.
std::string char_lm_timing_suite_json(const CharLmTimingSuite& suite) {
  const SampleSummary t = suite.summary();
  std::string steps;
  for (double ms : suite.step_milliseconds) steps.append(steps.empty() ? "[" : ", ").append(json_number(ms));
  steps.append("]");
  return JsonObject()
      .add("warmup_steps", json_integer(suite.warmup_steps))
      .add("timed_steps", json_integer(t.count))
      .add("median_step_ms", json_number(t.median))
      .add("p10_step_ms", json_number(t.p10))
      .add("p90_step_ms", json_number(t.p90))
      .add("min_step_ms", json_number(t.min))
      .add("step_ms", steps)
      .inline_text();
}

int run_char_lm(RecurrentCell cell, const ParsedArgs& a, const TrainCommon& c, std::ostream& out, std::ostream& err) {
  const CharLmRun o = char_lm_run(a);
  CharLmOptions options = o.trainer;
  options.db_path = c.runner.db_path;
  options.dispatch = c.runner.dispatch;
  options.device = c.runner.device;
  CharCorpus corpus;
  std::optional<CharCorpusSplit> split;
  CharLmShape shape;
  std::vector<float> initial;
  try {
    corpus = load_char_corpus(o.data);
    split.emplace(split_char_corpus(corpus, CharSplitOptions{options.seq_len, options.batch, 0.1}));
    shape = CharLmShape{cell, static_cast<int>(corpus.vocabulary.size()), o.embed, o.hidden, o.layers};
    validate(shape);
    initial = o.weights ? load_char_lm_weights(*o.weights, shape) : char_lm_initial_parameters(shape, c.seed);
    const std::vector<std::int32_t> all_ids = [&] {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(shape.vocab));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
      return ids;
    }();
    if (o.save_weights) save_char_lm_weights(*o.save_weights, shape, initial, corpus.vocabulary.decode(all_ids));
    if (o.save_batches) save_batches(*o.save_batches, *split);
  } catch (const DataError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  std::unique_ptr<CharLmTrainer> trainer;
  try {
    trainer = std::make_unique<CharLmTrainer>(options, shape, initial, split->train, split->validation);
  } catch (const StoreError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  const std::string name(recurrent_cell_name(cell));
  const std::int64_t per_epoch = split->train.batches();
  const int epochs = o.steps > 0 ? static_cast<int>((o.steps + per_epoch - 1) / per_epoch) : o.epochs;
  const DeviceInfo& device = trainer->device();
  out << name << " character model on " << device.fingerprint.name << ": " << corpus.source << ", " << shape.vocab
      << " characters, embedding " << shape.embed << ", " << shape.layers << " x " << name << " " << shape.hidden
      << ", seq-len " << options.seq_len << ", batch " << options.batch << ", " << per_epoch << " steps an epoch, "
      << (o.steps > 0 ? std::to_string(o.steps) + " steps" : std::to_string(epochs) + " epochs") << ", lr "
      << options.lr << ", dispatch " << dispatch_mode_name(options.dispatch)
      << (options.db_path.empty() ? " (no --db: defaults)" : " from " + options.db_path) << ", seed " << c.seed
      << (o.weights ? ", weights from " + *o.weights : std::string(", PyTorch-default initialisation")) << "\n";
  print_resolutions(trainer->resolutions(), out);
  out << "(the embedding's gather and gradient are plain kernels of models/training_kernels.cu, deterministic: "
         "no atomics)\n";
  out << "\nepoch  steps  train loss  valid loss  valid bpc  median step ms   chars/s\n" << std::flush;
  std::vector<std::string> epoch_json;
  std::vector<double> first_losses;
  std::int64_t remaining = o.steps > 0 ? o.steps : per_epoch * epochs;
  for (int e = 1; e <= epochs; ++e) {
    const CharLmEpoch r = trainer->train_epoch(std::min(remaining, per_epoch));
    remaining -= static_cast<std::int64_t>(r.step_losses.size());
    for (double l : r.step_losses)
      if (first_losses.size() < 100) first_losses.push_back(l);
    const double valid = trainer->validation_loss();
    const double median_ms = r.median_step_ms();
    const double chars_per_s = static_cast<double>(options.seq_len) * options.batch / (median_ms / 1000);
    out << std::right << std::setw(5) << e << "  " << std::setw(5) << r.step_losses.size() << "  " << std::fixed
        << std::setprecision(4) << std::setw(10) << r.mean_loss() << "  " << std::setw(10) << valid << "  "
        << std::setw(9) << bits_per_character(valid) << "  " << std::setprecision(3) << std::setw(14) << median_ms
        << "  " << std::setprecision(0) << std::setw(8) << chars_per_s << "\n"
        << std::defaultfloat << std::flush;
    epoch_json.push_back(JsonObject()
                             .add("epoch", json_integer(e))
                             .add("steps", json_integer(static_cast<std::int64_t>(r.step_losses.size())))
                             .add("train_loss", json_number(r.mean_loss()))
                             .add("validation_loss", json_number(valid))
                             .add("validation_bits_per_character", json_number(bits_per_character(valid)))
                             .add("median_step_ms", json_number(median_ms))
                             .inline_text());
    if (!std::isfinite(r.mean_loss()) || !std::isfinite(valid)) {
      err << "error: the loss is not finite at epoch " << e << "\n";
      return 1;
    }
  }
  out << "loss after step 1: " << first_losses.front();
  if (first_losses.size() >= 100) out << ", after step 100: " << first_losses[99];
  out << "\n";
  const std::vector<float> trained = trainer->parameters();
  if (o.save_trained) {
    try {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(shape.vocab));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
      save_char_lm_weights(*o.save_trained, shape, trained, corpus.vocabulary.decode(ids));
    } catch (const DataError& e) {
      err << "error: " << e.what() << "\n";
      return 2;
    }
  }
  std::optional<CharLmTimingSuite> suite;
  if (o.timing_suite) {
    // After the trained weights are read: --save-trained and --sample describe the training alone.
    suite = trainer->timing_suite(*o.timing_suite);
    const SampleSummary t = suite->summary();
    out << "\ntiming suite: " << suite->warmup_steps << " warm-up and " << t.count
        << " timed training steps (CUDA events around each replay; after the last batch the data wraps to the "
           "first, the state zeroed):\n"
        << std::fixed << std::setprecision(3) << "  median " << t.median << " ms, p10 " << t.p10 << " ms, p90 " << t.p90
        << " ms, min " << t.min << " ms; " << std::setprecision(0)
        << static_cast<double>(options.seq_len) * options.batch / (t.median / 1000) << " chars/s at the median\n"
        << std::defaultfloat << std::flush;
  }
  if (o.op_times) {
    // After --save-trained and the suite, and `trained` already read: these replays run Adam too.
    constexpr int kWarmup = 10, kIterations = 50;
    out << "\n";
    print_op_times(trainer->op_times(kWarmup, kIterations), kIterations, "training step", out);
    out << "(not listed: the loss bookkeeping, single-thread kernels, and the carried state's copies)\n" << std::flush;
  }
  std::string sample_text;
  if (o.sample > 0) {
    // The first character of the corpus primes the state; the forward is float64 on the CPU from
    // the trained weights, one character at a time.
    const std::vector<std::int32_t> ids =
        char_lm_sample(shape, trained, {corpus.tokens.front()}, o.sample, o.temperature, c.seed);
    sample_text = corpus.vocabulary.decode(ids);
    out << "\nsample (" << o.sample << " characters, "
        << (o.temperature > 0 ? "temperature " + std::to_string(o.temperature) : std::string("greedy"))
        << ", float64 CPU forward of the trained weights, primed with the corpus' first character):\n"
        << sample_text << "\n";
  }
  if (!c.results_path) return 0;
  std::string losses;  // one line, where a block array would spend a line on each of 100 numbers
  for (double l : first_losses) losses.append(losses.empty() ? "[" : ", ").append(json_number(l));
  losses.append(losses.empty() ? "[]" : "]");
  JsonObject results = run_json(name, c, device, trainer->resolutions());
  results.add("data", json_string(corpus.source))
      .add("vocab", json_integer(shape.vocab))
      .add("embed", json_integer(shape.embed))
      .add("hidden", json_integer(shape.hidden))
      .add("layers", json_integer(shape.layers))
      .add("seq_len", json_integer(options.seq_len))
      .add("batch", json_integer(options.batch))
      .add("lr", json_number(options.lr))
      .add("first_step_losses", losses)
      .add("epochs", json_block_array(epoch_json, "  "));
  if (suite) results.add("timing_suite", char_lm_timing_suite_json(*suite));
  results.add("sample", json_string(sample_text));
  return write_results(*c.results_path, results, err);
}

std::vector<OptionSpec> char_lm_options() {
  return {
      {"data", 0, "FILE", std::string("UTF-8 text, gzipped or not (default ") + kDefaultCharCorpus + ")"},
      {"layers", 0, "N", "recurrent layers, 1 or 2 (default 2)"},
      {"hidden", 0, "H", "hidden units a layer (default 256)"},
      {"embed", 0, "E", "embedding width (default: --hidden)"},
      {"seq-len", 0, "T", "steps of truncated backpropagation through time (default 128)"},
      {"batch", 0, "B", "streams a batch (default 64)"},
      {"epochs", 0, "N", "training epochs (default 5)"},
      {"steps", 0, "N", "training steps in all instead of --epochs (an epoch cut short ends the run)"},
      {"lr", 0, "X", "Adam's learning rate (default 0.002)"},
      {"dtype", 0, "f32", "parameter and activation type; f32 only for now"},
      {"weights", 0, "FILE", "start from these weights (safetensors, PyTorch's names) instead of the seed's"},
      {"save-weights", 0, "FILE", "write the initial weights as safetensors (bench/peers/char_lm_torch.py reads them)"},
      {"save-trained", 0, "FILE", "write the trained weights as safetensors"},
      {"save-batches", 0, "FILE",
       "write an epoch's training batches and the validation batches as safetensors (I32 [batches, T, B]: inputs, "
       "targets, validation_inputs, validation_targets; bench/peers/char_lm_torch.py reads them)"},
      {"sample", 0, "N", "characters to generate at the end (default 200; 0: none)"},
      {"temperature", 0, "X", "sampling temperature (default 0.8; 0: always the most likely character)"},
      {"timing-suite", 0, "",
       "after training, the statistical suite (the original work's GRU benchmark): --warmup-steps untimed, then "
       "--timed-steps training steps each timed by CUDA events around its graph replay; prints and writes the "
       "median, p10 and p90"},
      {"warmup-steps", 0, "N", "the suite's untimed steps (default 50; needs --timing-suite)"},
      {"timed-steps", 0, "N", "the suite's timed steps, at least 10 (default 150; needs --timing-suite)"},
      {"op-times", 0, "",
       "at the end, where a training step's time goes: each dispatched op's median time inside 50 replays of the "
       "step's ops with an event after each"},
  };
}

// ---- the table --------------------------------------------------------------------------------

const std::vector<TrainRunner>& runners() {
  static const std::vector<TrainRunner> table = {
      {"mlp",
       "784-256-128-10 ReLU MLP on Fashion-MNIST, softmax cross-entropy, Adam; a step is one CUDA graph, replayed "
       "(Adam a child graph swapped per step)",
       {{"data", 0, "DIR", std::string("the Fashion-MNIST .gz files (default ") + kFashionMnistDir + ")"},
        {"epochs", 0, "N", "training epochs (default 15)"},
        {"batch", 0, "B", "batch size (default 128; shapes/mlp.yaml tunes exactly this one)"},
        {"lr", 0, "X", "Adam's learning rate (default 0.001)"},
        {"train-limit", 0, "N", "train on the first N images only (default: all 60000)"},
        {"adam-after-graph", 0, "",
         "launch Adam after each graph replay instead of as a child graph swapped into it (for comparison)"}},
       run_mlp,
       {}},
      {"logreg",
       "binary logistic regression on two Fashion-MNIST classes (default 0,6: T-shirt/top vs Shirt), BCE, Adam, "
       "w and b from zero; a step is one CUDA graph, replayed",
       {{"data", 0, "DIR", std::string("the Fashion-MNIST .gz files (default ") + kFashionMnistDir + ")"},
        {"classes", 0, "A,B", "the two classes, A -> label 0, B -> label 1 (default 0,6)"},
        {"epochs", 0, "N", "training epochs (default 50)"},
        {"batch", 0, "B", "rows a step (default 0: full batch, one step an epoch; the last partial batch is dropped)"},
        {"shuffle", 0, "", "shuffle the mini-batches each epoch from --seed (default: file order)"},
        {"lr", 0, "X", "Adam's learning rate (default 0.01)"},
        {"dtype", 0, "f32|f16|bf16", "storage of X (default f32; f16 and bf16 with full batch only)"},
        {"save-weights", 0, "FILE", "write the trained weight [1, 784] and bias [1] as safetensors"}},
       run_logreg,
       [](const ParsedArgs& a) { logreg_options(a); }},
      {"lstm",
       "character-level language model: embedding, 1-2 LSTM layers, linear head, softmax cross-entropy, Adam, "
       "truncated BPTT with the state carried; a step is one CUDA graph, replayed",
       char_lm_options(),
       [](const ParsedArgs& a, const TrainCommon& c, std::ostream& out, std::ostream& err) {
         return run_char_lm(RecurrentCell::lstm, a, c, out, err);
       },
       [](const ParsedArgs& a) { char_lm_run(a); }},
      {"gru", "the same with GRU layers", char_lm_options(),
       [](const ParsedArgs& a, const TrainCommon& c, std::ostream& out, std::ostream& err) {
         return run_char_lm(RecurrentCell::gru, a, c, out, err);
       },
       [](const ParsedArgs& a) { char_lm_run(a); }},
  };
  return table;
}

std::string runner_names() {
  std::string out;
  for (const auto& r : runners()) out += (out.empty() ? "" : ", ") + r.name;
  return out;
}

}  // namespace

CommandSpec train_spec() {
  std::string summary = "Train a model runner through the dispatch table:";
  for (const auto& r : runners()) summary += " `" + r.name + "` (" + r.summary + ")";
  summary += ".";
  std::vector<OptionSpec> options = runner_option_specs();
  options.push_back({"seed", 0, "N", "seed of the initial weights and the shuffles (default 1)"});
  options.push_back({"results", 0, "FILE", "also write the run (resolutions, every epoch) as JSON here"});
  // An option several runners take is listed once: the runners that share a help text are named
  // together before it ("lstm, gru: ..."), different texts follow each other.
  const std::size_t common = options.size();
  std::vector<std::vector<std::pair<std::string, std::string>>> helps;  // per runner option: (runners, help)
  for (const auto& r : runners())
    for (const OptionSpec& o : r.options) {
      const auto same = std::find_if(options.begin() + static_cast<std::ptrdiff_t>(common), options.end(),
                                     [&](const OptionSpec& listed) { return listed.name == o.name; });
      if (same == options.end()) {
        options.push_back(o);
        helps.push_back({{r.name, o.help}});
        continue;
      }
      auto& texts = helps[static_cast<std::size_t>(same - options.begin()) - common];
      const auto text = std::find_if(texts.begin(), texts.end(), [&](const auto& t) { return t.second == o.help; });
      if (text == texts.end()) texts.push_back({r.name, o.help});
      else text->first += ", " + r.name;
    }
  for (std::size_t i = 0; i < helps.size(); ++i) {
    std::string help;
    for (const auto& [names, text] : helps[i]) help += (help.empty() ? "" : "; ") + names + ": " + text;
    options[common + i].help = help;
  }
  return {"train",
          summary,
          "MODEL",
          1,
          1,
          std::move(options),
          "MODEL is one of: " + runner_names() +
              ". Options marked with a model's name belong to that model alone.\n"
              "At start it prints which variant each operation of the step resolved to and why: exact (tuned for this\n"
              "problem), nearest (the nearest tuned shape), default (nothing tuned applies), or the library baseline.\n"
              "mlp, per epoch: training loss (mean over the epoch's steps), test accuracy, training time and images/s (the\n"
              "epoch's graph replays, shuffle included, evaluation excluded). The last partial batch is dropped.\n"
              "Deterministic for a seed on one device and dispatch table (no variant uses atomics).\n"
              "mlp data: Debian's dataset-fashion-mnist package (gzipped IDX files), or --data DIR.\n"
              "logreg, per epoch: the training loss (mean over the epoch's steps, each before its update), the\n"
              "accuracy on every training row and the test loss and accuracy after the epoch (p > 1/2 predicts the\n"
              "second class), the median step time (CUDA events around each replay). Same data as mlp, two classes.\n"
              "lstm, gru: per epoch the training loss, the validation loss from the zero state and its bits per\n"
              "character (loss / ln 2), the median step time (CUDA events around each replay) and characters/s; then\n"
              "the losses after steps 1 and 100 and --sample characters drawn by a float64 CPU forward of the\n"
              "trained weights. Data: Debian's jargon-text package, or --data FILE (90% training, 10% validation).\n"
              "lstm, gru --timing-suite: after training (and after --save-trained's weights are read), 50 warm-up and\n"
              "150 timed training steps as the original work's GRU benchmark ran them (--warmup-steps, --timed-steps\n"
              "change the counts); the data wraps to the first batch after the last. Prints the median, p10 and p90\n"
              "step time and writes them, with every timed step, as \"timing_suite\" in --results. To time alone,\n"
              "train one step first: --steps 1 --timing-suite."};
}

int run_train(const ParsedArgs& a, std::ostream& out, std::ostream& err, const std::string& command_line) {
  const auto runner = std::find_if(runners().begin(), runners().end(),
                                   [&](const TrainRunner& r) { return r.name == a.positional[0]; });
  if (runner == runners().end())
    throw UsageError("unknown model '" + a.positional[0] + "'; models: " + runner_names());
  for (const auto& other : runners())
    for (const auto& o : other.options) {
      const bool own = std::any_of(runner->options.begin(), runner->options.end(),
                                   [&](const OptionSpec& mine) { return mine.name == o.name; });
      if (!own && a.has(o.name))
        throw UsageError("--" + o.name + " is an option of `train " + other.name + "`, not of `train " + runner->name +
                         "`");
    }
  TrainCommon c;
  c.runner = parse_runner_options(a);
  c.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  c.results_path = a.value("results");
  c.command_line = command_line;
  if (runner->check) runner->check(a);

  if (auto why = cuda_unavailable_reason()) {
    err << "error: `shapetune train` needs a CUDA device: " << *why << "\n";
    return 2;
  }
  return runner->run(a, c, out, err);
}

}  // namespace shapetune::cli
