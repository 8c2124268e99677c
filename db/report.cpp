#include "db/report.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string_view>

#include <fcntl.h>
#include <stdlib.h>  // mkdtemp
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/counters.hpp"
#include "core/format.hpp"
#include "core/primitive_name.hpp"
#include "core/records.hpp"
#include "db/store.hpp"

namespace shapetune {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kCopyCeiling = "dram_copy_best";

std::string printf_text(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string percent(double fraction) { return printf_text("%.1f%%", 100 * fraction); }

bool positive(double v) { return std::isfinite(v) && v > 0; }

// A Markdown table cell: pipes escaped, line breaks flattened.
std::string cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

std::string code(std::string_view text) { return "`" + cell(text) + "`"; }

std::string table_row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const auto& c : cells) out += " " + c + " |";
  return out + "\n";
}

std::string table_head(const std::vector<std::string>& names) {
  std::string out = table_row(names) + "|";
  for (std::size_t i = 0; i < names.size(); ++i) out += "---|";
  return out + "\n";
}

std::string variant_text(const std::string& variant, const Config& config) {
  return config.values().empty() ? variant : variant + "{" + config.key() + "}";
}

// "activation.gelu" -> "activation"; "softmax" -> "softmax".
std::string family_of(const std::string& primitive) {
  const auto name = PrimitiveName::parse(primitive);
  return name ? name->family : primitive;
}

