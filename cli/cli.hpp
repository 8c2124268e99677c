// The `shapetune` command as a function, so tests drive it without a subprocess.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace shapetune {

// args excludes the program name. Exit codes: 0 success; 1 the work ran and failed;
// 2 it could not start (bad usage or input, no CUDA device, unusable database or path).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace shapetune
