// The dispatch table: the winners of one device held in memory, looked up by problem.
// Which variants can run a shape is the catalogue's knowledge, so lookup takes it as functions
// (the store stays free of CUDA; see variants/dispatch_bridge.hpp for the usual wiring).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "core/types.hpp"

namespace shapetune {

class Store;

enum class DispatchSource : std::uint8_t {
  exact,    // tuned for exactly this problem
  nearest,  // tuned for the nearest shape (log distance) whose winner supports this one
  fallback, // nothing tuned applies: the primitive's default variant, or its next choice that runs it
};
std::string_view dispatch_source_name(DispatchSource);

struct DispatchChoice {
  std::string variant;
  Config config;
  DispatchSource source = DispatchSource::fallback;
  std::string tuned_problem;  // key of the winner row used; empty for fallback
  // The library algorithm recorded with an exact match's winner (WinnerRecord::library_algo),
  // to pass on as LaunchArgs::library_algo. Empty otherwise: an algorithm chosen for another
  // shape need not run this one, so a nearest match replays by its config's rank.
  std::string library_algo;
};

// A variant none of whose configs passed the accuracy gate on a tuned problem, in the sweep that
// chose its winner: what a runner shows beside the op, since the table took another variant for
// it (the TechJam lesson: packed QKV failing the rule on a shape, split taken there).
struct AccuracyFailure {
  std::string variant;
  int configs = 0;              // configs measured, all outside the tolerance
  double max_abs_error = 0;     // the worst of them
  std::string first_mismatch;   // the worst config's first element outside the tolerance
};

class DispatchTable {
 public:
  using SupportsFn = std::function<bool(const Problem&, const std::string& variant, const Config&)>;
  using DefaultFn = std::function<std::optional<std::pair<std::string, Config>>(const Problem&)>;

  // Copies one device's winners into memory; later lookups never touch SQLite.
  static DispatchTable load(const Store&, const std::string& device_key);
  static DispatchTable from_winners(std::vector<WinnerRecord>);

  // Exact match; else among winners of the same primitive, dtype and axis names, the one at
  // the smallest sum over axes of (ln a - ln b)^2 whose variant supports the problem (ties,
  // distances within kDispatchTieDistance, broken by problem key); else default_for(problem).
  // Throws std::runtime_error when even the default is missing.
  DispatchChoice lookup(const Problem&, const SupportsFn& supports, const DefaultFn& default_for) const;

  std::size_t size() const { return by_key_.size(); }
  const std::vector<WinnerRecord>& rows() const { return rows_; }
  // The variants that failed the accuracy gate on the tuned problem with this key (empty when
  // none did, or the table came from winners alone).
  const std::vector<AccuracyFailure>& accuracy_failures(const std::string& problem_key) const;

 private:
  std::vector<WinnerRecord> rows_;
  std::map<std::string, std::size_t> by_key_;  // problem key -> index in rows_
  std::map<std::string, std::vector<AccuracyFailure>> failures_;  // problem key -> variants
};

// Log distances closer than this are equal. The same distance reached through different
// logarithms (ln 4 - ln 2 and ln 8 - ln 4) differs in its last bits, and which shape wins such a
// tie must not depend on them. The header export (db/export.cpp) writes the same constant.
inline constexpr double kDispatchTieDistance = 1e-9;

// Log-space distance between two shapes with the same axis names; nullopt when the axes differ.
std::optional<double> shape_log_distance(const Shape&, const Shape&);

}  // namespace shapetune