// A file name made of letters, digits, '_' and '-'.
std::string file_stem(std::string_view text) {
  std::string out;
  for (const char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

std::string ceiling_value_text(const CeilingRecord& c) { return fmt_quantity(c.value, c.unit); }

bool is_compute_bound(const Cost& cost) {
  return cost.flops > 0 && (cost.bytes <= 0 || cost.flops / cost.bytes >= kComputeBoundIntensity);
}

// The measured ceilings of one device.
struct Ceilings {
  std::optional<double> copy_bytes_per_s;            // dram_copy_best
  std::vector<const CeilingRecord*> compute;         // fp32_fma*, tensor_* in FLOP/s

  // Whether a compute ceiling bounds problems of this type: fp32_fma* for f32, tensor_<dtype>
  // (tensor_f16, tensor_bf16, tensor_tf32) for the types tensor cores take.
  static bool bounds(const CeilingRecord& c, DType dtype) {
    if (dtype == DType::f32) return c.name.rfind("fp32_fma", 0) == 0;
    return c.name == "tensor_" + std::string(dtype_name(dtype));
  }
  // The compute ceiling that bounds a problem of this type (the largest when several match).
  std::optional<double> compute_for(DType dtype) const {
    std::optional<double> best;
    for (const CeilingRecord* c : compute)
      if (bounds(*c, dtype) && (!best || c->value > *best)) best = c->value;
    return best;
  }
};

Ceilings ceilings_of(const std::vector<CeilingRecord>& all, const std::string& device_key) {
  Ceilings out;
  for (const auto& c : all) {
    if (c.device_key != device_key || !positive(c.value)) continue;
    if (c.name == kCopyCeiling) out.copy_bytes_per_s = c.value;
    if (c.unit == "FLOP/s" && (c.name.rfind("fp32_fma", 0) == 0 || c.name.rfind("tensor_", 0) == 0))
      out.compute.push_back(&c);
  }
  return out;
}

// The winner's share of the measured roofline at its arithmetic intensity.
std::string roofline_text(const WinnerRecord& w, const Ceilings& ceilings) {
  const Cost& cost = w.cost;
  const double seconds = w.timing.median_us * 1e-6;
  if (!std::isfinite(cost.bytes) || !std::isfinite(cost.flops) || !positive(seconds)) return "-";
  if (!is_compute_bound(cost)) {
    if (cost.bytes <= 0) return "-";
    if (!ceilings.copy_bytes_per_s) return "no copy ceiling measured";
    return percent(cost.bytes / seconds / *ceilings.copy_bytes_per_s);
  }
  const auto compute = ceilings.compute_for(w.problem.dtype);
  if (!compute) return "no compute ceiling measured";
  double roof = *compute;
  if (ceilings.copy_bytes_per_s && cost.bytes > 0)
    roof = std::min(roof, *ceilings.copy_bytes_per_s * cost.flops / cost.bytes);
  return percent(cost.flops / seconds / roof);
}

std::string achieved_text(const WinnerRecord& w) {
  if (!std::isfinite(w.cost.bytes) || !std::isfinite(w.cost.flops) || !positive(w.timing.median_us)) return "-";
  const std::string text = fmt_achieved(w.cost.bytes, w.cost.flops, w.timing.median_us);
  return text.empty() ? "-" : text;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw ReportError("cannot write " + path.string() + ": " + std::strerror(errno));
  file << text;
  file.close();
  if (!file) throw ReportError("cannot write " + path.string() + ": " + std::strerror(errno));
}

// What a report reads from one database.
struct DbContents {
  int schema_version = 0;
  int schema_found = 0;  // older than schema_version when it was migrated in a temporary copy
  std::vector<DeviceFingerprint> devices;
  std::vector<WinnerRecord> winners;
  std::vector<CeilingRecord> ceilings;
  std::vector<counters::Values> winner_counters;        // beside winners; empty where not profiled
  std::vector<std::vector<CandidateRecord>> winner_faults;  // beside winners: crashed or hung candidates
  std::vector<std::pair<std::int64_t, std::string>> counters_unavailable;  // sweep id, reason
};

DbContents contents_of(const Store& store, int schema_found) {
  DbContents db{store.schema_version(), schema_found, store.devices(), store.winners(), store.ceilings(), {}, {}, {}};
  for (const auto& w : db.winners) {
    db.winner_counters.push_back(store.counter_values(w.sweep_id, w.problem.key(), w.variant, w.config.key()));
    db.winner_faults.push_back(store.faulted_candidates(w.sweep_id, w.problem.key()));
  }
  for (const auto& sweep : store.sweeps())
    if (auto reason = store.counters_unavailable(sweep.id)) db.counters_unavailable.emplace_back(sweep.id, *reason);
  return db;
}

// The schema version recorded in the file (SQLite's user_version, bytes 60..63 of the header).
int file_schema_version(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  unsigned char header[64] = {};
  if (!file.read(reinterpret_cast<char*>(header), sizeof header)) return 0;
  return (header[60] << 24) | (header[61] << 16) | (header[62] << 8) | header[63];
}

// Opens read-only. A database of an older schema is never changed: it is copied (with its -wal
// file, if any) to a temporary file, migrated there, read, and the copy removed.
DbContents read_db(const std::string& path) {
  const int found = file_schema_version(path);
  if (found == 0 || found >= Store::latest_schema_version()) {
    try {
      return contents_of(*Store::open(path, OpenMode::read_only), found);
    } catch (const StoreError& e) {
      throw ReportError(e.what());
    }
  }
  std::string pattern = (fs::temp_directory_path() / "shapetune-report-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw ReportError("cannot create a temporary directory to migrate a copy of " + path);
  const fs::path copy_dir = pattern;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{copy_dir};
  const fs::path copy = copy_dir / "copy.db";
  std::error_code error;
  fs::copy_file(path, copy, error);
  if (!error && fs::exists(path + "-wal")) fs::copy_file(path + "-wal", copy.string() + "-wal", error);
  if (error) throw ReportError("cannot copy " + path + " to migrate it: " + error.message());
  // The copy keeps the original's permissions; a 0444 database must still be migratable here.
  for (const fs::path& file : {copy, fs::path(copy.string() + "-wal")})
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, error);
  try {
    return contents_of(*Store::open(copy.string(), OpenMode::read_write), found);
  } catch (const StoreError& e) {
    throw ReportError(path + " (migrated in a temporary copy): " + e.what());
  }
}

// Strings from a database reach gnuplot in two places, and a database may come from anyone, so
// neither may let gnuplot run anything. In a script, a double-quoted string undergoes backtick
// command substitution; a single-quoted one is taken literally (no backticks, no @macros, no
// escapes), its only special character the quote itself, written twice. Data files are never
// substituted; there a double-quoted field groups words, and a quote inside it becomes '.
// Control characters (a line break would end the command) and bytes outside printable ASCII
// are replaced in both.
char gp_safe_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte < 0x20 || byte == 0x7f) return ' ';
  return byte > 0x7f ? '?' : c;
}

std::string gp_literal(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    const char safe = gp_safe_char(c);
    out += safe;
    if (safe == '\'') out += '\'';
  }
  return out + "'";
}

