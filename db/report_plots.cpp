#include "db/report_plots.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/format.hpp"

namespace shapetune::report_plots {

namespace fs = std::filesystem;
using report_data::DeviceRoofs;
using report_data::Roof;
using report_data::WinnerFacts;

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

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

std::string num(double v) {
  if (!std::isfinite(v)) return "NaN";
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// A file name made of letters, digits, '_' and '-'.
std::string file_stem(std::string_view text) {
  std::string out;
  for (const char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

// One colour per dtype and per ceiling, the same in every plot (colour-blind-safe hues).
std::string dtype_colour(DType d) {
  switch (d) {
    case DType::f32: return "#0072b2";
    case DType::tf32: return "#cc79a7";
    case DType::f16: return "#009e73";
    case DType::bf16: return "#d55e00";
    case DType::i32: return "#7f7f7f";
  }
  return "#7f7f7f";
}

// A compute roof is drawn in the colour of the dtype it bounds; fp32_fma (CUDA-core math, which
// bounds every dtype of the elementwise families) in black, like the copy roof.
std::string roof_colour(const std::string& ceiling) {
  for (const DType d : {DType::f16, DType::bf16, DType::tf32})
    if (ceiling == "tensor_" + std::string(dtype_name(d))) return dtype_colour(d);
  return "#000000";
}

std::string kind_colour(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::library: return "#0072b2";
    case BaselineKind::own_chain: return "#e69f00";
    case BaselineKind::unknown: return "#7f7f7f";
  }
  return "#7f7f7f";
}

// gnuplot's 'rgb variable' takes the colour as a number.
std::string colour_number(const std::string& hex) { return std::to_string(std::stol(hex.substr(1), nullptr, 16)); }

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

// The bottom: the same plot again as a PNG (cairo where this gnuplot has it).
std::string gp_png(const std::string& name, int width, int height) {
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  return "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         "  set terminal pngcairo size " + size + " noenhanced font 'sans,10' background rgb 'white'\n"
         "} else {\n"
         "  set terminal png size " + size + " noenhanced background rgb 'white'\n"
         "}\n"
         "set output here . " + gp_literal(name + ".png") + "\n"
         "replot\n"
         "unset output\n";
}

// Tick marks for a log axis over [lo, hi]: every 1, 2 and 5 of each decade where the range is short
// (gnuplot would label one tick or none), the decades alone where it is long.
std::string log_tics(double lo, double hi) {
  const bool long_range = std::log10(hi / lo) > 3;
  std::string list;
  for (int decade = static_cast<int>(std::floor(std::log10(lo))); decade <= static_cast<int>(std::ceil(std::log10(hi)));
       ++decade)
    for (const double step : {1.0, 2.0, 5.0}) {
      if (long_range && step != 1.0) continue;
      const double tick = step * std::pow(10.0, decade);
      if (tick >= lo && tick <= hi) list += (list.empty() ? "" : ", ") + num(tick);
    }
  return "(" + list + ")";
}

void add_plot(Plotter& plotter, const std::string& name, const std::string& title, const std::string& script,
              const std::string& note = "") {
  write_file(plotter.dir / "plots" / (name + ".gp"), script);
  plotter.plots.push_back({name, title, note});
}

// "nt bf16 8192x8192x8192": the primitive's attributes, the dtype and the extents, short enough to
// sit beside a point.
std::string point_label(const WinnerRecord& w, const std::string& family) {
  std::string label;
  if (w.problem.primitive.size() > family.size() + 1) label = w.problem.primitive.substr(family.size() + 1) + " ";
  label += dtype_name(w.problem.dtype);
  for (std::size_t i = 0; i < w.problem.shape.dims().size(); ++i) {
    label += i ? 'x' : ' ';
    label += std::to_string(w.problem.shape.dims()[i].second);
  }
  return label;
}

std::string roof_title(const Roof& roof) {
  std::string title = roof.name + " " + fmt_quantity(roof.value, "FLOP/s");
  if (!roof.raised_by.empty()) title += " (raised to a library's rate)";
  return title;
}

}  // namespace

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw ReportError("cannot write " + path.string() + ": " + std::strerror(errno));
  file << text;
  file.close();
  if (!file) throw ReportError("cannot write " + path.string() + ": " + std::strerror(errno));
}

void roofline(Plotter& plotter, const std::string& family, const std::vector<const WinnerFacts*>& facts,
              const DeviceRoofs& roofs, const std::string& device_name) {
  // One data block per dtype (gnuplot's `index`), so each dtype is one plot element with one colour.
  std::vector<DType> dtypes;
  for (const WinnerFacts* f : facts)
    if (f->has_cost() && f->winner->cost.flops > 0 &&
        std::find(dtypes.begin(), dtypes.end(), f->winner->problem.dtype) == dtypes.end())
      dtypes.push_back(f->winner->problem.dtype);
  if (dtypes.empty()) return;
  std::sort(dtypes.begin(), dtypes.end());
  struct Point {
    DType dtype;
    double x, y, yb;  // FLOP/byte, TFLOP/s, the best baseline's TFLOP/s (NaN: none)
    std::string label, problem, variant;
    double label_y = 0;
  };
  std::vector<Point> points;
  double xlo = INFINITY, xhi = 0, ylo = INFINITY, yhi = 0;
  std::set<std::string> compute_names;
  std::set<DType> with_baseline;
  for (const DType dtype : dtypes)
    for (const WinnerFacts* f : facts) {
      const WinnerRecord& w = *f->winner;
      if (w.problem.dtype != dtype || !f->has_cost() || w.cost.flops <= 0) continue;
      const double yb = positive(w.baseline_us) && !w.best_baseline.empty() ? w.cost.flops / w.baseline_us * 1e-6 : NAN;
      points.push_back({dtype, f->intensity(), f->flops_per_s() * 1e-12, yb, point_label(w, family), w.problem.key(),
                        w.variant});
      xlo = std::min(xlo, points.back().x), xhi = std::max(xhi, points.back().x);
      ylo = std::min(ylo, points.back().y), yhi = std::max(yhi, points.back().y);
      if (std::isfinite(yb)) ylo = std::min(ylo, yb), yhi = std::max(yhi, yb), with_baseline.insert(dtype);
      if (const Roof* r = roofs.compute_roof(family, dtype))
        compute_names.insert(r->name.rfind("fp32_fma", 0) == 0 ? "fp32_fma" : r->name);
    }
  // The range takes in every ridge point (where the copy roof meets a compute roof), so the bend shows.
  std::vector<const Roof*> compute;
  for (const auto& name : compute_names) compute.push_back(&roofs.compute.at(name));
  const double copy_tb = roofs.copy ? roofs.copy->value * 1e-12 : NAN;
  double top_ridge = 0;
  for (const Roof* r : compute) {
    yhi = std::max(yhi, r->value * 1e-12);
    if (!roofs.copy) continue;
    const double ridge = r->value / roofs.copy->value;
    xlo = std::min(xlo, ridge), xhi = std::max(xhi, ridge), top_ridge = std::max(top_ridge, ridge);
  }
  xlo /= 3, xhi *= 6, ylo /= 3, yhi *= 2;  // room on the right for the last point's label
  if (roofs.copy) ylo = std::min(ylo, copy_tb * xlo);

  // Labels that would overlap an earlier one move up, a text line at a time, so that a cluster of
  // points (one size in several dtypes, say) reads as a list beside it. Sizes in decades of the
  // axes, from the plot's pixel size: a line of 8-point text is about 12 px, a character 5.5 px.
  const int width = 1000, height = 720;
  const double line = std::log10(yhi / ylo) * 12.0 / (height - 190);
  const double per_char = std::log10(xhi / xlo) * 5.5 / (width - 110);
  struct Placed { double x0, x1, y; };
  std::vector<Placed> placed;
  for (Point& p : points) {
    const double x0 = std::log10(p.x) + per_char * 1.5;  // the label starts a little right of its point
    const double x1 = x0 + per_char * static_cast<double>(p.label.size());
    p.label_y = std::log10(p.y);
    // Each move takes the label above the one it hit, so it only climbs and the search ends.
    for (bool moved = true; moved;) {
      moved = false;
      for (const Placed& q : placed)
        if (x0 < q.x1 && q.x0 < x1 && std::fabs(q.y - p.label_y) < line) p.label_y = q.y + line * 1.02, moved = true;
    }
    placed.push_back({x0, x1, p.label_y});
  }
  std::string data =
      "# intensity_flop_per_byte winner_tflop_per_s best_baseline_tflop_per_s label problem variant label_y\n";
  for (const DType dtype : dtypes) {
    data += "# dtype " + std::string(dtype_name(dtype)) + "\n";
    for (const Point& p : points)
      if (p.dtype == dtype)
        data += num(p.x) + " " + num(p.y) + " " + num(p.yb) + " " + dat_field(p.label) + " " + dat_field(p.problem) +
                " " + dat_field(p.variant) + " " + num(std::pow(10.0, p.label_y)) + "\n";
    data += "\n\n";
  }
  // The top label may have climbed past the range.
  for (const Placed& q : placed) yhi = std::max(yhi, std::pow(10.0, q.y + 2 * line));

  const std::string stem = "roofline_" + file_stem(family);
  write_file(plotter.dir / "data" / (stem + ".dat"), data);
  std::string s = gp_preamble(stem, width, height);
  s += "set title " + gp_literal("Roofline: " + family + " on " + device_name + " (measured roofs)") + "\n";
  s += "set logscale xy\nset format x '%g'\nset format y '%g'\n";
  s += "set xlabel 'arithmetic intensity (FLOP/byte, cost model)'\nset ylabel 'achieved TFLOP/s'\n";
  s += "set grid xtics ytics mxtics mytics lc rgb '#dddddd'\n";
  s += "set key outside below center horizontal Left reverse samplen 2 spacing 1.1 maxrows 3\n";
  s += "set samples 2000\n";
  s += "set xrange [" + num(xlo) + ":" + num(xhi) + "]\nset yrange [" + num(ylo) + ":" + num(yhi) + "]\n";
  s += "set xtics " + log_tics(xlo, xhi) + "\nset ytics " + log_tics(ylo, yhi) + "\n";
  std::vector<std::string> items;
  if (roofs.copy)
    // Up to the highest ridge only: above it the compute roofs bound every dtype drawn.
    items.push_back("(x <= " + (top_ridge > 0 ? num(top_ridge) : num(xhi)) + " ? " + num(copy_tb) +
                    " * x : NaN) with lines lw 2 lc rgb '#000000' title " +
                    gp_literal("DRAM copy " + fmt_rate(roofs.copy->value) + " x intensity"));
  for (const Roof* r : compute) {
    const double c = r->value * 1e-12;
    // Flat from its ridge point (where the copy roof reaches it) to the right.
    const std::string from = roofs.copy ? num(c / copy_tb) : num(xlo);
    items.push_back("(x >= " + from + " ? " + num(c) + " : NaN) with lines lw 2 dt 2 lc rgb " +
                    gp_literal(roof_colour(r->name)) + " title " + gp_literal(roof_title(*r)));
  }
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    const std::string colour = gp_literal(dtype_colour(dtypes[i]));
    const std::string dt = std::string(dtype_name(dtypes[i]));
    const std::string block = "data . " + gp_literal(stem + ".dat") + " index " + std::to_string(i);
    items.push_back(block + " using 1:2 with points pt 7 ps 1.3 lc rgb " + colour + " title " +
                    gp_literal(dt + " winner"));
    if (with_baseline.count(dtypes[i]))
      items.push_back(block + " using 1:3 with points pt 6 ps 1.3 lc rgb " + colour + " title " +
                      gp_literal(dt + " best baseline (open)"));
    items.push_back(block + " using 1:7:4 with labels left offset char 0.8,0.4 font ',8' tc rgb " + colour + " notitle");
  }
  s += "plot ";
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", \\\n     " : "") + items[i];
  s += "\n" + gp_png(stem, width, height);
  add_plot(plotter, stem, "Roofline: " + family, s);
}

