#include "cli/args.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

namespace shapetune::cli {
namespace {

const OptionSpec kHelp{"help", 'h', "", "show this help"};

const OptionSpec* find_long(const CommandSpec& spec, const std::string& name) {
  if (name == "help") return &kHelp;
  for (const auto& o : spec.options)
    if (o.name == name) return &o;
  return nullptr;
}

const OptionSpec* find_short(const CommandSpec& spec, char c) {
  if (c == 'h') return &kHelp;
  for (const auto& o : spec.options)
    if (o.short_name == c) return &o;
  return nullptr;
}

std::string invocation(const CommandSpec& spec) {
  return spec.name.starts_with("shapetune") ? spec.name : "shapetune " + spec.name;
}

std::string see_help(const CommandSpec& spec) { return "; see `" + invocation(spec) + " --help`"; }

}  // namespace

std::optional<std::string> ParsedArgs::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

const std::vector<std::string>& ParsedArgs::values(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = values_.find(name);
  return it == values_.end() ? none : it->second;
}

double ParsedArgs::number(const std::string& name, double fallback, double min, double max) const {
  auto text = value(name);
  if (!text) return fallback;
  double v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc{} || end != text->data() + text->size())
    throw UsageError("--" + name + " expects a number, got '" + *text + "'");
  if (!std::isfinite(v)) throw UsageError("--" + name + " expects a finite number, got '" + *text + "'");
  if (v < min || v > max) {
    std::ostringstream s;
    s << "--" << name << " must be between " << min << " and " << max << ", got " << *text;
    throw UsageError(s.str());
  }
  return v;
}

long long ParsedArgs::integer(const std::string& name, long long fallback, long long min, long long max) const {
  auto text = value(name);
  if (!text) return fallback;
  long long v = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc{} || end != text->data() + text->size())
    throw UsageError("--" + name + " expects an integer, got '" + *text + "'");
  if (v < min || v > max)
    throw UsageError("--" + name + " must be between " + std::to_string(min) + " and " + std::to_string(max) +
                     ", got " + *text);
  return v;
}

ParsedArgs parse(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParsedArgs parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const OptionSpec* option = nullptr;
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      std::string name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      option = find_long(spec, name);
      if (!option) throw UsageError("unknown option --" + name + " for `" + invocation(spec) + "`" + see_help(spec));
    } else if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
      option = find_short(spec, arg[1]);
      if (!option) throw UsageError("unknown option " + arg + " for `" + invocation(spec) + "`" + see_help(spec));
    } else {
      parsed.positional.push_back(arg);
      continue;
    }
    auto& slot = parsed.values_[option->name];
    if (!slot.empty() && !option->repeatable && !option->value_name.empty())
      throw UsageError("--" + option->name + " given twice" + see_help(spec));
    if (option->value_name.empty()) {
      if (inline_value) throw UsageError("--" + option->name + " takes no value" + see_help(spec));
      slot.push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size())
        throw UsageError("--" + option->name + " needs a value (" + option->value_name + ")" + see_help(spec));
      inline_value = args[++i];
    }
    slot.push_back(*inline_value);
  }
  if (parsed.has("help")) return parsed;
  if (parsed.positional.size() < spec.min_positional)
    throw UsageError("`" + invocation(spec) + "` needs " + spec.positionals + see_help(spec));
  if (parsed.positional.size() > spec.max_positional)
    throw UsageError("unexpected argument '" + parsed.positional[spec.max_positional] + "' for `" + invocation(spec) +
                     "`" + see_help(spec));
  return parsed;
}

std::string help_text(const CommandSpec& spec) {
  std::ostringstream s;
  s << "usage: " << invocation(spec);
  if (!spec.positionals.empty()) s << " " << spec.positionals;
  if (!spec.options.empty()) s << " [options]";
  s << "\n\n" << spec.summary << "\n\noptions:\n";
  auto line = [&](const OptionSpec& o) {
    std::string left = "  ";
    left += o.short_name ? std::string("-") + o.short_name + ", " : "    ";
    left += "--" + o.name + (o.value_name.empty() ? "" : " " + o.value_name);
    s << left;
    s << std::string(left.size() < 30 ? 30 - left.size() : 1, ' ') << o.help << "\n";
  };
  for (const auto& o : spec.options) line(o);
  line(kHelp);
  if (!spec.details.empty()) s << "\n" << spec.details << "\n";
  return s.str();
}

std::vector<std::string> split_comma_lists(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::stringstream s(v);
    std::string item;
    while (std::getline(s, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace shapetune::cli