std::string dat_field(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const char safe = gp_safe_char(c);
    out += safe == '"' ? '\'' : safe;
  }
  return out + "\"";
}

std::string num(double v) { return printf_text("%.6g", v); }

// The top of every plot script: paths are found relative to the script itself (ARG0), so
// `gnuplot DIR/plots/NAME.gp` works from any directory.
std::string gp_preamble(const std::string& name, int width, int height) {
  std::string s;
  s += "# Written by shapetune report. Render: gnuplot DIR/plots/" + name + ".gp (from any directory).\n";
  s += "here = ARG0[1:strlen(ARG0) - strlen(" + gp_literal(name + ".gp") + ")]\n";
  s += "data = here . '../data/'\n";
  s += "reset\n";
  s += "set terminal svg size " + std::to_string(width) + "," + std::to_string(height) +
       " dynamic noenhanced font 'sans,11' background rgb 'white'\n";
  s += "set output here . " + gp_literal(name + ".svg") + "\n";
  return s;
}

struct PlotFile {
  std::string name;   // stem: plots/NAME.gp, plots/NAME.svg
  std::string title;  // for the README
};

struct Plotter {
  fs::path dir;
  std::vector<PlotFile> plots;

  void data(const std::string& file, const std::string& text) const { write_file(dir / "data" / file, text); }
  void script(const std::string& name, const std::string& title, const std::string& text) {
    write_file(dir / "plots" / (name + ".gp"), text);
    plots.push_back({name, title});
  }
};