void speedup(Plotter& plotter, const std::vector<WinnerFacts>& facts) {
  // Library baselines first, then unfused chains, then baselines of unknown kind.
  std::vector<const WinnerFacts*> shown;
  for (const auto& f : facts)
    if (!f.winner->best_baseline.empty() && positive(f.winner->speedup_vs_baseline)) shown.push_back(&f);
  if (shown.empty()) return;
  std::stable_sort(shown.begin(), shown.end(),
                   [](const WinnerFacts* a, const WinnerFacts* b) { return a->baseline_kind < b->baseline_kind; });
  std::string text = "# index speedup colour problem baseline kind\n";
  std::set<BaselineKind> kinds;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const WinnerRecord& w = *shown[i]->winner;
    kinds.insert(shown[i]->baseline_kind);
    text += std::to_string(i) + " " + num(w.speedup_vs_baseline) + " " + colour_number(kind_colour(shown[i]->baseline_kind)) +
            " " + dat_field(w.problem.key()) + " " + dat_field(w.best_baseline) + " " +
            dat_field(report_data::baseline_kind_name(shown[i]->baseline_kind)) + "\n";
  }
  write_file(plotter.dir / "data" / "speedup.dat", text);
  const int n = static_cast<int>(shown.size());
  const int width = std::max(900, 260 + 26 * n), height = 720;
  std::string s = gp_preamble("speedup", width, height);
  s += "set title 'Speedup of the dispatch table over each problem''s best baseline'\n";
  s += "set lmargin 22\nset rmargin 4\nset ylabel 'baseline time / winner time'\nset grid ytics\n";
  s += "set style fill solid 0.75 noborder\nset boxwidth 0.7\nset key top left\n";
  s += "set xtics rotate by 45 right font ',8' nomirror\nset xrange [-1:" + std::to_string(n) + "]\nset yrange [0:*]\n";
  std::string plot = "plot data . 'speedup.dat' using 1:2:3:xtic(4) with boxes lc rgb variable notitle, \\\n"
                     "     data . 'speedup.dat' using 1:2:(sprintf('%.2fx', $2)) with labels offset char 0,0.6 font ',8' notitle, \\\n"
                     "     1 with lines dt 2 lc rgb '#000000' title 'same speed'";
  const char* legend[] = {"over a library (cuBLAS, cuBLASLt, cuDNN)", "over shapetune's unfused chain (not a library)",
                          "over a baseline of unknown kind"};
  for (const BaselineKind kind : kinds)
    plot += ", \\\n     NaN with boxes lc rgb " + gp_literal(kind_colour(kind)) + " title " +
            gp_literal(legend[static_cast<int>(kind)]);
  s += plot + "\n" + gp_png("speedup", width, height);
  add_plot(plotter, "speedup", "Speedup over the best baseline", s);
}

