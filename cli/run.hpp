// `shapetune run MODEL`: inference runners through the dispatch table (the TechJam Transformer).
#pragma once

#include <iosfwd>
#include <string>

#include "cli/args.hpp"

namespace shapetune::cli {

CommandSpec run_spec();
int run_model(const ParsedArgs&, std::ostream& out, std::ostream& err, const std::string& command_line);

}  // namespace shapetune::cli
