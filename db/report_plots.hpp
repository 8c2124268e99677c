// The plots of `shapetune report`: gnuplot scripts and their data files, and rendering them to
// SVG and PNG. Internal to db/report*.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "db/report_data.hpp"

namespace shapetune::report_plots {

struct PlotFile {
  std::string name;   // stem: plots/NAME.gp, plots/NAME.svg, plots/NAME.png
  std::string title;  // for the README
  std::string note;   // a line under the image in the README; may be empty
};

struct Plotter {
  std::filesystem::path dir;
  std::vector<PlotFile> plots;
};

// Throws ReportError.
void write_file(const std::filesystem::path& path, const std::string& text);

// A roofline of one family on one device: x = FLOPs per byte, y = TFLOP/s; the DRAM copy roof
// and the compute roofs that bound the family's dtypes; every point labelled; colours fixed per
// dtype and ceiling across plots. Problems without FLOPs or a cost are left out (the tables
// show them).
void roofline(Plotter&, const std::string& family, const std::vector<const report_data::WinnerFacts*>& facts,
              const report_data::DeviceRoofs& roofs, const std::string& device_name);
// Each winner's speedup over its best baseline, bars coloured by the baseline's kind.
void speedup(Plotter&, const std::vector<report_data::WinnerFacts>& facts);
// Which variant wins each problem.
void winner_map(Plotter&, const std::vector<report_data::WinnerFacts>& facts);

struct Rendered {
  bool gnuplot_found = false;
  std::vector<std::string> svgs;    // paths
  std::vector<std::string> failed;  // plot names
};
// Runs gnuplot (found on PATH, never through a shell) on every script; its output goes to
// plots/gnuplot.log, removed when empty.
Rendered render(const Plotter&, const std::string& gnuplot);

}  // namespace shapetune::report_plots
