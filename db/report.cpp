#include "db/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include "core/counters.hpp"
#include "core/format.hpp"
#include "core/records.hpp"
#include "db/report_data.hpp"
#include "db/report_plots.hpp"

namespace shapetune {

namespace fs = std::filesystem;
using report_data::DbContents;
using report_data::DeviceRoofs;
using report_data::Roof;
using report_data::WinnerFacts;

namespace {

std::string printf_text(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string percent(double fraction) { return printf_text("%.1f%%", 100 * fraction); }
std::string times(double ratio) { return std::isfinite(ratio) ? fmt_fixed(ratio, 2) + "x" : "-"; }
std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

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

std::string achieved_text(const WinnerRecord& w) {
  if (!std::isfinite(w.cost.bytes) || !std::isfinite(w.cost.flops) || !positive(w.timing.median_us)) return "-";
  const std::string text = fmt_achieved(w.cost.bytes, w.cost.flops, w.timing.median_us);
  return text.empty() ? "-" : text;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

// The sweeps whose results the winners hold, by id.
std::vector<const SweepRow*> winning_sweeps(const DbContents& db) {
  std::set<std::int64_t> ids;
  for (const auto& w : db.winners) ids.insert(w.sweep_id);
  std::vector<const SweepRow*> out;
  for (const auto& s : db.sweeps)
    if (ids.count(s.id)) out.push_back(&s);
  return out;
}

std::string short_sha(const std::string& sha) { return sha.substr(0, 12); }

// One line naming a database by its sweeps: "`a.db`: sweep #2, `shapetune sweep ...` at abc1234 (2026-12-01)".
std::string database_by_sweeps(const DbContents& db) {
  const auto sweeps = winning_sweeps(db);
  std::string s = code(db.path);
  if (sweeps.empty()) return s + " (no sweep holds a winner)";
  s += ": ";
  for (std::size_t i = 0; i < sweeps.size() && i < 3; ++i)
    s += std::string(i ? "; " : "") + "sweep #" + std::to_string(sweeps[i]->id) + " " + code(sweeps[i]->info.command) +
         " at " + code(short_sha(sweeps[i]->info.git_sha)) + ", " + cell(sweeps[i]->started_at.substr(0, 10));
  if (sweeps.size() > 3) s += "; and " + plural(sweeps.size() - 3, "more sweep", "more sweeps");
  return s;
}

std::string provenance_section(const DbContents& db) {
  std::string s = "## Provenance\n\n";
  if (db.sweeps.empty()) return s + "No sweeps recorded in this database.\n\n";
  s += "Every sweep stored in the database; the winners come from those marked *. Options are the settings that "
       "change results (L2 mode, stopping rule, filters, strategy, shard); the seed, where given, is in the command.\n\n";
  const auto used = winning_sweeps(db);
  s += table_head({"sweep", "started", "status", "command", "shapetune", "shape file", "options"});
  for (const auto& sweep : db.sweeps) {
    const bool holds = std::find(used.begin(), used.end(), &sweep) != used.end();
    s += table_row({"#" + std::to_string(sweep.id) + (holds ? " *" : ""), cell(sweep.started_at),
                    cell(sweep.status) + (sweep.finished_at.empty() ? "" : " " + cell(sweep.finished_at)),
                    code(sweep.info.command), code(short_sha(sweep.info.git_sha)),
                    code(sweep.info.yaml_path) + " sha256 " + code(sweep.info.yaml_sha256.substr(0, 12)),
                    code(sweep.info.options)});
  }
  return s + "\n";
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

std::string ceilings_section(const DbContents& db, const std::map<std::string, DeviceRoofs>& roofs, bool several_devices) {
  std::string s = "## Ceilings and roofs\n\n";
  if (db.ceilings.empty())
    return s + "No ceilings measured (`shapetune ceilings --db FILE` measures copy bandwidth, FP32 FMA and tensor-core "
               "rates and launch overhead); the roofline column says so.\n\n";
  s += "Measured on the device by `shapetune ceilings`; no datasheet numbers are used. The roofline of a problem is "
       "min(compute roof, `dram_copy_best` x its intensity). The compute roof is `tensor_<dtype>` for a family that "
       "does compute-bound work in f16, bf16 or tf32 (tensor cores), else `fp32_fma` (elementwise and reduction kernels "
       "compute in fp32 whatever they store). `sgemm_fp32` is a reference, not a roof.\n\n";
  std::vector<std::string> head = {"name", "value", "method"};
  if (several_devices) head.insert(head.begin(), "device");
  s += table_head(head);
  for (const auto& c : db.ceilings) {
    std::vector<std::string> row = {code(c.name), fmt_quantity(c.value, c.unit), cell(c.method)};
    if (several_devices) row.insert(row.begin(), code(c.device_key));
    s += table_row(row);
  }
  s += "\n";
  std::string raised;
  for (const auto& entry : roofs) {
    const std::string& device = entry.first;  // clang before 16 cannot capture a structured binding (CI fuzzes with clang 14)
    const DeviceRoofs& r = entry.second;
    auto note = [&](const Roof& roof, const char* unit) {
      if (!roof.raised_by.empty())
        raised += "- " + code(roof.name) + (several_devices ? " on " + code(device) : "") + ": " +
                  cell(roof.raised_by) + " ran faster than the ceiling's own kernel, so the roof used is " +
                  fmt_quantity(roof.value, unit) + ".\n";
    };
    if (r.copy) note(*r.copy, "B/s");
    for (const auto& [name, roof] : r.compute) note(roof, "FLOP/s");
  }
  if (!raised.empty())
    s += "A roof is the best rate measured on the device, so where a library in this database beat a ceiling's kernel "
         "the library's rate is the roof (no library shows above 100%):\n\n" + raised + "\n";
  return s;
}

// The best baseline's cell: "cudnn 773.9 us (library)".
std::string baseline_text(const WinnerFacts& f) {
  const WinnerRecord& w = *f.winner;
  if (w.best_baseline.empty()) return f.lost_baselines.empty() ? "-" : "none ran (see below)";
  return cell(w.best_baseline) + " " + fmt_us(w.baseline_us) + " (" + report_data::baseline_kind_name(f.baseline_kind) + ")";
}

// The roof a problem's % is taken against: its compute roof where compute-bound, else the copy roof.
const Roof* bounding_roof(const WinnerFacts& f, const DeviceRoofs& roofs) {
  const bool compute = f.winner->cost.flops > 0 && f.intensity() >= kComputeBoundIntensity;
  if (compute) return roofs.compute_roof(f.family, f.winner->problem.dtype);
  return roofs.copy ? &*roofs.copy : nullptr;
}

// Why winners stand above 100% of a roof: the roof is a measured kernel, not the hardware.
std::string above_roof_note(const Roof& roof, bool copy, const std::vector<std::string>& problems) {
  std::string s = "above " + code(roof.name) + " (" + fmt_quantity(roof.value, copy ? "B/s" : "FLOP/s") + ", " +
                  cell(roof.raised_by.empty() ? roof.method : "the rate of " + roof.raised_by) +
                  "): a roof is the best kernel measured on the device, not the hardware's limit";
  s += copy ? "; a copy reads and writes equal bytes, and a kernel that reads more than it writes (or finds some of "
              "its data in L2) streams a little faster: "
            : ": ";
  for (std::size_t i = 0; i < problems.size(); ++i) s += (i ? ", " : "") + code(problems[i]);
  return s + ".";
}

std::string winners_section(const DbContents& db, const std::map<std::string, DeviceRoofs>& roofs, bool several_devices) {
  std::string s = "## Winners\n\n";
  s += "Achieved: bandwidth (bytes the cost model says the problem must move, over the median time) where the "
       "problem does fewer than " + printf_text("%g", kComputeBoundIntensity) +
       " FLOPs a byte, else the FLOP rate. % of roof: against the roofline at the problem's intensity (see Ceilings "
       "and roofs); a mark * is explained under the table. Baseline: the fastest baseline that ran and whether it is a "
       "library or shapetune's own unfused chain. Margin: the runner-up's time over the winner's, minus 1; a tie is "
       "within the noise. \"-\": not recorded (rows stored before schema 4 have no cost).\n\n";
  std::vector<std::string> devices;
  for (const auto& w : db.winners)
    if (std::find(devices.begin(), devices.end(), w.device_key) == devices.end()) devices.push_back(w.device_key);
  for (const auto& device : devices) {
    if (several_devices) s += "### Device " + code(device) + "\n\n";
    const DeviceRoofs& device_roofs = roofs.at(device);
    std::map<std::string, std::vector<const WinnerFacts*>> families;
    for (const auto& f : db.facts)
      if (f.winner->device_key == device) families[f.family].push_back(&f);
    for (const auto& [family, rows] : families) {
      s += (several_devices ? "#### " : "### ") + cell(family) + "\n\n";
      s += table_head({"problem", "winner", "median", "achieved", "% of roof", "best baseline", "speedup", "runner-up",
                       "margin"});
      std::map<const Roof*, std::vector<std::string>> above;  // roof -> problems above it
      for (const WinnerFacts* f : rows) {
        const WinnerRecord& w = *f->winner;
        const auto fraction = device_roofs.fraction_of_roof(*f);
        std::string roof_cell = "-";
        if (fraction) {
          roof_cell = percent(*fraction);
          // Marked where the printed value exceeds 100.0%.
          if (*fraction >= 1.0005) {
            roof_cell += " *";
            above[bounding_roof(*f, device_roofs)].push_back(w.problem.key());
          }
        } else if (f->has_cost()) {
          roof_cell = device_roofs.copy ? "no compute ceiling measured" : "no copy ceiling measured";
        }
        const bool has_baseline = !w.best_baseline.empty();
        const bool has_runner_up = !w.runner_up_variant.empty();
        s += table_row({code(w.problem.key()), code(variant_text(w.variant, w.config)), fmt_us(w.timing.median_us),
                        achieved_text(w), roof_cell, baseline_text(*f),
                        has_baseline && std::isfinite(w.speedup_vs_baseline) ? times(w.speedup_vs_baseline) : "-",
                        has_runner_up ? code(variant_text(w.runner_up_variant, w.runner_up_config)) : "-",
                        has_runner_up && std::isfinite(w.margin_rel)
                            ? fmt_fixed(100 * w.margin_rel, 1) + "%" + (w.tie ? " (tie)" : "")
                            : "-"});
      }
      s += "\n";
      for (const auto& [roof, problems] : above)
        if (roof) s += "\\* " + above_roof_note(*roof, device_roofs.copy && roof == &*device_roofs.copy, problems) + "\n\n";
    }
  }
  return s;
}

// Baselines the shape matrix asked for that could not give a time: a problem that silently lost
// its library comparison would make the speedups look better than they are.
std::string lost_baselines_section(const DbContents& db) {
  std::string rows;
  int problems = 0;
  for (const auto& f : db.facts) {
    if (f.lost_baselines.empty()) continue;
    ++problems;
    std::map<std::string, std::pair<const CandidateRecord*, int>> by_variant;  // first record, configs
    for (const auto& c : f.lost_baselines) {
      auto& [first, n] = by_variant[c.variant];
      if (!first) first = &c;
      ++n;
    }
    for (const auto& [variant, entry] : by_variant)
      rows += table_row({code(f.winner->problem.key()), code(variant) + (entry.second > 1 ? " (" + plural(entry.second, "config", "configs") + ")" : ""),
                         cell(candidate_status_name(entry.first->status)), cell(entry.first->reason)});
  }
  if (rows.empty()) return "";
  return "## Baselines that could not run\n\n" + plural(problems, "problem", "problems") +
         " had a baseline candidate in its sweep that gave no time. Where none of its baselines ran, the winner's "
         "speedup column is empty and the summary counts it under \"no baseline\".\n\n" +
         table_head({"problem", "baseline", "status", "why"}) + rows + "\n";
}

// Candidates that crashed or hung their GPU worker in the winners' sweeps: never winners, but
// a kernel being written that faults on some shapes is worth seeing.
std::string faults_section(const DbContents& db) {
  std::string rows;
  int candidates = 0, problems = 0;
  for (const auto& f : db.facts) {
    if (f.faults.empty()) continue;
    ++problems;
    for (const CandidateRecord& c : f.faults) {
      ++candidates;
      rows += table_row({code(f.winner->problem.key()), code(variant_text(c.variant, c.config)),
                         cell(candidate_status_name(c.status)), cell(c.reason)});
    }
  }
  if (rows.empty()) return "";
  return "## Candidates that crashed or hung\n\n" + plural(candidates, "candidate", "candidates") + " of " +
         plural(problems, "problem", "problems") +
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
  for (const WinnerFacts& f : db.facts) {
    const WinnerRecord& w = *f.winner;
    const counters::Values& values = f.counters;
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

std::string summary_section(const DbContents& db, const std::map<std::string, DeviceRoofs>& roofs) {
  std::string s = "## Summary\n\n";
  std::set<std::string> families;
  std::vector<double> table_vs_library, own_vs_library, vs_chain, vs_unknown, fractions;
  int own_faster = 0, same = 0, library_faster = 0, above = 0;
  std::vector<const WinnerFacts*> no_baseline, worst;
  for (const auto& f : db.facts) {
    const WinnerRecord& w = *f.winner;
    families.insert(f.family);
    if (w.best_baseline.empty()) no_baseline.push_back(&f);
    else if (f.baseline_kind == BaselineKind::library) table_vs_library.push_back(w.speedup_vs_baseline);
    else if (f.baseline_kind == BaselineKind::own_chain) vs_chain.push_back(w.speedup_vs_baseline);
    else vs_unknown.push_back(w.speedup_vs_baseline);
    if (const auto verdict = report_data::own_vs_library(f)) {
      own_faster += *verdict == "own faster";
      same += *verdict == "same";
      library_faster += *verdict == "library faster";
      own_vs_library.push_back(f.best_library->timing->median_us / f.best_own->timing->median_us);
      worst.push_back(&f);
    }
    if (const auto fraction = roofs.at(w.device_key).fraction_of_roof(f)) {
      fractions.push_back(*fraction);
      above += *fraction >= 1.0005;
    }
  }
  std::set<std::string> device_names;
  for (const auto& d : db.devices) device_names.insert(d.name);
  s += "- **" + plural(db.winners.size(), "problem", "problems") + "** in " + plural(families.size(), "family", "families");
  if (!device_names.empty()) {
    s += ", on ";
    bool first = true;
    for (const auto& name : device_names) s += (first ? "" : ", ") + cell(name), first = false;
  }
  s += ".\n";
  if (!table_vs_library.empty()) {
    s += "- **Against the libraries** (cuBLAS, cuBLASLt, cuDNN; " + plural(table_vs_library.size(), "problem", "problems") +
         "): the dispatch table is a geomean **" + times(report_data::geomean(table_vs_library)) +
         "** faster than the best library. It never falls below 1x, since it picks the library where the library wins.";
    if (!own_vs_library.empty())
      s += " shapetune's own best variant against the best library: **" + std::to_string(own_faster) + " faster, " +
           std::to_string(same) + " same within noise, " + std::to_string(library_faster) +
           " slower**; geomean " + times(report_data::geomean(own_vs_library)) + ".";
    s += "\n";
  } else {
    s += "- **Against the libraries**: no problem here has a library baseline that ran.\n";
  }
  if (!vs_chain.empty())
    s += "- **Against shapetune's own unfused chains** (the reference point of fused primitives that no library "
         "offers; not a library speedup), " + plural(vs_chain.size(), "problem", "problems") + ": geomean " +
         times(report_data::geomean(vs_chain)) + ".\n";
  if (!vs_unknown.empty())
    s += "- Against baselines this build's catalogue does not know, " + plural(vs_unknown.size(), "problem", "problems") +
         ": geomean " + times(report_data::geomean(vs_unknown)) + ".\n";
  if (!no_baseline.empty()) {
    int lost = 0;
    for (const WinnerFacts* f : no_baseline) lost += !f->lost_baselines.empty();
    s += "- **No baseline**: " + plural(no_baseline.size(), "problem", "problems");
    if (lost) s += ", " + std::to_string(lost) + " of them because every baseline the sweep tried failed to run (see "
                   "\"Baselines that could not run\")";
    s += no_baseline.size() > 8 ? "." : ": ";
    if (no_baseline.size() <= 8)
      for (std::size_t i = 0; i < no_baseline.size(); ++i)
        s += (i ? ", " : "") + code(no_baseline[i]->winner->problem.key());
    s += "\n";
  }
  if (!fractions.empty()) {
    std::sort(fractions.begin(), fractions.end());
    s += "- **Roofline**: the median winner reaches " + percent(fractions[fractions.size() / 2]) +
         " of its measured roof (" + plural(fractions.size(), "problem", "problems") + " with a cost and a roof)";
    if (above) s += "; " + std::to_string(above) + " above 100%, each explained under its table";
    s += ".\n";
  }
  int faults = 0;
  for (const auto& f : db.facts) faults += static_cast<int>(f.faults.size());
  if (faults) s += "- **Faults**: " + plural(faults, "candidate", "candidates") + " crashed or hung (see below).\n";
  s += "\n";
  if (!worst.empty()) {
    std::sort(worst.begin(), worst.end(), [](const WinnerFacts* a, const WinnerFacts* b) {
      return a->best_own->timing->median_us / a->best_library->timing->median_us >
             b->best_own->timing->median_us / b->best_library->timing->median_us;
    });
    if (worst.size() > 5) worst.resize(5);
    s += "### Worst cases against the libraries\n\nThe problems where shapetune's own best variant is furthest behind "
         "(or least ahead of) the best library.\n\n";
    s += table_head({"problem", "own best", "median", "best library", "median", "own time / library time"});
    for (const WinnerFacts* f : worst)
      s += table_row({code(f->winner->problem.key()), code(variant_text(f->best_own->variant, f->best_own->config)),
                      fmt_us(f->best_own->timing->median_us), code(variant_text(f->best_library->variant, f->best_library->config)),
                      fmt_us(f->best_library->timing->median_us),
                      times(f->best_own->timing->median_us / f->best_library->timing->median_us)});
    s += "\n";
  }
  return s;
}

struct Comparison {
  std::string markdown;
  std::vector<std::string> regressed;
};

// This database against another: both winners per problem, the problems only in one, and the
// regressions --fail-on-regression fails on (slower beyond noise, or lost from the table).
Comparison compare_section(const DbContents& mine, const DbContents& theirs) {
  Comparison out;
  std::string& s = out.markdown;
  s = "## Compared with " + code(theirs.path) + "\n\n";
  s += "- This: " + database_by_sweeps(mine) + "\n- Other: " + database_by_sweeps(theirs) + "\n\n";
  s += "Per problem in both databases (the same device where the other has it): this database's winner and median "
       "against the other's. The noise band is the larger of 1% and each median's recorded 95% confidence interval; "
       "inside it, \"same\". A regression is a problem slower here beyond the band, or one the other database has a "
       "winner for and this one has not.\n\n";
  std::map<std::string, std::vector<const WinnerRecord*>> by_problem;
  for (const auto& w : theirs.winners) by_problem[w.problem.key()].push_back(&w);
  int faster = 0, slower = 0, same = 0, both = 0;
  std::set<std::string> matched;
  std::string table, only_here;
  for (const auto& w : mine.winners) {
    const auto found = by_problem.find(w.problem.key());
    if (found == by_problem.end()) {
      only_here += "- " + code(w.problem.key()) + ": " + code(variant_text(w.variant, w.config)) + " " +
                   fmt_us(w.timing.median_us) + "\n";
      continue;
    }
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
    if (verdict == "slower") out.regressed.push_back(w.problem.key());
    const double change = w.timing.median_us / other->timing.median_us - 1;
    const auto ci = [](double v) { return std::isfinite(v) ? v : 0.0; };
    table += table_row({code(w.problem.key()), code(variant_text(w.variant, w.config)), fmt_us(w.timing.median_us),
                        code(variant_text(other->variant, other->config)), fmt_us(other->timing.median_us),
                        std::isfinite(change) ? printf_text("%+.1f%%", 100 * change) : "-",
                        percent(std::max({0.01, ci(w.timing.median_ci_rel), ci(other->timing.median_ci_rel)})),
                        verdict == "slower" ? "**slower**" : verdict});
  }
  std::string only_other;
  int n_only_other = 0;
  for (const auto& [key, rows] : by_problem) {
    if (matched.count(key)) continue;
    ++n_only_other;
    out.regressed.push_back(key);
    only_other += "- " + code(key) + ": " + code(variant_text(rows.front()->variant, rows.front()->config)) + " " +
                  fmt_us(rows.front()->timing.median_us) + "\n";
  }
  const int n_only_here = static_cast<int>(mine.winners.size()) - both;
  s += "Summary: " + std::to_string(both) + " problems in both: " + std::to_string(faster) + " faster, " +
       std::to_string(slower) + " slower, " + std::to_string(same) + " same within noise; " +
       std::to_string(n_only_here) + " only here, " + std::to_string(n_only_other) + " only in the other. " +
       (out.regressed.empty() ? std::string("No regressions.")
                              : plural(out.regressed.size(), "regression", "regressions") + ".") +
       "\n\n";
  if (both)
    s += table_head({"problem", "this winner", "this", "other winner", "other", "change", "noise band", "verdict"}) +
         table + "\n";
  if (!only_here.empty()) s += "### Only in this database\n\n" + only_here + "\n";
  if (!only_other.empty()) s += "### Only in the other database (lost here)\n\n" + only_other + "\n";
  return out;
}

// Outputs of an earlier report in this directory, so that every file left is from this run.
// Only what a report writes is removed; anything else a user put there stays.
void remove_stale_outputs(const fs::path& dir) {
  std::error_code ignored;
  fs::remove(dir / "README.md", ignored);
  for (const auto& [sub, extensions] : {std::pair<const char*, std::set<std::string>>{"data", {".dat"}},
                                        {"plots", {".gp", ".svg", ".png", ".log"}}}) {
    if (!fs::is_directory(dir / sub, ignored)) continue;
    for (const auto& entry : fs::directory_iterator(dir / sub, ignored))
      if (entry.is_regular_file(ignored) && extensions.count(entry.path().extension().string()))
        fs::remove(entry.path(), ignored);
  }
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
  const DbContents db = report_data::read_db(options.db_path, options.baseline_kind);
  std::optional<DbContents> other;
  if (options.compare_db) other = report_data::read_db(*options.compare_db, options.baseline_kind);

  const fs::path dir = options.out_dir;
  for (const fs::path& sub : {dir, dir / "data", dir / "plots"}) {
    std::error_code error;
    fs::create_directories(sub, error);
    if (error || !fs::is_directory(sub))
      throw ReportError("cannot create directory " + sub.string() + ": " +
                        (error ? error.message() : std::string("a file is in the way")));
  }
  remove_stale_outputs(dir);

  std::set<std::string> device_keys;
  for (const auto& d : db.devices) device_keys.insert(d.key());
  for (const auto& w : db.winners) device_keys.insert(w.device_key);
  const bool several_devices = device_keys.size() > 1;
  std::map<std::string, DeviceRoofs> roofs;
  for (const auto& key : device_keys) roofs[key] = report_data::device_roofs(db.ceilings, key, db.facts);

  ReportResult result;
  result.winners = static_cast<int>(db.winners.size());
  std::string md = "# shapetune report\n\n";
  md += "Written " + utc_now() + (options.generator.empty() ? "" : " by " + cell(options.generator)) + " from " +
        code(options.db_path) + " (schema v" + std::to_string(db.schema_found ? db.schema_found : db.schema_version) +
        (db.schema_found && db.schema_found < db.schema_version
             ? ", read through a temporary copy migrated to v" + std::to_string(db.schema_version)
             : std::string()) +
        "): " + plural(db.winners.size(), "winner", "winners") + ", " + plural(db.ceilings.size(), "ceiling", "ceilings") +
        ", " + plural(db.sweeps.size(), "sweep", "sweeps") + ".\n\n";

  report_plots::Plotter plotter{dir, {}};
  if (db.winners.empty()) {
    md += provenance_section(db);
    md += devices_section(db.devices);
    md += ceilings_section(db, roofs, several_devices);
    md += "## Winners\n\nNo winners in this database yet (run `shapetune sweep FILE.yaml --db " + options.db_path +
          "`); nothing to plot.\n\n";
  } else {
    md += summary_section(db, roofs);
    md += provenance_section(db);
    md += devices_section(db.devices);
    md += ceilings_section(db, roofs, several_devices);
    md += winners_section(db, roofs, several_devices);
    md += lost_baselines_section(db);
    md += counters_section(db);
    md += faults_section(db);
    // Rooflines per family and device; a device's name is its fingerprint's.
    int device_index = 0;
    for (const auto& key : device_keys) {
      std::map<std::string, std::vector<const WinnerFacts*>> families;
      for (const auto& f : db.facts)
        if (f.winner->device_key == key) families[f.family].push_back(&f);
      if (families.empty()) continue;
      ++device_index;
      std::string name = key;
      for (const auto& d : db.devices)
        if (d.key() == key) name = d.name;
      for (const auto& [family, rows] : families)
        report_plots::roofline(plotter, several_devices ? family + "-device" + std::to_string(device_index) : family,
                               rows, roofs.at(key), name);
    }
    report_plots::speedup(plotter, db.facts);
    report_plots::winner_map(plotter, db.facts);
  }

  for (const auto& p : plotter.plots) result.scripts.push_back((dir / "plots" / (p.name + ".gp")).string());
  const report_plots::Rendered rendered = report_plots::render(plotter, options.gnuplot);
  result.gnuplot_found = rendered.gnuplot_found;
  result.svgs = rendered.svgs;
  result.plots_failed = static_cast<int>(rendered.failed.size());

  if (!plotter.plots.empty()) {
    md += "## Plots\n\n";
    if (!result.gnuplot_found)
      md += "gnuplot was not on PATH when this report was written, so the images below are not rendered yet. "
            "The scripts and their data are here; render them with `gnuplot " +
            (dir / "plots").string() + "/*.gp` (Debian: `apt-get install gnuplot-nox`).\n\n";
    else if (!rendered.failed.empty())
      md += "gnuplot failed on " + std::to_string(rendered.failed.size()) + " script(s) (see `plots/gnuplot.log`).\n\n";
    md += "Each plot is an SVG and a PNG; data: `data/*.dat`; scripts: `plots/*.gp` (re-render with `gnuplot " +
          (dir / "plots").string() + "/*.gp`). Colours are fixed across plots: f32 blue, tf32 pink, f16 green, bf16 "
          "vermilion; roofs dashed in the colour of the dtype they bound, the copy roof and `fp32_fma` in black.\n\n";
    for (const auto& p : plotter.plots) {
      md += "### " + p.title + "\n\n![" + p.title + "](plots/" + p.name + ".png) ([SVG](plots/" + p.name + ".svg))\n\n";
      if (!p.note.empty()) md += p.note + "\n\n";
    }
  }
  if (other) {
    Comparison comparison = compare_section(db, *other);
    md += comparison.markdown;
    result.regressed = std::move(comparison.regressed);
    result.regressions = static_cast<int>(result.regressed.size());
  }

  result.readme_path = (dir / "README.md").string();
  report_plots::write_file(result.readme_path, md);
  return result;
}

}  // namespace shapetune
