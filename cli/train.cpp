#include "cli/train.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/build_info.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "models/mlp.hpp"

namespace shapetune::cli {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// The run as one JSON document: what ran, where, how each problem resolved, every epoch.
std::string results_json(const MlpOptions& o, const MlpTrainer& trainer, const DeviceInfo& device,
                         const std::vector<EpochResult>& epochs, const std::string& command_line) {
  std::ostringstream s;
  s << std::setprecision(9);
  s << "{\n  \"model\": \"mlp\",\n  \"command\": " << json_string(command_line)
    << ",\n  \"git_sha\": " << json_string(build_git_sha()) << ",\n  \"device_key\": "
    << json_string(device.fingerprint.key()) << ",\n  \"device_name\": " << json_string(device.fingerprint.name)
    << ",\n  \"dispatch\": " << json_string(o.dispatch == DispatchMode::tuned ? "tuned" : "library")
    << ",\n  \"db\": " << json_string(o.db_path) << ",\n  \"batch\": " << o.batch << ",\n  \"seed\": " << o.seed
    << ",\n  \"lr\": " << o.lr << ",\n  \"adam_in_graph\": " << (o.adam_in_graph ? "true" : "false")
    << ",\n  \"train_limit\": " << o.train_limit << ",\n  \"measured_at\": "
    << json_string(utc_now_iso8601()) << ",\n  \"resolutions\": [";
  const auto& res = trainer.resolutions();
  for (std::size_t i = 0; i < res.size(); ++i)
    s << (i ? "," : "") << "\n    {\"op\": " << json_string(res[i].op.name)
      << ", \"problem\": " << json_string(res[i].op.problem.key()) << ", \"variant\": " << json_string(res[i].variant)
      << ", \"config\": " << json_string(res[i].config) << ", \"source\": " << json_string(res[i].source) << "}";
  s << "\n  ],\n  \"epochs\": [";
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    const auto& e = epochs[i];
    s << (i ? "," : "") << "\n    {\"epoch\": " << e.epoch << ", \"train_loss\": " << e.train_loss
      << ", \"test_accuracy\": " << e.test_accuracy << ", \"train_seconds\": " << e.train_seconds
      << ", \"images_per_second\": " << e.images_per_second << ", \"steps\": " << e.steps << "}";
  }
  s << "\n  ]\n}\n";
  return s.str();
}

}  // namespace

CommandSpec train_spec() {
  return {"train",
          "Train a model runner through the dispatch table: `mlp` (784-256-128-10 ReLU MLP on Fashion-MNIST, softmax "
          "cross-entropy, Adam); a training step as one CUDA graph, replayed (Adam a child graph swapped per step).",
          "mlp",
          1,
          1,
          {{"db", 0, "FILE", "the database whose winners of this device are dispatched (without it: every problem "
                             "takes its primitive's default variant)"},
           {"data", 0, "DIR", std::string("the Fashion-MNIST .gz files (default ") + kFashionMnistDir + ")"},
           {"epochs", 0, "N", "training epochs (default 15)"},
           {"batch", 0, "B", "batch size (default 128; shapes/mlp.yaml tunes exactly this one)"},
           {"dispatch", 0, "tuned|library",
            "tuned: the dispatch table (default); library: cuBLAS/cuBLASLt/cuDNN baselines only, for comparison"},
           {"seed", 0, "N", "seed of the initial weights and the shuffles (default 1)"},
           {"lr", 0, "X", "Adam's learning rate (default 0.001)"},
           {"train-limit", 0, "N", "train on the first N images only (default: all 60000)"},
           {"device", 0, "N", "CUDA device ordinal (default 0)"},
           {"results", 0, "FILE", "also write the run (resolutions, every epoch) as JSON here"},
           {"adam-after-graph", 0, "",
            "launch Adam after each graph replay instead of as a child graph swapped into it (for comparison)"}},
          "At start it prints which variant each operation of the step resolved to and why: exact (tuned for this\n"
          "problem), nearest (the nearest tuned shape), default (nothing tuned applies), or the library baseline.\n"
          "Per epoch: training loss (mean over the epoch's steps), test accuracy, training time and images/s (the\n"
          "epoch's graph replays, shuffle included, evaluation excluded). The last partial batch is dropped.\n"
          "Deterministic for a seed on one device and dispatch table (no variant uses atomics).\n"
          "Data: Debian's dataset-fashion-mnist package (gzipped IDX files), or --data DIR."};
}

int run_train(const ParsedArgs& a, std::ostream& out, std::ostream& err, const std::string& command_line) {
  if (a.positional[0] != "mlp") throw UsageError("unknown model '" + a.positional[0] + "'; models: mlp");
  MlpOptions o;
  if (auto db = a.value("db")) o.db_path = *db;
  o.epochs = static_cast<int>(a.integer("epochs", 15, 1, 100000));
  o.batch = static_cast<int>(a.integer("batch", 128, 1, 1 << 20));
  o.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  o.lr = a.number("lr", 1e-3, 1e-12, 10);
  o.train_limit = a.integer("train-limit", 0, 0, INT64_MAX);
  o.device = static_cast<int>(a.integer("device", 0, 0, 1024));
  o.adam_in_graph = !a.has("adam-after-graph");
  const std::string dispatch = a.value("dispatch").value_or("tuned");
  if (dispatch == "tuned") o.dispatch = DispatchMode::tuned;
  else if (dispatch == "library") o.dispatch = DispatchMode::library;
  else throw UsageError("--dispatch must be tuned or library, got '" + dispatch + "'");
  const std::string data_dir = a.value("data").value_or(kFashionMnistDir);
  const auto results_path = a.value("results");

  if (auto why = cuda_unavailable_reason()) {
    err << "error: `shapetune train` needs a CUDA device: " << *why << "\n";
    return 2;
  }
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
      << " epochs, dispatch " << dispatch << (o.db_path.empty() ? " (no --db: defaults)" : " from " + o.db_path)
      << ", seed " << o.seed << "\n";
  print_resolutions(*trainer, out);
  out << "\nepoch  train loss  test acc  train s   images/s\n" << std::flush;
  std::vector<EpochResult> epochs;
  for (int e = 0; e < o.epochs; ++e) {
    epochs.push_back(trainer->train_epoch());
    const auto& r = epochs.back();
    out << std::right << std::setw(5) << r.epoch << "  " << std::fixed << std::setprecision(4) << std::setw(10)
        << r.train_loss << "  " << std::setprecision(2) << std::setw(7) << 100 * r.test_accuracy << "%  "
        << std::setprecision(3) << std::setw(7) << r.train_seconds << "  " << std::setprecision(0) << std::setw(9)
        << r.images_per_second << "\n"
        << std::defaultfloat << std::flush;
    if (!std::isfinite(r.train_loss)) {
      err << "error: the training loss is not finite at epoch " << r.epoch << "\n";
      return 1;
    }
  }
  if (results_path) {
    std::ofstream file(*results_path, std::ios::trunc);
    file << results_json(o, *trainer, device, epochs, command_line);
    if (!file) {
      err << "error: cannot write " << *results_path << ": " << std::strerror(errno) << "\n";
      return 2;
    }
    err << "wrote " << *results_path << "\n";
  }
  return 0;
}

}  // namespace shapetune::cli
