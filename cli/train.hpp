// `shapetune train MODEL`: the model runners, driven through the dispatch table.
#pragma once

#include <iosfwd>
#include <string>

#include "cli/args.hpp"

namespace shapetune::cli {

CommandSpec train_spec();
int run_train(const ParsedArgs&, std::ostream& out, std::ostream& err, const std::string& command_line);

}  // namespace shapetune::cli
