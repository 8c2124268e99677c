#include "cli/cli.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <ostream>
#include <sstream>

#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/args.hpp"
#include "cli/measure_options.hpp"
#include "cli/run.hpp"
#include "cli/table.hpp"
#include "cli/train.hpp"
#include "core/build_info.hpp"
#include "core/counters.hpp"
#include "core/format.hpp"
#include "db/export.hpp"
#include "db/report.hpp"
#include "db/store.hpp"
#include "harness/ceilings.hpp"
#include "harness/device.hpp"
#include "tuner/check.hpp"
#include "tuner/merge.hpp"
#include "tuner/parallel_sweep.hpp"
#include "tuner/shape_file.hpp"
#include "tuner/sweep.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using cli::CommandSpec;
using cli::ParsedArgs;
using cli::UsageError;

// Failures of the user's input that are not command-line syntax (unwritable file, bad db).
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Command {
  CommandSpec spec;
  std::function<int(const ParsedArgs&, std::ostream&, std::ostream&)> run;
};

const cli::OptionSpec kDbOption{"db", 0, "FILE", "the SQLite database (created by sweep if missing)"};

std::string join_args(const std::vector<std::string>& args) {
  std::string out = "shapetune";
  for (const auto& a : args) out += " " + a;
  return out;
}

std::string require_db(const ParsedArgs& a) {
  auto db = a.value("db");
  if (!db) throw UsageError("--db FILE is required");
  return *db;
}

std::unique_ptr<Store> open_store(const std::string& path, OpenMode mode) {
  try {
    return Store::open(path, mode);
  } catch (const StoreError& e) {
    throw InputError(e.what());
  }
}

std::string human_bytes(double b) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  if (b >= 1e9) s << b / (1 << 30) << " GiB";
  else s << b / (1 << 20) << " MiB";
  return s.str();
}

// ---- devices ---------------------------------------------------------------------------
int cmd_devices(const ParsedArgs&, std::ostream& out, std::ostream& err) {
  if (auto why = cuda_unavailable_reason()) {
    err << "no usable CUDA device: " << *why << "\n";
    return 2;
  }
  for (const auto& d : list_devices()) {
    const auto& f = d.fingerprint;
    out << "device " << d.ordinal << ": " << f.name << "\n"
        << "  key               " << f.key() << "\n"
        << "  compute capability " << f.compute_capability / 10 << "." << f.compute_capability % 10 << "\n"
        << "  SMs               " << f.sm_count << "\n"
        << "  L2                " << human_bytes(static_cast<double>(f.l2_bytes)) << "\n"
        << "  memory            " << human_bytes(static_cast<double>(f.memory_bytes)) << " (" << d.memory_bus_bits
        << "-bit bus, " << d.memory_clock_mhz << " MHz)\n"
        << "  shared mem/block  " << d.limits.shared_memory_per_block_optin / 1024 << " KiB (opt-in)\n"
        << "  PCI bus           " << d.pci_bus_id << "\n"
        << "  driver            " << f.driver_version << "\n"
        << "  CUDA runtime      " << f.runtime_version << "\n"
        << "  cuBLAS            " << f.cublas_version << "\n"
        << "  cuDNN             " << f.cudnn_version << "\n";
  }
  return 0;
}

// ---- list --------------------------------------------------------------------------------
std::string describe_space(const ParamSpace& space) {
  if (space.axes().empty()) return "    (no parameters)\n";
  std::ostringstream s;
  for (const auto& axis : space.axes()) {
    s << "    " << axis.name << " in {";
    for (std::size_t i = 0; i < axis.values.size(); ++i) s << (i ? ", " : "") << axis.values[i];
    s << "}: " << axis.description << "\n";
  }
  if (!space.constraint_text().empty()) s << "    where " << space.constraint_text() << "\n";
  s << "    " << space.enumerate().size() << " configs (" << space.raw_size() << " before constraints)\n";
  return s.str();
}

int cmd_list(const ParsedArgs& a, std::ostream& out, std::ostream&) {
  const Catalogue& cat = catalogue();
  if (a.positional.empty()) {
    for (const Primitive* p : cat.primitives()) {
      out << p->name << ": " << p->description << "\n  axes:";
      for (const auto& axis : p->axes) out << " " << axis;
      out << "; dtypes:";
      for (DType t : p->dtypes) out << " " << dtype_name(t);
      out << "\n  variants:";
      for (const Variant* v : cat.variants(p->name)) out << " " << v->name << (v->baseline ? " (baseline)" : "");
      out << "\n";
    }
    out << "\n`shapetune list PRIMITIVE` shows each variant's parameter space.\n";
    return 0;
  }
  const Primitive* p = cat.find_primitive(a.positional[0]);
  if (!p) throw UsageError("unknown primitive '" + a.positional[0] + "'; known: " + cat.primitive_names());
  out << p->name << ": " << p->description << "\n  " << p->signature << "\n  default variant: " << p->default_variant;
  for (const std::string& next : p->fallback_variants) out << ", then " << next;
  out << "\n  tolerances:";
  for (DType t : p->dtypes) {
    const Tolerance tol = p->tolerance(t);
    out << " " << dtype_name(t) << " (atol " << tol.atol << ", rtol " << tol.rtol << ")";
  }
  out << "\n";
  for (const auto& s : p->scalars) out << "  scalar " << s.name << " = " << s.value << " (tuning value): " << s.description << "\n";
  out << "\n";
  for (const Variant* v : cat.variants(p->name)) {
    out << "  " << v->name << (v->baseline ? " [baseline]" : "") << ": " << v->description << "\n"
        << describe_space(v->params);
  }
  return 0;
}

// ---- sweep -------------------------------------------------------------------------------
void check_variant_names(const std::vector<std::string>& variants, const std::vector<std::string>& primitives) {
  const Catalogue& cat = catalogue();
  for (const auto& name : variants) {
    bool found = false;
    std::string known;
    for (const Primitive* p : cat.primitives()) {
      if (!primitives.empty() && std::find(primitives.begin(), primitives.end(), p->name) == primitives.end())
        continue;
      found = found || cat.find_variant(p->name, name);
      known += (known.empty() ? "" : "; ") + p->name + ": " + cat.variant_names(p->name);
    }
    if (!found) throw UsageError("unknown variant '" + name + "'; known variants: " + known);
  }
}