// (a) roofline per family: x = FLOPs per byte, y = FLOP/s, the copy ceiling as y = C x.
void roofline_plot(Plotter& plotter, const std::string& family, const std::vector<const WinnerRecord*>& winners,
                   const Ceilings& ceilings) {
  std::string won = "# intensity_flops_per_byte achieved_flops_per_s problem variant\n";
  std::string base = "# intensity_flops_per_byte achieved_flops_per_s problem baseline\n";
  double lo = INFINITY, hi = 0, ylo = INFINITY, yhi = 0;
  int points = 0, base_points = 0;
  for (const WinnerRecord* w : winners) {
    const Cost& c = w->cost;
    if (!positive(c.bytes) || !positive(c.flops) || !positive(w->timing.median_us)) continue;
    const double x = c.flops / c.bytes;
    const double y = c.flops / (w->timing.median_us * 1e-6);
    won += num(x) + " " + num(y) + " " + dat_field(w->problem.key()) + " " + dat_field(w->variant) + "\n";
    lo = std::min(lo, x), hi = std::max(hi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    ++points;
    if (!w->best_baseline.empty() && positive(w->baseline_us)) {
      const double yb = c.flops / (w->baseline_us * 1e-6);
      base += num(x) + " " + num(yb) + " " + dat_field(w->problem.key()) + " " + dat_field(w->best_baseline) + "\n";
      ylo = std::min(ylo, yb), yhi = std::max(yhi, yb);
      ++base_points;
    }
  }
  if (points == 0) return;
  const std::string stem = "roofline_" + file_stem(family);
  plotter.data(stem + "_winners.dat", won);
  if (base_points) plotter.data(stem + "_baselines.dat", base);
  if (ceilings.copy_bytes_per_s) yhi = std::max(yhi, *ceilings.copy_bytes_per_s * hi * 4);
  // Horizontal roofs: the compute ceilings of the dtypes this family's winners have.
  std::vector<const CeilingRecord*> roofs;
  for (const CeilingRecord* c : ceilings.compute)
    if (std::any_of(winners.begin(), winners.end(), [&](const WinnerRecord* w) { return Ceilings::bounds(*c, w->problem.dtype); })) {
      roofs.push_back(c);
      yhi = std::max(yhi, c->value);
    }
  std::string s = gp_preamble(stem, 900, 600);
  s += "set title " + gp_literal("roofline: " + family + " (measured ceilings only)") + "\n";
  s += "set logscale xy\n";
  s += "set xlabel 'arithmetic intensity (FLOP/byte)'\nset ylabel 'achieved FLOP/s'\n";
  s += "set grid\nset key top left\n";
  s += "set xrange [" + num(lo / 4) + ":" + num(hi * 4) + "]\n";
  s += "set yrange [" + num(ylo / 4) + ":" + num(yhi * 4) + "]\n";
  std::string plot = "plot data . " + gp_literal(stem + "_winners.dat") + " using 1:2 with points pt 7 ps 1.2 title 'winner'";
  if (base_points)
    plot += ", \\\n     data . " + gp_literal(stem + "_baselines.dat") + " using 1:2 with points pt 6 ps 1.2 title 'best baseline'";
  if (ceilings.copy_bytes_per_s)
    plot += ", \\\n     " + num(*ceilings.copy_bytes_per_s) + " * x with lines lw 2 title " +
            gp_literal("DRAM copy ceiling (" + fmt_rate(*ceilings.copy_bytes_per_s) + ")");
  for (const CeilingRecord* c : roofs)
    plot += ", \\\n     " + num(c->value) + " with lines dt 2 title " + gp_literal(c->name + " (" + ceiling_value_text(*c) + ")");
  s += plot + "\n";
  plotter.script(stem, "Roofline: " + family, s);
}

// (b) speedup over the best baseline per problem.
void speedup_plot(Plotter& plotter, const std::vector<WinnerRecord>& winners) {
  std::string text = "# index speedup problem baseline\n";
  int n = 0;
  for (const auto& w : winners) {
    if (w.best_baseline.empty() || !positive(w.speedup_vs_baseline)) continue;
    text += std::to_string(n++) + " " + num(w.speedup_vs_baseline) + " " + dat_field(w.problem.key()) + " " +
            dat_field(w.best_baseline) + "\n";
  }
  if (n == 0) return;
  plotter.data("speedup.dat", text);
  std::string s = gp_preamble("speedup", std::max(900, 200 + 28 * n), 700);
  s += "set title " + gp_literal("winner's speedup over the best library baseline") + "\n";
  s += "set lmargin 22\nset ylabel 'speedup (x)'\nset grid ytics\nset style fill solid 0.6\nset boxwidth 0.7\n";
  s += "set xtics rotate by 45 right font ',8'\nset xrange [-1:" + std::to_string(n) + "]\nset yrange [0:*]\n";
  s += "plot data . 'speedup.dat' using 1:2:xtic(3) with boxes notitle, 1 with lines dt 2 lc rgb 'black' notitle\n";
  plotter.script("speedup", "Speedup over the best baseline", s);
}

// (c) which variant wins each problem: one labelled point per problem in its variant's column.
void winner_map_plot(Plotter& plotter, const std::vector<WinnerRecord>& winners) {
  std::vector<std::string> variants;
  for (const auto& w : winners)
    if (std::find(variants.begin(), variants.end(), w.variant) == variants.end()) variants.push_back(w.variant);
  std::string text = "# variant_index problem_index problem variant\n";
  int n = 0;
  for (const auto& w : winners) {
    const auto v = std::find(variants.begin(), variants.end(), w.variant) - variants.begin();
    text += std::to_string(v) + " " + std::to_string(n++) + " " + dat_field(w.problem.key()) + " " +
            dat_field(w.variant) + "\n";
  }
  plotter.data("winner_map.dat", text);
  std::string s = gp_preamble("winner_map", std::max(700, 300 + 60 * static_cast<int>(variants.size())),
                              std::max(300, 160 + 16 * n));
  s += "set title 'winning variant per problem'\nset grid\n";
  s += "set xrange [-0.5:" + num(variants.size() - 0.5) + "]\nset yrange [" + num(n - 0.5) + ":-0.5]\n";
  s += "set ytics font ',8'\nset xtics rotate by 45 right (";
  for (std::size_t i = 0; i < variants.size(); ++i) s += (i ? ", " : "") + gp_literal(variants[i]) + " " + std::to_string(i);
  s += ")\n";
  s += "plot data . 'winner_map.dat' using 1:2:ytic(3) with points pt 7 ps 1.5 notitle\n";
  plotter.script("winner_map", "Winner map", s);
}

// The program's path: as given where it names a directory, else the first executable of that
// name on PATH. No shell is involved in finding or running it.
std::optional<std::string> find_program(const std::string& program) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos)
    return access(program.c_str(), X_OK) == 0 ? std::optional<std::string>(program) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    dirs.remove_prefix(colon + 1);
  }
}

