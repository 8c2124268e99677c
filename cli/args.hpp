// A small command-line parser: subcommand options declared once, used for parsing and --help.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shapetune::cli {

// Bad command-line input; the message is meant for the user as is.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  std::string name;        // long name without dashes: "db"
  char short_name = 0;     // 'o' for -o, 0 for none
  std::string value_name;  // "FILE"; empty for a flag
  std::string help;
  bool repeatable = false;  // may be given several times (values accumulate)
};

struct CommandSpec {
  // Invoked as `shapetune NAME`, or as NAME alone where it is a program of its own
  // (a name starting with "shapetune", e.g. "shapetune-bench").
  std::string name;
  std::string summary;
  std::string positionals;  // usage text for positional arguments: "FILE.yaml"
  std::size_t min_positional = 0;
  std::size_t max_positional = 0;
  std::vector<OptionSpec> options;
  std::string details;  // paragraphs after the option list
};

class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> value(const std::string& name) const;
  const std::vector<std::string>& values(const std::string& name) const;
  double number(const std::string& name, double fallback, double min, double max) const;
  long long integer(const std::string& name, long long fallback, long long min, long long max) const;
  std::vector<std::string> positional;

 private:
  friend ParsedArgs parse(const CommandSpec&, const std::vector<std::string>&);
  std::map<std::string, std::vector<std::string>> values_;
};

// The values of a repeatable option that also takes comma lists ("--variant a,b --variant c"),
// split and without empty items.
std::vector<std::string> split_comma_lists(const std::vector<std::string>& values);

// Parses args (after the subcommand name). "--help" is left to the caller via has("help").
// Throws UsageError naming the command and the offending argument.
ParsedArgs parse(const CommandSpec&, const std::vector<std::string>& args);
std::string help_text(const CommandSpec&);

}  // namespace shapetune::cli
