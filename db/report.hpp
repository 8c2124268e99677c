// `shapetune report`: a directory that renders on GitHub (README.md, gnuplot plots), built from
// a database alone: provenance, a summary, devices, roofs, winners, and optionally a comparison
// with another database.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shapetune {

// Every failure to read the database(s) or to write the directory; the message says which.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a baseline is, so a speedup over it is named honestly: a vendor library (cuBLAS,
// cuBLASLt, cuDNN), or shapetune's own unfused chain of kernels (the reference point of a fused
// primitive that no library offers). The database stores only the baseline's name; the catalogue
// knows the rest, and the report (which does not link the catalogue) asks through this.
enum class BaselineKind { library, own_chain, unknown };
using BaselineKindFn = std::function<BaselineKind(const std::string& primitive, const std::string& variant)>;

struct ReportOptions {
  std::string db_path;
  std::string out_dir;
  std::optional<std::string> compare_db;  // --compare OTHER.db
  // The program run on each plot script; rendering is skipped when it is not on PATH (or empty).
  std::string gnuplot = "gnuplot";
  BaselineKindFn baseline_kind;  // unset: every baseline's kind is unknown
  std::string generator;         // who wrote the report, e.g. "shapetune 0.1.0 (abc1234)"
};

struct ReportResult {
  std::string readme_path;
  int winners = 0;
  std::vector<std::string> scripts;  // the .gp files written, paths under out_dir/plots
  std::vector<std::string> svgs;     // the plots rendered (each also as a PNG beside it)
  bool gnuplot_found = false;
  int plots_failed = 0;              // scripts gnuplot ran but did not turn into an image
  // With compare_db: problems slower here than there beyond the noise band, and problems the
  // other database has a winner for and this one has not (a table that lost an entry).
  int regressions = 0;
  std::vector<std::string> regressed;  // their problem keys
};

// Writes DIR/README.md, DIR/data/*.dat, DIR/plots/*.gp and, where gnuplot is on PATH,
// DIR/plots/*.svg and *.png; outputs of an earlier report in DIR are removed first. Throws
// ReportError when a database cannot be opened or DIR cannot be written.
ReportResult write_report(const ReportOptions& options);

// The compare verdict for one problem: "faster", "slower" or "same" (within noise). The noise band
// is the larger of 1% and each median's recorded median_ci_rel; this_us/other_us - 1 is compared.
std::string compare_verdict(double this_us, double this_ci_rel, double other_us, double other_ci_rel);

}  // namespace shapetune