// Runs `program script` with stdout and stderr appended to log, stdin from /dev/null; its exit
// status, or -1 when it could not be started or did not exit normally.
int run_plot_script(const std::string& program, const fs::path& script, const fs::path& log) {
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return -1;
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  const std::string script_path = script.string();
  char* const argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(script_path.c_str()), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(log_fd, STDOUT_FILENO) < 0 ||
        dup2(log_fd, STDERR_FILENO) < 0)
      _exit(127);
    execv(argv[0], argv);
    _exit(127);
  }
  close(log_fd);
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string devices_section(const std::vector<DeviceFingerprint>& devices) {
  std::string s = "## Devices\n\n";
  if (devices.empty()) return s + "No devices recorded.\n\n";
  s += table_head({"fingerprint", "name", "compute capability", "SMs", "L2", "memory", "driver", "CUDA runtime",
                   "cuBLAS", "cuDNN"});
  for (const auto& d : devices)
    s += table_row({code(d.key()), cell(d.name),
                    std::to_string(d.compute_capability / 10) + "." + std::to_string(d.compute_capability % 10),
                    std::to_string(d.sm_count), printf_text("%.0f MiB", d.l2_bytes / 1048576.0),
                    printf_text("%.1f GiB", d.memory_bytes / 1073741824.0), cell(d.driver_version),
                    cell(d.runtime_version), cell(d.cublas_version), cell(d.cudnn_version)});
  return s + "\n";
}

std::string ceilings_section(const std::vector<CeilingRecord>& ceilings, bool several_devices) {
  std::string s = "## Ceilings\n\n";
  if (ceilings.empty())
    return s + "No ceilings measured (`shapetune ceilings --db FILE` measures copy bandwidth, FP32 FMA and tensor-core "
               "rates and launch overhead); the roofline "
               "column says so.\n\n";
  std::vector<std::string> head = {"name", "value", "method"};
  if (several_devices) head.insert(head.begin(), "device");
  s += table_head(head);
  for (const auto& c : ceilings) {
    std::vector<std::string> row = {code(c.name), ceiling_value_text(c), cell(c.method)};
    if (several_devices) row.insert(row.begin(), code(c.device_key));
    s += table_row(row);
  }
  return s + "\n";
}

std::string winners_section(const std::vector<WinnerRecord>& winners, const std::vector<CeilingRecord>& ceilings,
                            bool several_devices) {
  std::string s = "## Winners\n\n";
  s += "Achieved: bandwidth (bytes moved by the cost model over the median time) where the problem does fewer than " +
       printf_text("%g", kComputeBoundIntensity) +
       " FLOPs a byte, else the FLOP rate. Roofline: achieved bandwidth over the measured `dram_copy_best` ceiling "
       "for memory-bound problems; for compute-bound ones, the FLOP rate over the lower of a measured compute "
       "ceiling (`fp32_fma` for f32, `tensor_<dtype>` for f16, bf16 and tf32) and the copy ceiling times the intensity. No datasheet "
       "numbers are used. Margin: the runner-up's time over the winner's, minus 1; a tie is within the noise. "
       "\"-\": not recorded (rows stored before schema 4 have no cost).\n\n";
  std::vector<std::string> devices;
  for (const auto& w : winners)
    if (std::find(devices.begin(), devices.end(), w.device_key) == devices.end()) devices.push_back(w.device_key);
  for (const auto& device : devices) {
    if (several_devices) s += "### Device " + code(device) + "\n\n";
    const Ceilings device_ceilings = ceilings_of(ceilings, device);
    std::map<std::string, std::vector<const WinnerRecord*>> families;
    for (const auto& w : winners)
      if (w.device_key == device) families[family_of(w.problem.primitive)].push_back(&w);
    for (const auto& [family, rows] : families) {
      s += (several_devices ? "#### " : "### ") + cell(family) + "\n\n";
      s += table_head({"problem", "winner", "median", "achieved", "% of roofline", "best baseline", "speedup",
                       "runner-up", "margin"});
      for (const WinnerRecord* w : rows) {
        const bool has_baseline = !w->best_baseline.empty();
        const bool has_runner_up = !w->runner_up_variant.empty();
        s += table_row({code(w->problem.key()), code(variant_text(w->variant, w->config)), fmt_us(w->timing.median_us),
                        achieved_text(*w), roofline_text(*w, device_ceilings),
                        has_baseline ? cell(w->best_baseline) + " " + fmt_us(w->baseline_us) : "-",
                        has_baseline && std::isfinite(w->speedup_vs_baseline)
                            ? fmt_fixed(w->speedup_vs_baseline, 2) + "x"
                            : "-",
                        has_runner_up ? code(variant_text(w->runner_up_variant, w->runner_up_config)) : "-",
                        has_runner_up && std::isfinite(w->margin_rel)
                            ? fmt_fixed(100 * w->margin_rel, 1) + "%" + (w->tie ? " (tie)" : "")
                            : "-"});
      }
      s += "\n";
    }
  }
  return s;
}

