// `shapetune report`: a directory that renders on GitHub (README.md, gnuplot plots), built from
// a database alone: devices, ceilings, winners, and optionally a comparison with another database.
#pragma once

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

struct ReportOptions {
  std::string db_path;
  std::string out_dir;
  std::optional<std::string> compare_db;  // --compare OTHER.db
  // The program run on each plot script; rendering is skipped when it is not on PATH (or empty).
  std::string gnuplot = "gnuplot";
};

struct ReportResult {
  std::string readme_path;
  int winners = 0;
  std::vector<std::string> scripts;  // the .gp files written, paths under out_dir/plots
  std::vector<std::string> svgs;     // the plots rendered
  bool gnuplot_found = false;
  int plots_failed = 0;              // scripts gnuplot ran but did not turn into an SVG
};

// Writes DIR/README.md, DIR/data/*.dat, DIR/plots/*.gp and, where gnuplot is on PATH,
// DIR/plots/*.svg. Throws ReportError when a database cannot be opened or DIR cannot be written.
ReportResult write_report(const ReportOptions& options);

// The compare verdict for one problem: "faster", "slower" or "same" (within noise). The noise band
// is the larger of 1% and each median's recorded median_ci_rel; this_us/other_us - 1 is compared.
std::string compare_verdict(double this_us, double this_ci_rel, double other_us, double other_ci_rel);

}  // namespace shapetune