// "all" or a comma list of ordinals; an ordinal may repeat (two workers on one GPU).
std::vector<int> parse_devices(const std::string& text) {
  std::vector<int> devices;
  if (text == "all") {
    if (auto why = cuda_unavailable_reason()) throw InputError("--devices all: no usable CUDA device: " + *why);
    for (const auto& d : list_devices()) devices.push_back(d.ordinal);
    return devices;
  }
  for (const auto& item : cli::split_comma_lists({text})) {
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (ec != std::errc() || end != item.data() + item.size() || ordinal < 0 || ordinal > 1024)
      throw UsageError("--devices: expected all or a comma list of device ordinals (0,2,3), got '" + text + "'");
    devices.push_back(ordinal);
  }
  if (devices.empty()) throw UsageError("--devices: expected all or a comma list of device ordinals, got nothing");
  return devices;
}

// The progress line's form: redrawn where the error stream is this process's terminal, a plain
// line now and then where it is a file, a pipe or a caller's stream; none with --no-progress or
// when --json-progress takes the error stream.
void set_progress(const ParsedArgs& a, std::ostream& err, ProgressStyle& style, std::size_t& columns) {
  if (a.has("no-progress") || a.value("json-progress") == "-") {
    style = ProgressStyle::none;
    return;
  }
  style = ProgressStyle::plain;
  if (&err != &std::cerr || !isatty(STDERR_FILENO)) return;
  style = ProgressStyle::redraw;
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0) columns = size.ws_col;
}