// Candidates that crashed or hung their GPU worker in the winners' sweeps: never winners, but
// a kernel being written that faults on some shapes is worth seeing.
std::string faults_section(const DbContents& db) {
  std::string rows;
  int candidates = 0, problems = 0;
  for (std::size_t i = 0; i < db.winners.size() && i < db.winner_faults.size(); ++i) {
    if (db.winner_faults[i].empty()) continue;
    ++problems;
    for (const CandidateRecord& c : db.winner_faults[i]) {
      ++candidates;
      rows += table_row({code(db.winners[i].problem.key()), code(variant_text(c.variant, c.config)),
                         cell(candidate_status_name(c.status)), cell(c.reason)});
    }
  }
  if (rows.empty()) return "";
  return "## Candidates that crashed or hung\n\n" + std::to_string(candidates) + " candidate" +
         (candidates == 1 ? "" : "s") + " of " + std::to_string(problems) + " problem" + (problems == 1 ? "" : "s") +
         " crashed (a signal, an abort, or a lost CUDA context) or hung past the watchdog's limit; each time the "
         "sweep restarted its GPU worker and went on. None of them can be a winner.\n\n" +
         table_head({"problem", "candidate", "status", "what happened"}) + rows + "\n";
}

// Hardware counters of the winners that were profiled (sweep --counters): measured DRAM bytes
// against the cost model's minimum, so excess traffic shows per variant.
std::string counters_section(const DbContents& db) {
  std::string s;
  for (const auto& [sweep, reason] : db.counters_unavailable)
    s += "- sweep #" + std::to_string(sweep) + ": counters unavailable: " + cell(reason) + "\n";
  auto value = [](const counters::Values& values, std::string_view metric) -> std::optional<double> {
    const auto it = values.find(std::string(metric));
    if (it == values.end() || !std::isfinite(it->second)) return std::nullopt;
    return it->second;
  };
  auto shown = [&](const counters::Values& values, std::string_view metric, double scale, const char* format) {
    const auto v = value(values, metric);
    return v ? printf_text(format, *v * scale) : std::string("-");
  };
  std::string table;
  for (std::size_t i = 0; i < db.winners.size(); ++i) {
    const WinnerRecord& w = db.winners[i];
    const counters::Values& values = db.winner_counters[i];
    if (values.empty()) continue;
    const std::string dram = counters::dram_vs_model_text(values, w.cost.bytes);
    table += table_row({code(w.problem.key()), code(variant_text(w.variant, w.config)),
                        shown(values, counters::kDramBytesRead, 1e-6, "%.1f MB"),
                        shown(values, counters::kDramBytesWrite, 1e-6, "%.1f MB"),
                        positive(w.cost.bytes) ? printf_text("%.1f MB", w.cost.bytes * 1e-6) : "-",
                        dram.empty() ? "-" : "**" + dram + "**", shown(values, counters::kDuration, 1e-3, "%.2f us"),
                        shown(values, counters::kOccupancy, 1, "%.1f%%"), shown(values, counters::kL2HitRate, 1, "%.1f%%"),
                        shown(values, counters::kDramThroughput, 1, "%.1f%%"),
                        shown(values, counters::kSmThroughput, 1, "%.1f%%"),
                        shown(values, counters::kFp32Flops, 1, "%.4g"), shown(values, counters::kFp16Flops, 1, "%.4g"),
                        shown(values, counters::kTensorInstructions, 1, "%.4g"), shown(values, counters::kKernels, 1, "%.0f")});
  }
  if (table.empty() && s.empty()) return "";
  std::string out = "## Counters\n\n";
  out += "Hardware counters of the profiled winners (CUPTI range profiler, kernel replay, one cold launch). DRAM vs "
         "model: bytes read plus written over the bytes the cost model says the problem must move; above 1, the "
         "kernel re-reads or moves partial sectors. FP32/FP16 FLOPs: add + mul + 2 fma instructions. Several "
         "kernels in one launch: counters summed, ratios and percentages left out (\"-\").\n\n";
  out += s;
  if (!s.empty()) out += "\n";
  if (!table.empty())
    out += table_head({"problem", "winner", "DRAM read", "DRAM written", "model bytes", "DRAM vs model", "duration",
                       "occupancy", "L2 hit", "DRAM %", "SM %", "FP32 FLOPs", "FP16 FLOPs", "tensor inst", "kernels"}) +
           table + "\n";
  return out;
}

