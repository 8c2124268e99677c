// `shapetune_fixture_sweep sweep FILE [--shard K/N] --db DB [--json-progress FILE] [any other sweep option]`: the
// command-line form of `shapetune sweep` over support/fixture_sweep.hpp, for the parallel sweep
// and Slurm tests on machines without a GPU. Options it has no use for (--device, --seed, ...)
// are accepted and ignored. FIXTURE_SWEEP_DIE_MARKER=FILE with FIXTURE_SWEEP_DIE_SHARD=K makes
// shard K abort once.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "support/fixture_sweep.hpp"

int main(int argc, char** argv) {
  using namespace shapetune;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "sweep") args.erase(args.begin());
  test_support::FixtureSweep f;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg.rfind("--", 0) == 0 && arg != "--verbose" && arg != "--fresh" && arg != "--no-progress" &&
               i + 1 < args.size()) {
      value = args[++i];
    }
    if (arg == "--shard") {
      std::string why;
      f.shard = parse_shard(value, &why);
      if (!f.shard) {
        std::cerr << "error: --shard: " << why << "\n";
        return 2;
      }
    } else if (arg == "--db") {
      f.db_path = value;
    } else if (arg == "--json-progress") {
      f.json_progress = value;
    } else if (arg.rfind("--", 0) != 0) {
      f.shape_file = arg;
    }
  }
  if (f.shape_file.empty() || f.db_path.empty()) {
    std::cerr << "usage: shapetune_fixture_sweep sweep FILE [--shard K/N] --db DB\n";
    return 2;
  }
  const char* die_shard = std::getenv("FIXTURE_SWEEP_DIE_SHARD");
  const char* die_marker = std::getenv("FIXTURE_SWEEP_DIE_MARKER");
  if (die_shard && die_marker && f.shard && std::to_string(f.shard->index) == die_shard) f.die_marker = die_marker;
  std::string error;
  const int code = test_support::run_fixture_sweep(f, &error);
  if (code != 0) std::cerr << "error: " << error << "\n";
  else std::cout << "fixture sweep of " << f.shape_file << (f.shard ? " shard " + f.shard->text() : "") << " done\n";
  return code;
}