void winner_map(Plotter& plotter, const std::vector<WinnerFacts>& facts) {
  std::vector<std::string> variants;
  for (const auto& f : facts)
    if (std::find(variants.begin(), variants.end(), f.winner->variant) == variants.end())
      variants.push_back(f.winner->variant);
  std::string text = "# variant_index problem_index colour problem variant\n";
  int n = 0;
  for (const auto& f : facts) {
    const WinnerRecord& w = *f.winner;
    const auto v = std::find(variants.begin(), variants.end(), w.variant) - variants.begin();
    text += std::to_string(v) + " " + std::to_string(n++) + " " + colour_number(dtype_colour(w.problem.dtype)) + " " +
            dat_field(w.problem.key()) + " " + dat_field(w.variant) + "\n";
  }
  write_file(plotter.dir / "data" / "winner_map.dat", text);
  const int width = std::max(760, 380 + 60 * static_cast<int>(variants.size())), height = std::max(320, 180 + 16 * n);
  std::string s = gp_preamble("winner_map", width, height);
  s += "set title 'Winning variant per problem (colour: dtype)'\nset grid\nset lmargin 48\n";
  s += "set xrange [-0.5:" + num(variants.size() - 0.5) + "]\nset yrange [" + num(n - 0.5) + ":-0.5]\n";
  s += "set ytics font ',8'\nset xtics rotate by 45 right (";
  for (std::size_t i = 0; i < variants.size(); ++i) s += (i ? ", " : "") + gp_literal(variants[i]) + " " + std::to_string(i);
  s += ")\n";
  s += "plot data . 'winner_map.dat' using 1:2:3:ytic(4) with points pt 7 ps 1.5 lc rgb variable notitle\n";
  s += gp_png("winner_map", width, height);
  add_plot(plotter, "winner_map", "Winner map", s);
}

namespace {

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

bool non_empty(const fs::path& file) {
  std::error_code ignored;
  return fs::exists(file, ignored) && fs::file_size(file, ignored) > 0;
}

}  // namespace

Rendered render(const Plotter& plotter, const std::string& gnuplot) {
  Rendered out;
  const std::optional<std::string> program = plotter.plots.empty() ? std::nullopt : find_program(gnuplot);
  out.gnuplot_found = program.has_value();
  if (!program) return out;
  const fs::path log = plotter.dir / "plots" / "gnuplot.log";
  std::error_code ignored;
  for (const auto& p : plotter.plots) {
    const fs::path svg = plotter.dir / "plots" / (p.name + ".svg");
    const int status = run_plot_script(*program, plotter.dir / "plots" / (p.name + ".gp"), log);
    if (status == 0 && non_empty(svg) && non_empty(plotter.dir / "plots" / (p.name + ".png")))
      out.svgs.push_back(svg.string());
    else
      out.failed.push_back(p.name);
  }
  if (fs::exists(log, ignored) && fs::file_size(log, ignored) == 0) fs::remove(log, ignored);
  return out;
}

}  // namespace shapetune::report_plots