std::string compare_section(const std::vector<WinnerRecord>& mine, const std::string& other_path,
                            const std::vector<WinnerRecord>& theirs) {
  std::string s = "## Compared with " + code(other_path) + "\n\n";
  s += "Per problem in both databases: this database's winning median against the other's. The noise band is the "
       "larger of 1% and each median's recorded 95% confidence interval; inside it, \"same\".\n\n";
  std::map<std::string, std::vector<const WinnerRecord*>> by_problem;
  for (const auto& w : theirs) by_problem[w.problem.key()].push_back(&w);
  int faster = 0, slower = 0, same = 0, both = 0;
  std::set<std::string> matched;
  std::string table;
  for (const auto& w : mine) {
    const auto found = by_problem.find(w.problem.key());
    if (found == by_problem.end()) continue;
    const WinnerRecord* other = found->second.front();
    for (const WinnerRecord* o : found->second)
      if (o->device_key == w.device_key) other = o;
    matched.insert(w.problem.key());
    ++both;
    const std::string verdict =
        compare_verdict(w.timing.median_us, w.timing.median_ci_rel, other->timing.median_us, other->timing.median_ci_rel);
    faster += verdict == "faster";
    slower += verdict == "slower";
    same += verdict == "same";
    const double change = w.timing.median_us / other->timing.median_us - 1;
    table += table_row({code(w.problem.key()), fmt_us(w.timing.median_us), fmt_us(other->timing.median_us),
                        std::isfinite(change) ? printf_text("%+.1f%%", 100 * change) : "-",
                        printf_text("%.1f%%", 100 * std::max({0.01, std::isfinite(w.timing.median_ci_rel) ? w.timing.median_ci_rel : 0.0,
                                                               std::isfinite(other->timing.median_ci_rel) ? other->timing.median_ci_rel : 0.0})),
                        verdict});
  }
  int only_other = 0;
  for (const auto& [key, rows] : by_problem) only_other += !matched.count(key);
  const int only_here = static_cast<int>(mine.size()) - both;
  s += "Summary: " + std::to_string(both) + " problems in both: " + std::to_string(faster) + " faster, " +
       std::to_string(slower) + " slower, " + std::to_string(same) + " same within noise; " +
       std::to_string(only_here) + " only here, " + std::to_string(only_other) + " only in the other.\n\n";
  if (both) s += table_head({"problem", "this", "other", "change", "noise band", "verdict"}) + table + "\n";
  return s;
}

}  // namespace

std::string compare_verdict(double this_us, double this_ci_rel, double other_us, double other_ci_rel) {
  if (!positive(this_us) || !positive(other_us)) return "n/a";
  const double band = std::max({0.01, std::isfinite(this_ci_rel) ? this_ci_rel : 0.0,
                                std::isfinite(other_ci_rel) ? other_ci_rel : 0.0});
  const double change = this_us / other_us - 1;
  if (std::fabs(change) <= band) return "same";
  return change < 0 ? "faster" : "slower";
}

