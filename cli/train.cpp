#include "cli/train.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <ostream>

#include "core/build_info.hpp"
#include "core/json.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "models/mlp.hpp"
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
       run_mlp},
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
  std::vector<OptionSpec> options = {
      {"db", 0, "FILE", "the database whose winners of this device are dispatched (without it: every problem "
                        "takes its primitive's default variant)"},
      {"dispatch", 0, "tuned|library",
       "tuned: the dispatch table (default); library: cuBLAS/cuBLASLt/cuDNN baselines only, for comparison"},
      {"seed", 0, "N", "seed of the initial weights and the shuffles (default 1)"},
      {"device", 0, "N", "CUDA device ordinal (default 0)"},
      {"results", 0, "FILE", "also write the run (resolutions, every epoch) as JSON here"},
  };
  for (const auto& r : runners())
    for (OptionSpec o : r.options) {
      o.help = r.name + ": " + o.help;
      options.push_back(std::move(o));
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
              "Per epoch: training loss (mean over the epoch's steps), test accuracy, training time and images/s (the\n"
              "epoch's graph replays, shuffle included, evaluation excluded). The last partial batch is dropped.\n"
              "Deterministic for a seed on one device and dispatch table (no variant uses atomics).\n"
              "mlp data: Debian's dataset-fashion-mnist package (gzipped IDX files), or --data DIR."};
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
  if (auto db = a.value("db")) c.runner.db_path = *db;
  const std::string dispatch = a.value("dispatch").value_or("tuned");
  const auto mode = parse_dispatch_mode(dispatch);
  if (!mode) throw UsageError("--dispatch must be tuned or library, got '" + dispatch + "'");
  c.runner.dispatch = *mode;
  c.runner.device = static_cast<int>(a.integer("device", 0, 0, 1024));
  c.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  c.results_path = a.value("results");
  c.command_line = command_line;

  if (auto why = cuda_unavailable_reason()) {
    err << "error: `shapetune train` needs a CUDA device: " << *why << "\n";
    return 2;
  }
  return runner->run(a, c, out, err);
}

}  // namespace shapetune::cli