// --devices: the same sweep as shards over one worker process per listed GPU (tuner/parallel_sweep).
int sweep_on_devices(const ParsedArgs& a, const SweepOptions& o, const std::string& device_list, std::ostream& out,
                     std::ostream& err) {
  if (o.shard) throw UsageError("--devices splits the file into shards itself; give --devices or --shard, not both");
  if (a.has("device")) throw UsageError("--devices lists the GPUs to use; --device names one: give one of them");
  ParallelSweepOptions p;
  p.shape_file = o.shape_file;
  p.db_path = o.db_path;
  p.devices = parse_devices(device_list);
  ShapeFile file;
  try {
    file = load_shape_file(o.shape_file, catalogue());
  } catch (const ShapeFileError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  p.problem_count = sweep_problems(file, o).size();
  if (p.problem_count == 0) {
    err << "error: " << o.shape_file << " has no problems to sweep (with these --primitive options)\n";
    return 2;
  }
  // Each worker sees only its shard, where nothing to measure is a warning; here it is the whole sweep's.
  if (const auto why = nothing_to_measure(file, o)) {
    err << "error: " << *why << "\n";
    return 2;
  }
  const int workers = static_cast<int>(p.devices.size());
  p.shard_count = static_cast<int>(std::min<std::size_t>(4 * static_cast<std::size_t>(workers), p.problem_count));
  p.shard_expected_s = expected_shard_s(file, o, p.shard_count);
  p.progress = o.progress;
  p.progress_columns = o.progress_columns;
  p.json_progress = o.json_progress;
  // Every worker's options but where it runs and stores; the budget is the whole sweep's, so
  // each shard gets its share of the workers' time.
  const std::vector<std::string> values = {"primitive", "variant", "strategy", "counters", "metrics"};
  const std::vector<std::string> flags = {"fresh", "verbose"};
  std::vector<std::string> names = values;
  for (const auto& spec : cli::measurement_option_specs("candidate"))
    if (!spec.value_name.empty()) names.push_back(spec.name);
  for (const auto& name : names)
    for (const auto& value : a.values(name)) p.sweep_args.push_back("--" + name + "=" + value);
  for (const auto& name : flags)
    if (a.has(name)) p.sweep_args.push_back("--" + name);
  for (const auto& spec : cli::measurement_option_specs("candidate"))
    if (spec.value_name.empty() && a.has(spec.name)) p.sweep_args.push_back("--" + spec.name);
  if (o.budget_s > 0)
    p.sweep_args.push_back("--budget=" + std::to_string(o.budget_s * workers / p.shard_count));
  // One input seed for every shard, as one process would use.
  const std::uint64_t seed = o.seed ? *o.seed : std::random_device{}();
  p.sweep_args.push_back("--seed=" + std::to_string(seed));
  out << "Input seed " << seed << " for every shard\n";
  return run_parallel_sweep(p, out, err);
}

int cmd_sweep(const ParsedArgs& a, std::ostream& out, std::ostream& err, const std::vector<std::string>& all_args) {
  SweepOptions o;
  o.shape_file = a.positional[0];
  o.dry_run = a.has("dry-run");
  if (!o.dry_run) o.db_path = require_db(a);
  o.primitives = cli::split_comma_lists(a.values("primitive"));
  o.variants = cli::split_comma_lists(a.values("variant"));
  for (const auto& p : o.primitives)
    if (!catalogue().find_primitive(p))
      throw UsageError("unknown primitive '" + p + "'; known: " + catalogue().primitive_names());
  check_variant_names(o.variants, o.primitives);
  o.budget_s = a.number("budget", 0, 0, 1e7);
  if (const auto strategy = a.value("strategy")) {
    o.strategy = parse_search_strategy(*strategy);
    if (!o.strategy)
      throw UsageError("--strategy must be one of " + std::string(kSearchStrategyNames) + ", got '" + *strategy + "'");
  }
  cli::apply_measurement_options(a, o.measure);
  if (const auto shard = a.value("shard")) {
    std::string why;
    o.shard = parse_shard(*shard, &why);
    if (!o.shard) throw UsageError("--shard: " + why);
  }
  o.fresh = a.has("fresh");
  o.verbose = a.has("verbose");
  set_progress(a, err, o.progress, o.progress_columns);
  if (const auto path = a.value("json-progress")) {
    if (path->empty()) throw UsageError("--json-progress needs a file, or - for the error stream");
    o.json_progress = *path;
  }
  o.device = static_cast<int>(a.integer("device", 0, 0, 1024));
  if (a.has("seed")) o.seed = static_cast<std::uint64_t>(a.integer("seed", 0, 0, INT64_MAX));
  if (const auto mode = a.value("counters")) {
    const auto parsed = parse_counter_mode(*mode);
    if (!parsed) throw UsageError("--counters must be " + std::string(kCounterModeNames) + ", got '" + *mode + "'");
    o.counters = *parsed;
  }
  o.extra_metrics = cli::split_comma_lists(a.values("metrics"));
  if (!o.extra_metrics.empty() && o.counters == CounterMode::none)
    throw UsageError("--metrics names counters to collect, but --counters none collects none");
  o.command_line = join_args(all_args);
  if (const auto devices = a.value("devices"); devices && !o.dry_run) return sweep_on_devices(a, o, *devices, out, err);
  return run_sweep(o, out, err);
}

// ---- winners / export ----------------------------------------------------------------------
// "DRAM 1.02x model" where the winner was profiled: measured bytes over the cost model's (the
// stored one; rows from before schema 4 have none, so the catalogue's), "-" where it was not.
std::string winner_counters_text(const Store& store, const WinnerRecord& w, const Cost& catalogue_cost) {
  const auto values = store.counter_values(w.sweep_id, w.problem.key(), w.variant, w.config.key());
  if (values.empty()) return "-";
  const double model_bytes = std::isfinite(w.cost.bytes) ? w.cost.bytes : catalogue_cost.bytes;
  const std::string dram = counters::dram_vs_model_text(values, model_bytes);
  return dram.empty() ? "profiled" : "DRAM " + dram;
}

// Why a stored winner is not something this build can run: a primitive, variant, dtype, shape or
// config the catalogue does not know. A database damaged in place garbles names; one written by
// another version may name variants since removed. Empty when it is known.
std::string unknown_to_catalogue(const WinnerRecord& w) {
  const Primitive* p = catalogue().find_primitive(w.problem.primitive);
  if (!p) return "primitive '" + w.problem.primitive + "'";
  if (std::find(p->dtypes.begin(), p->dtypes.end(), w.problem.dtype) == p->dtypes.end())
    return "dtype " + std::string(dtype_name(w.problem.dtype)) + " of " + p->name;
  std::vector<std::string> axes;
  for (const auto& [name, value] : w.problem.shape.dims()) axes.push_back(name);
  if (axes != p->axes) return "shape " + w.problem.shape.key() + " (the axes of " + p->name + " differ)";
  const Variant* v = catalogue().find_variant(p->name, w.variant);
  if (!v) return "variant '" + w.variant + "' of " + p->name;
  if (!v->params.contains(w.config)) return "config {" + w.config.key() + "} of " + p->name + "/" + v->name;
  return {};
}

// The --device-key a user gave, checked against the database's devices: a key that names none
// is a mistake to say, not an empty table.
std::string device_key_option(const ParsedArgs& a, const Store& store) {
  const std::string key = a.value("device-key").value_or("");
  if (key.empty()) return key;
  std::string known;
  for (const auto& d : store.devices()) {
    if (d.key() == key) return key;
    known += (known.empty() ? "" : ", ") + d.key();
  }
  throw InputError("no device with key '" + key + "' in " + store.path() + "; its devices: " +
                   (known.empty() ? "none" : known));
}

// How many of the winner's problem's candidates crashed or hung their GPU worker in its sweep.
std::string faults_text(const Store& store, const WinnerRecord& w) {
  const auto faulted = store.faulted_candidates(w.sweep_id, w.problem.key());
  return faulted.empty() ? "-" : std::to_string(faulted.size());
}

int cmd_winners(const ParsedArgs& a, std::ostream& out, std::ostream& err) {
  auto store = open_store(require_db(a), OpenMode::read_only);
  const auto winners = store->winners(device_key_option(a, *store));
  if (winners.empty()) {
    out << "no winners in " << store->path() << " yet (run `shapetune sweep FILE.yaml --db " << store->path() << "`)\n";
    return 0;
  }
  std::string device;
  std::vector<std::string> unknown_rows;
  cli::Table table({"problem", "winner", "median", "p10..p90", "mode", "achieved", "baseline", "speedup", "runner-up",
                    "margin", "counters", "crashed"});
  for (const auto& w : winners) {
    if (w.device_key != device) {
      if (!table.empty()) {
        out << table.render() << "\n";
        table.clear();
      }
      device = w.device_key;
      out << "device " << device << "\n";
    }
    const std::string unknown = unknown_to_catalogue(w);
    if (!unknown.empty()) unknown_rows.push_back(w.problem.key() + ": " + unknown);
    const Primitive* p = unknown.empty() ? catalogue().find_primitive(w.problem.primitive) : nullptr;
    const Cost cost = p ? p->cost(w.problem) : Cost{};
    table.add({w.problem.key(),
               (w.config.values().empty() ? w.variant : w.variant + "{" + w.config.key() + "}") +
                   (unknown.empty() ? "" : " (unknown here)"),
               fmt_us(w.timing.median_us), fmt_us(w.timing.p10_us) + ".." + fmt_us(w.timing.p90_us),
               std::string(timing_mode_name(w.timing.mode)), fmt_achieved(cost.bytes, cost.flops, w.timing.median_us),
               w.best_baseline.empty() ? "-" : w.best_baseline + " " + fmt_us(w.baseline_us),
               w.best_baseline.empty() ? "-" : fmt_fixed(w.speedup_vs_baseline, 2) + "x",
               w.runner_up_variant.empty() ? "-" : w.runner_up_variant,
               w.runner_up_variant.empty() ? "-" : (w.tie ? "tie " : "") + fmt_fixed(100 * w.margin_rel, 1) + "%",
               winner_counters_text(*store, w, cost), faults_text(*store, w)});
  }
  out << table.render();
  if (!unknown_rows.empty()) {
    err << "warning: " << unknown_rows.size() << " winner(s) name what this build's catalogue does not have (a "
        << "damaged database, or one from another shapetune version); dispatch cannot run them:\n";
    for (const auto& row : unknown_rows) err << "  " << row << "\n";
  }
  return 0;
}

// An export written over its own database (or the database's journal files) would destroy it.
void refuse_to_overwrite(const std::string& db, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  for (const std::string suffix : {"", "-wal", "-shm", "-journal"}) {
    const fs::path guarded = db + suffix;
    const bool same = fs::exists(output, ignored) && fs::exists(guarded, ignored)
                          ? fs::equivalent(output, guarded, ignored)
                          : fs::weakly_canonical(output, ignored) == fs::weakly_canonical(guarded, ignored);
    if (same) throw InputError("--output " + output + " is the database " + guarded.string() + " itself; choose another file");
  }
}

void write_output(const std::string& text, const std::optional<std::string>& path, std::ostream& out) {
  if (!path || *path == "-") {
    out << text;
    return;
  }
  std::ofstream file(*path, std::ios::binary | std::ios::trunc);
  if (!file) throw InputError("cannot write " + *path + ": " + std::strerror(errno));
  file << text;
  file.close();
  if (!file) throw InputError("cannot write " + *path + ": " + std::strerror(errno));
}

int cmd_export(const ParsedArgs& a, std::ostream& out, std::ostream& err, const std::vector<std::string>& all_args) {
  const std::string format = a.value("format").value_or("");
  if (format != "json" && format != "csv" && format != "header")
    throw UsageError("--format must be json, csv or header, got '" + format + "'");
  const std::string db = require_db(a);
  if (const auto path = a.value("output"); path && *path != "-") refuse_to_overwrite(db, *path);
  auto store = open_store(db, OpenMode::read_only);
  std::vector<WinnerRecord> winners = store->winners(device_key_option(a, *store));
  // Rows this build cannot dispatch are refused, unless asked for: kept in JSON and CSV (with a
  // warning), never in a header, which user code compiles in as its dispatch table.
  const bool keep_unknown = a.has("keep-unknown");
  std::vector<WinnerRecord> known;
  for (auto& w : winners) {
    const std::string unknown = unknown_to_catalogue(w);
    if (unknown.empty()) {
      known.push_back(w);
      continue;
    }
    if (!keep_unknown)
      throw InputError(store->path() + ": the winner of " + w.problem.key() + " names " + unknown +
                       ", which this build's catalogue does not have (a damaged database, or one from another "
                       "shapetune version). `shapetune winners` lists such rows; --keep-unknown exports them anyway");
    err << "warning: " << w.problem.key() << ": " << unknown << " is not in this build's catalogue"
        << (format == "header" ? "; left out of the header" : "") << "\n";
  }
  if (format == "header") winners = std::move(known);
  std::string text;
  if (format == "json")
    text = export_json(store->devices(), winners);
  else if (format == "csv")
    text = export_csv(winners);
  else
    text = export_header(winners, {join_args(all_args), store->schema_version(), store->path()});
  write_output(text, a.value("output"), out);
  if (auto path = a.value("output"); path && *path != "-")
    err << "wrote " << winners.size() << " winners to " << *path << "\n";
  return 0;
}

// ---- ceilings ------------------------------------------------------------------------------
int cmd_ceilings(const ParsedArgs& a, std::ostream& out, std::ostream& err) {
  const std::string db = require_db(a);
  if (auto why = cuda_unavailable_reason()) {
    err << "error: `shapetune ceilings` needs a CUDA device: " << *why << "\n";
    return 2;
  }
  auto store = open_store(db, OpenMode::read_write);
  const DeviceInfo device = use_device(static_cast<int>(a.integer("device", 0, 0, 1024)));
  store->upsert_device(device.fingerprint);
  Measurer measurer(device, MeasureOptions{});
  const auto bytes = static_cast<std::int64_t>(a.number("bytes", 1 << 30, 1 << 20, 1e12));
  const std::int64_t gemm_n = a.integer("gemm-n", 8192, 256, 32768);
  const int launches = static_cast<int>(a.integer("launches", 1000, 10, 100000));
  std::vector<std::string> skipped;
  std::vector<MeasuredCeiling> measured = measure_memory_ceilings(measurer, bytes);
  measured.push_back(measure_fma_ceiling(measurer));
  for (auto& c : measure_gemm_ceilings(measurer, gemm_n, skipped)) measured.push_back(std::move(c));
  for (auto& c : measure_launch_ceilings(measurer, launches)) measured.push_back(std::move(c));
  measured.push_back(measure_grid_barrier(measurer, 1000));
  for (auto& c : measure_cluster_barriers(measurer, 1000, skipped)) measured.push_back(std::move(c));
  cli::Table table({"ceiling", "value", "median sample", "samples", "method"});
  for (const auto& c : measured) {
    store->store_ceiling({device.fingerprint.key(), c.name, c.value, c.unit, c.method, build_git_sha(), utc_now_iso8601()});
    table.add({c.name, fmt_quantity(c.value, c.unit), fmt_us(c.timing.median_us), std::to_string(c.timing.samples), c.method});
  }
  out << "device " << device.fingerprint.key() << "\n" << table.render();
  for (const auto& why : skipped) out << "not measured: " << why << "\n";
  return 0;
}

// ---- check ---------------------------------------------------------------------------------
int cmd_check(const ParsedArgs& a, std::ostream& out, std::ostream& err) {
  CheckOptions o;
  o.db_path = require_db(a);
  if (!a.positional.empty()) o.shape_file = a.positional[0];
  o.device = static_cast<int>(a.integer("device", 0, 0, 1024));
  o.rule.threshold = a.number("threshold", o.rule.threshold, 0, 100);
  if (a.has("seed")) o.seed = static_cast<std::uint64_t>(a.integer("seed", 0, 0, INT64_MAX));
  o.candidate_timeout_s = a.number("candidate-timeout", 0, 0.1, 86400);
  const bool strict = a.has("strict");
  CheckRun run;
  try {
    run = run_check(o, out);
  } catch (const CheckSetupError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  cli::Table table({"problem", "winner", "accuracy", "stored", "now", "change", "verdict", "crashed in sweep"});
  for (const CheckRow& r : run.rows) {
    const WinnerRecord* w = r.stored ? &*r.stored : nullptr;
    std::string change = "-";
    if (r.compared())
      change = std::string(r.change_rel >= 0 ? "+" : "") + fmt_fixed(100 * r.change_rel, 1) + "% (limit " +
               fmt_fixed(100 * r.limit_rel, 1) + "%)";
    table.add({r.problem.key(),
               !w ? "-" : w->config.values().empty() ? w->variant : w->variant + "{" + w->config.key() + "}",
               check_accuracy_text(r), w ? fmt_us(w->timing.median_us) : "-",
               r.compared() ? fmt_us(r.fresh->timing->median_us) : "-", change, std::string(check_verdict_name(r.verdict)),
               r.swept_faults ? std::to_string(r.swept_faults) : "-"});
  }
  out << "\n" << table.render();
  for (const CheckRow& r : run.rows)
    if (r.verdict != CheckVerdict::ok && r.verdict != CheckVerdict::not_tuned)
      out << "  " << r.problem.key() << ": " << check_verdict_name(r.verdict) << ": " << r.detail << "\n";
  out << check_summary(run.rows, strict) << "\n";
  return check_exit_code(run.rows, strict);
}

// ---- report --------------------------------------------------------------------------------
int cmd_report(const ParsedArgs& a, std::ostream& out, std::ostream& err) {
  ReportOptions options;
  options.db_path = require_db(a);
  const auto dir = a.value("output");
  if (!dir || dir->empty() || *dir == "-") throw UsageError("-o DIR is required (the directory to write the report in)");
  options.out_dir = *dir;
  options.compare_db = a.value("compare");
  const bool fail_on_regression = a.has("fail-on-regression");
  if (fail_on_regression && !options.compare_db) throw UsageError("--fail-on-regression needs --compare OTHER.db");
  options.generator = std::string("shapetune ") + build_git_sha();
  options.baseline_kind = [](const std::string& primitive, const std::string& variant) {
    const Variant* v = catalogue().find_variant(primitive, variant);
    if (!v) return BaselineKind::unknown;
    return v->library ? BaselineKind::library : BaselineKind::own_chain;
  };
  ReportResult result;
  try {
    result = write_report(options);
  } catch (const ReportError& e) {
    throw InputError(e.what());
  }
  out << "wrote " << result.readme_path << " (" << result.winners << " winners, " << result.scripts.size()
      << " plot scripts";
  if (result.scripts.empty())
    out << ")\n";
  else if (!result.gnuplot_found)
    out << ", not rendered)\n";
  else
    out << ", " << result.svgs.size() << " rendered)\n";
  if (!result.scripts.empty() && !result.gnuplot_found)
    err << "note: gnuplot is not on PATH; render the plots with `gnuplot " << options.out_dir << "/plots/*.gp`\n";
  if (result.plots_failed) err << "warning: gnuplot failed on " << result.plots_failed << " plot(s); see "
                               << options.out_dir << "/plots/gnuplot.log\n";
  if (options.compare_db && result.regressions) {
    err << (fail_on_regression ? "REGRESSION: " : "note: ") << result.regressions << " problem"
        << (result.regressions == 1 ? "" : "s") << " slower than in " << *options.compare_db
        << " beyond the noise band, or missing here:";
    for (std::size_t i = 0; i < result.regressed.size() && i < 10; ++i) err << " " << result.regressed[i];
    if (result.regressed.size() > 10) err << " ...";
    err << " (see " << result.readme_path << ")\n";
    if (fail_on_regression) return 1;
  }
  return 0;
}

// ---- migrate -------------------------------------------------------------------------------
int cmd_migrate(const ParsedArgs& a, std::ostream& out, std::ostream&) {
  const std::string& path = a.positional[0];
  int version = 0;
  try {
    version = Store::file_schema_version(path);
  } catch (const StoreError& e) {
    throw InputError(e.what());
  }
  const int latest = Store::latest_schema_version();
  if (version == latest) {
    out << path << " is at schema v" << latest << ", this build's: nothing to do\n";
    return 0;
  }
  if (version > latest) throw InputError(path + " has schema v" + std::to_string(version) +
                                         "; this shapetune understands up to v" + std::to_string(latest) +
                                         ": upgrade shapetune");
  const std::string backup = path + ".v" + std::to_string(version) + ".bak";
  if (std::filesystem::exists(backup))
    throw InputError(backup + " exists already; move it away (it may be an earlier backup) and run migrate again");
  try {
    Store::backup(path, backup);
    open_store(path, OpenMode::read_write);  // migrates, one transaction per step
  } catch (const StoreError& e) {
    throw InputError(e.what());
  }
  out << "migrated " << path << " from schema v" << version << " to v" << latest << "; the original is kept as "
      << backup << "\n";
  return 0;
}

// ---- the command table -------------------------------------------------------------------
std::vector<Command> commands(const std::vector<std::string>& all_args) {
  std::vector<Command> list;
  list.push_back({{"devices", "List the visible CUDA devices with the fingerprint their winners are keyed by.", "", 0, 0, {}, ""},
                  cmd_devices});
  list.push_back({{"list", "List primitives; with PRIMITIVE, its variants, their parameter spaces and tolerances.",
                   "[PRIMITIVE]", 0, 1, {}, ""},
                  cmd_list});
  list.push_back(
      {{"sweep",
        "Tune every problem of a YAML shape matrix: verify each candidate against the float64 reference, time the "
        "accurate ones, store every result and each problem's winner in the database.",
        "FILE.yaml",
        1,
        1,
        {kDbOption,
         {"primitive", 0, "P", "only this primitive (repeatable, or a comma list)", true},
         {"variant", 0, "V", "only this variant (repeatable, or a comma list); baselines are variants too", true},
         {"budget", 0, "SECONDS", "wall-clock budget for the whole sweep, shared out over the remaining problems"},
         {"strategy", 0, "NAME",
          "exhaustive, random or halving: the search for every problem, instead of the shape file's search:"},
         {"fresh", 0, "", "start a new sweep even if an unfinished matching one could be resumed"},
         {"dry-run", 0, "", "list problems, candidate counts and expected times; measures nothing, needs no GPU"},
         {"shard", 0, "K/N",
          "only shard K of N (1 <= K <= N): the problems split into N parts of near-equal expected time, so N "
          "processes (GPUs, Slurm array tasks) sweep each problem once; combine their databases with merge"},
         {"device", 0, "N", "CUDA device ordinal (default 0)"},
         {"devices", 0, "all|0,2,3",
          "spread the sweep over these GPUs: one worker process each, taking cost-balanced shards from a queue; "
          "the parts (DB.parts/) are merged into --db at the end. An ordinal may repeat (workers share that GPU: "
          "a test of the path; their timings disturb each other, so tune with one worker per GPU)"},
         {"seed", 0, "N", "seed for the random inputs (default: a fresh one, printed)"},
         {"verbose", 'v', "", "one line per candidate"},
         {"no-progress", 0, "", "no progress line on the error stream (each problem's line stays)"},
         {"json-progress", 0, "FILE",
          "write progress events for tools to FILE (- : the error stream, instead of the progress line), one "
          "JSON object a line, flushed as each happens"},
         {"counters", 0, "all|winners|none",
          "read hardware counters (CUPTI) of each problem's winner (default), every accurate candidate, or none"},
         {"metrics", 0, "M",
          "CUPTI metrics to collect besides the default set (repeatable, or a comma list), e.g. "
          "lts__t_sectors_srcunit_tex_op_read.sum; checked before anything is measured",
          true}},
        "Search strategies (per matrix in the shape file as search: {...}, or --strategy for all):\n"
        "  exhaustive  every candidate that supports() accepts, each fully measured (the default)\n"
        "  random      every baseline and variant default, then a uniform sample of the rest up to the matrix's\n"
        "              samples: N or fraction: F, or until --budget runs out (one of them is required)\n"
        "  halving     successive halving: baseline defaults fully measured; the others verified, raced on a few samples\n"
        "              each (min_samples, default 5), the best 1/eta (default 3) raced again with eta times the\n"
        "              samples, until at most eta are left, which get the full measurement\n"
        "Constraints prune before any launch: strategies only choose among supported candidates. Every strategy\n"
        "measures the baselines first, then the variants' defaults in the order dispatch falls back through them\n"
        "(the primitive's default variant first): once a problem has a winner, --budget cuts what is left.\n"
        "The dispatch table: a problem's row is the fastest accurate candidate among this sweep's measurements and\n"
        "the newest ones of earlier sweeps on the device in the same L2 mode (hot or cold), each candidate as last\n"
        "measured. So a narrower sweep (--variant) cannot make the table slower; where an earlier measurement\n"
        "stays faster, the line says \"table keeps VARIANT{CONFIG} TIME (sweep N)\".\n"
        "Progress: one line per problem with its winner, the best baseline, how many of the supported candidates\n"
        "were fully measured (\"measured 5/312 (halving: raced 300 in 5 rungs)\") and the candidate counts. Besides,\n"
        "on the error stream, the whole sweep's progress after each candidate: problems done, the share of the cost\n"
        "model's expected time done, and the time left, the model's estimate scaled by the rate measured so far\n"
        "(\"3/31 problems, 42% of the expected work in 40 s, about 55 s left (1.31x the cost model) | [4/31] ...\").\n"
        "On a terminal it is one line redrawn in place; in a log a \"progress: ...\" line every 10 s at most.\n"
        "--json-progress FILE writes events for tools as well, one JSON object a line: sweep_start (problems,\n"
        "expected_s), candidate (problem, variant, config, status, median_us), progress (problems_done, expected_s,\n"
        "done_s, elapsed_s, eta_s; at most once a second), problem_done (winner, median_us, baseline, speedup,\n"
        "missing_baselines, table_keeps where the table keeps an earlier sweep's row) and sweep_end (status,\n"
        "exit_code, without_winner, without_baseline); README lists them.\n"
        "Baselines: when a problem's candidates include baselines and none of them ran (each unsupported, failed\n"
        "or crashed), \"warning: PROBLEM: no baseline ran, ...\" names each one's reason, and the last line counts\n"
        "such problems. Filters (--variant, --primitive, the file's variants:) that leave no supported candidate\n"
        "for any problem stop the sweep before it starts (with --shard, a warning: other shards may have some).\n"
        "Profiling: NVTX ranges name each problem (setup: inputs and reference), and each candidate's verify, race\n"
        "and time phases, in the GPU worker where the launches run: nsys profile -t cuda,nvtx build/shapetune sweep ...\n"
        "Counters: after a problem's timing, the chosen candidates are profiled once each with CUPTI's range profiler\n"
        "(kernel replay, L2 flushed first): DRAM bytes read and written, duration, achieved occupancy, L2 hit rate,\n"
        "DRAM and SM throughput %, FP32/FP16 add, mul and fma instructions (FLOPs = add + mul + 2 fma), tensor-pipe\n"
        "instructions, and --metrics. Each problem's line shows the winner's DRAM bytes against the cost model's\n"
        "(\"counters: DRAM 1.02x model\"). Where profiling is not possible (no privileges, MIG, another profiler\n"
        "attached) the sweep says \"counters unavailable: REASON\" once, records it, and goes on.\n"
        "Isolation: every launch runs in a GPU worker process. A candidate that faults (illegal address, trap, a\n"
        "signal or abort) is stored as crashed with the error, one still running at --candidate-timeout as timeout;\n"
        "the worker is restarted (the same inputs, from the same seed) and the sweep goes on. Neither can win.\n"
        "Budget: --budget covers the whole sweep from start to end, shared out over the problems left. Once a\n"
        "problem's share is spent it measures only until it has a winner (the first accurate baseline or default),\n"
        "profiles nothing more, and the last line says how many candidates and profiles were cut.\n"
        "Scale-out: --shard K/N sweeps part K of N (split by the cost model's expected time, the same on every\n"
        "machine), so N processes or Slurm array tasks (scripts/slurm/, docs/SLURM.md) cover the file once; `shapetune\n"
        "merge` combines their databases. --devices runs that on one host: one worker per listed GPU taking shards\n"
        "from a queue; a worker that dies is reported and its shard re-queued; the parts are merged into --db.\n"
        "An interrupted sweep (Ctrl-C, crash) loses at most the candidate in flight: run the same command again and\n"
        "it resumes. Exit codes: 0 done; 1 failed during the sweep, or nothing measured (not one problem got an\n"
        "accurate candidate); 2 could not start (bad options or shape file, no GPU, unusable database, nothing to\n"
        "measure); 130 interrupted."},
       [all_args](const ParsedArgs& a, std::ostream& out, std::ostream& err) { return cmd_sweep(a, out, err, all_args); }});
  {  // the shared measurement options, after --strategy in --help
    auto& options = list.back().spec.options;
    const auto shared = cli::measurement_option_specs("candidate");
    options.insert(options.begin() + 5, shared.begin(), shared.end());
  }
  list.push_back({{"winners",
                   "Show the dispatch table: per device and problem, the winner, its time, the best baseline, the "
                   "runner-up and, where the sweep profiled it, its DRAM bytes against the cost model's.",
                   "",
                   0,
                   0,
                   {kDbOption, {"device-key", 0, "KEY", "only this device (as `shapetune devices` prints it)"}},
                   ""},
                  cmd_winners});
  list.push_back({{"export",
                   "Write the dispatch table as JSON, CSV or a self-contained C++17 header (header: for model "
                   "runners that cannot link SQLite; constexpr shapetune_dispatch::find() and find_nearest()).",
                   "", 0, 0,
                   {kDbOption,
                    {"format", 0, "json|csv|header", "output format (required)"},
                    {"output", 'o', "FILE", "write here instead of standard output"},
                    {"device-key", 0, "KEY", "only this device"},
                    {"keep-unknown", 0, "",
                     "export winners this build's catalogue does not know (an older version's variants, or a damaged "
                     "database) instead of refusing; never into a header"}},
                   "A winner whose primitive, variant, dtype, shape or config this build does not know is refused\n"
                   "(exit 2) unless --keep-unknown is given."},
                  [all_args](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
                    return cmd_export(a, out, err, all_args);
                  }});
  list.push_back({{"ceilings",
                   "Measure the device's empirical ceilings and store them: DRAM copy bandwidth, FP32 FMA rate, "
                   "tensor-core rate per dtype (cuBLAS GEMM) and launch overhead; reports use these, never datasheet "
                   "numbers.",
                   "",
                   0,
                   0,
                   {kDbOption, {"device", 0, "N", "CUDA device ordinal (default 0)"},
                    {"bytes", 0, "N", "bytes copied per sample (default 1 GiB)"},
                    {"gemm-n", 0, "N", "GEMM size n (n x n x n) of the tensor-core and SGEMM ceilings (default 8192)"},
                    {"launches", 0, "N", "empty-kernel launches per launch-overhead sample (default 1000)"}},
                   "Ceilings (name, unit, how):\n"
                   "  dram_copy_memcpy, dram_copy_kernel_vec16, dram_copy_kernel_scalar  B/s  cudaMemcpyAsync device to\n"
                   "      device and two grid-stride copy kernels; bytes read + bytes written per second\n"
                   "  dram_copy_best       B/s     the best copy: the bandwidth roof in reports\n"
                   "  fp32_fma             FLOP/s  a kernel of independent FMA chains (2 FLOPs per FMA): the f32 roof\n"
                   "  tensor_f16, tensor_bf16, tensor_tf32  FLOP/s  cuBLAS GEMM n^3 with fp32 accumulation (2 n^3\n"
                   "      FLOPs): the roof of that dtype; left out where the device has no tensor cores for it\n"
                   "  sgemm_fp32           FLOP/s  cublasSgemm n^3 on CUDA cores, for reference\n"
                   "  launch_overhead_stream, launch_overhead_graph  s  per empty-kernel launch, back to back on a\n"
                   "      stream, and as nodes of one CUDA graph\n"
                   "Every figure is the median of cold samples timed like the kernels (CUDA events, L2 evicted before\n"
                   "each sample). About 10-30 s on an H200."},
                  cmd_ceilings});
  list.push_back({{"check",
                   "Re-verify every stored winner of this device (or the problems of FILE.yaml) on fresh random "
                   "inputs with its recorded tolerance, time it again and compare with the stored median; exits "
                   "non-zero on an accuracy violation or a performance regression. What CI calls.",
                   "[FILE.yaml]",
                   0,
                   1,
                   {kDbOption,
                    {"threshold", 0, "FRACTION", "smallest slowdown that is a regression (default 0.10)"},
                    {"strict", 0, "", "a problem of FILE.yaml without a winner on this device is a failure too"},
                    {"device", 0, "N", "CUDA device ordinal (default 0)"},
                    {"seed", 0, "N", "seed for the random inputs (default: a fresh one, printed)"},
                    {"candidate-timeout", 0, "SECONDS",
                     "kill a winner still running after this long: an ERROR row (default: derived from its cost "
                     "model and stored time, at least 20 s)"}},
                   "Each winner is verified as a sweep verifies (outputs poisoned, every element compared with the\n"
                   "float64 reference: |out-ref| <= atol OR <= rtol*|ref|, with the atol/rtol stored beside the winner)\n"
                   "and timed with the measurement options of the sweep that chose it (cold or hot, samples, CI target,\n"
                   "time cap). With c_stored and c_now the medians' relative 95% CI half-widths:\n"
                   "  limit = max(threshold, 2 * (c_stored + c_now))\n"
                   "  REGRESSION when now > stored * (1 + limit); faster when now < stored * (1 - limit); else ok.\n"
                   "A winner that cannot run (variant gone, refused, CUDA error) is an ERROR. Problems of FILE.yaml\n"
                   "without a winner on this device are listed as not tuned. The database is only read.\n"
                   "Exit codes: 0 all accurate and within the limit; 1 an accuracy violation, a regression or an error\n"
                   "(the last line says which); 2 bad usage, no CUDA device, or no winners for this device."},
                  cmd_check});
  list.push_back({{"report",
                   "Write a report directory from the database alone: README.md (provenance, a summary, devices, "
                   "ceilings and roofs, per-family winner tables with achieved rate and % of the measured roofline, "
                   "baselines that could not run), roofline, speedup and winner-map plots (SVG and PNG) and, with "
                   "--compare, a per-problem comparison with another database.",
                   "", 0, 0,
                   {kDbOption,
                    {"output", 'o', "DIR", "the directory to write (created if missing; required). An earlier "
                                           "report's README.md, data/*.dat and plots/* there are removed first"},
                    {"compare", 0, "OTHER.db", "compare each problem's winner and median with this database's"},
                    {"fail-on-regression", 0, "", "with --compare: exit 1 when a problem is slower here beyond the "
                                                  "noise band, or has a winner in OTHER.db and none here (for CI)"}},
                   "Plots need gnuplot on PATH (Debian: gnuplot-nox); without it the .gp scripts and their data are\n"
                   "written and README.md says how to render them (gnuplot DIR/plots/*.gp). Speedups are labelled by\n"
                   "what the baseline is: a library (cuBLAS, cuBLASLt, cuDNN) or shapetune's own unfused chain.\n"
                   "Compare verdicts: faster, slower, or same when the change is within max(1%, both medians'\n"
                   "recorded 95% CI). Exit codes: 0 written; 1 --fail-on-regression found a regression;\n"
                   "2 bad usage or a database that cannot be read."},
                  cmd_report});
  list.push_back({{"merge",
                   "Combine databases swept apart (--shard parts, Slurm array tasks, other machines) into one: every "
                   "row kept with its provenance, each device's winners recomputed from the merged candidates.",
                   "OUT.db IN.db...",
                   2,
                   100000,
                   {},
                   "OUT.db is created if missing; the inputs are only read (an older schema is migrated in a private\n"
                   "copy; a newer one is refused). Rules:\n"
                   "  a sweep is the same sweep when its device, command, git sha, shape file, options and start time\n"
                   "    are equal: it is stored once, and a finished copy brings an unfinished one up to date;\n"
                   "  the same candidate (sweep, problem, variant, config) measured twice: the later measurement is kept;\n"
                   "  a device's winner for a problem is chosen as a sweep chooses it (fastest accurate full\n"
                   "    measurement; ties within the noise are flagged) from the newest measurement of each candidate\n"
                   "    over the sweeps that finished the problem in the latest one's L2 mode (hot or cold);\n"
                   "  devices with different fingerprints keep separate winners; identical GPUs share theirs.\n"
                   "Merging is idempotent: the same inputs again change nothing. Exit codes: 0 merged; 2 an input or\n"
                   "OUT.db could not be read or written (the inputs before it stay merged)."},
                  [](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
                    return run_merge(a.positional[0], std::vector<std::string>(a.positional.begin() + 1, a.positional.end()),
                                     catalogue_cost, completed_config_key, out, err);
                  }});
  list.push_back({{"migrate",
                   "Upgrade a database to this build's schema in place, after copying the original to DB.vN.bak "
                   "(read-only verbs read older schemas without it, through a private migrated copy).",
                   "DB", 1, 1, {},
                   "Exit codes: 0 migrated or already current; 2 not a shapetune database, a newer schema, the backup\n"
                   "exists already, or the file cannot be written."},
                  cmd_migrate});
  list.push_back({cli::run_spec(), [all_args](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
                    return cli::run_model(a, out, err, join_args(all_args));
                  }});
  list.push_back({cli::train_spec(), [all_args](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
                    return cli::run_train(a, out, err, join_args(all_args));
                  }});
  return list;
}

std::string top_help(const std::vector<Command>& list) {
  std::ostringstream s;
  s << "shapetune " << build_git_sha() << ": shape-aware autotuning of CUDA kernels\n\n"
    << "usage: shapetune COMMAND [options]   (shapetune COMMAND --help for each; shapetune --version)\n\ncommands:\n";
  for (const auto& c : list) s << "  " << std::left << std::setw(10) << c.spec.name << c.spec.summary << "\n";
  s << "\nA typical session: shapetune devices; shapetune sweep shapes/quick.yaml --db shapetune.db;\n"
       "shapetune winners --db shapetune.db; shapetune export --db shapetune.db --format json -o winners.json\n";
  return s.str();
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const auto list = commands(args);
  if (!args.empty() && (args[0] == "--version" || args[0] == "version")) {
    out << "shapetune " << build_git_sha() << " (database schema v" << Store::latest_schema_version() << ")\n";
    return 0;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (args.empty() ? err : out) << top_help(list);
    return args.empty() ? 2 : 0;
  }
  const auto command = std::find_if(list.begin(), list.end(), [&](const Command& c) { return c.spec.name == args[0]; });
  if (command == list.end()) {
    std::string names;
    for (const auto& c : list) names += (names.empty() ? "" : ", ") + c.spec.name;
    err << "error: unknown command '" << args[0] << "'; commands: " << names << " (shapetune --help)\n";
    return 2;
  }
  try {
    const ParsedArgs parsed = cli::parse(command->spec, std::vector<std::string>(args.begin() + 1, args.end()));
    if (parsed.has("help")) {
      out << cli::help_text(command->spec);
      return 0;
    }
    const int code = command->run(parsed, out, err);
    // What was printed must have arrived: a full disk or a closed stdout is a failure, not a success.
    out.flush();
    if (!out) {
      err << "error: cannot write to standard output (" << std::strerror(errno) << ")\n";
      return code == 0 ? 1 : code;
    }
    return code;
  } catch (const UsageError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const InputError& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const StoreError& e) {  // a database that cannot be read as one: bad input
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace shapetune