ReportResult write_report(const ReportOptions& options) {
  const DbContents db = read_db(options.db_path);
  const auto& devices = db.devices;
  const auto& winners = db.winners;
  const auto& ceilings = db.ceilings;
  std::optional<std::vector<WinnerRecord>> other_winners;
  if (options.compare_db) other_winners = read_db(*options.compare_db).winners;

  const fs::path dir = options.out_dir;
  for (const fs::path& sub : {dir, dir / "data", dir / "plots"}) {
    std::error_code error;
    fs::create_directories(sub, error);
    if (error || !fs::is_directory(sub))
      throw ReportError("cannot create directory " + sub.string() + ": " +
                        (error ? error.message() : std::string("a file is in the way")));
  }

  std::set<std::string> device_keys;
  for (const auto& d : devices) device_keys.insert(d.key());
  for (const auto& w : winners) device_keys.insert(w.device_key);
  const bool several_devices = device_keys.size() > 1;

  ReportResult result;
  result.winners = static_cast<int>(winners.size());
  std::string md = "# shapetune report\n\n";
  md += "Written by `shapetune report` from " + code(options.db_path) + " (schema v" +
        std::to_string(db.schema_found ? db.schema_found : db.schema_version) +
        (db.schema_found && db.schema_found < db.schema_version
             ? ", read through a temporary copy migrated to v" + std::to_string(db.schema_version)
             : std::string()) +
        "): " + std::to_string(winners.size()) + " winners, " +
        std::to_string(ceilings.size()) + " ceilings.\n\n";
  md += devices_section(devices);
  md += ceilings_section(ceilings, several_devices);

  Plotter plotter{dir, {}};
  if (winners.empty()) {
    md += "## Winners\n\nNo winners in this database yet (run `shapetune sweep FILE.yaml --db " + options.db_path +
          "`); nothing to plot.\n\n";
  } else {
    md += winners_section(winners, ceilings, several_devices);
    md += counters_section(db);
    md += faults_section(db);
    // Plots: roofline per family (with the first device's ceilings), speedup, winner map.
    const std::string first_device = winners.front().device_key;
    std::map<std::string, std::vector<const WinnerRecord*>> families;
    for (const auto& w : winners)
      if (w.device_key == first_device) families[family_of(w.problem.primitive)].push_back(&w);
    const Ceilings plot_ceilings = ceilings_of(ceilings, first_device);
    for (const auto& [family, rows] : families) roofline_plot(plotter, family, rows, plot_ceilings);
    speedup_plot(plotter, winners);
    winner_map_plot(plotter, winners);
  }

  // Render: stale SVGs go first, so every image left is from this run.
  for (const auto& p : plotter.plots) {
    const fs::path svg = dir / "plots" / (p.name + ".svg");
    std::error_code ignored;
    fs::remove(svg, ignored);
    result.scripts.push_back((dir / "plots" / (p.name + ".gp")).string());
  }
  const std::optional<std::string> gnuplot = plotter.plots.empty() ? std::nullopt : find_program(options.gnuplot);
  result.gnuplot_found = gnuplot.has_value();
  std::vector<std::string> failed;
  if (result.gnuplot_found) {
    const fs::path log = dir / "plots" / "gnuplot.log";
    std::error_code ignored;
    fs::remove(log, ignored);
    for (const auto& p : plotter.plots) {
      const fs::path script = dir / "plots" / (p.name + ".gp");
      const fs::path svg = dir / "plots" / (p.name + ".svg");
      const int status = run_plot_script(*gnuplot, script, log);
      if (status == 0 && fs::exists(svg, ignored) && fs::file_size(svg, ignored) > 0)
        result.svgs.push_back(svg.string());
      else
        failed.push_back(p.name);
    }
    if (fs::exists(log, ignored) && fs::file_size(log, ignored) == 0) fs::remove(log, ignored);
  }
  result.plots_failed = static_cast<int>(failed.size());

  if (!plotter.plots.empty()) {
    md += "## Plots\n\n";
    if (!result.gnuplot_found)
      md += "gnuplot was not on PATH when this report was written, so the images below are not rendered yet. "
            "The scripts and their data are here; render them with `gnuplot " +
            (dir / "plots").string() + "/*.gp` (Debian: `apt-get install gnuplot-nox`).\n\n";
    else if (!failed.empty())
      md += "gnuplot failed on " + std::to_string(failed.size()) + " script(s) (see `plots/gnuplot.log`).\n\n";
    md += "Data: `data/*.dat`; scripts: `plots/*.gp` (re-render with `gnuplot " + (dir / "plots").string() +
          "/*.gp`).\n\n";
    for (const auto& p : plotter.plots) md += "### " + p.title + "\n\n![" + p.title + "](plots/" + p.name + ".svg)\n\n";
  }
  if (other_winners) md += compare_section(winners, *options.compare_db, *other_winners);

  result.readme_path = (dir / "README.md").string();
  write_file(result.readme_path, md);
  return result;
}

}  // namespace shapetune
