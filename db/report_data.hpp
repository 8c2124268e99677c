// What `shapetune report` computes from a database before it writes anything: per winner, the
// facts its tables and plots show (baseline kind, best own variant against the best library,
// baselines that could not run), and per device the roofs the winners are measured against.
// Internal to db/report*.cpp; kept apart so the numbers can be tested without Markdown.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/counters.hpp"
#include "core/records.hpp"
#include "db/report.hpp"
#include "db/store.hpp"

namespace shapetune::report_data {

const char* baseline_kind_name(BaselineKind);

// A winner with what the report derives from its problem's candidates in the winner's sweep.
struct WinnerFacts {
  const WinnerRecord* winner = nullptr;
  std::string family;                   // "gemm" for gemm.nt
  BaselineKind baseline_kind = BaselineKind::unknown;  // of winner->best_baseline (unknown where none)
  // The fastest accurate candidate that is not a baseline, and the fastest library baseline;
  // their comparison is the research result (the table itself may pick the library).
  std::optional<CandidateRecord> best_own;
  std::optional<CandidateRecord> best_library;
  // Baseline candidates that ran for this problem but could not give a time (unsupported, failed
  // accuracy, crashed, ...): a baseline the matrix asked for and lost.
  std::vector<CandidateRecord> lost_baselines;
  std::vector<CandidateRecord> faults;  // crashed or hung candidates
  counters::Values counters;            // the winner's, where profiled

  bool has_cost() const;
  double intensity() const;   // FLOPs per byte (NaN without a cost)
  double flops_per_s() const;
  double bytes_per_s() const;
};

// "own faster" / "same" / "library faster" under compare_verdict's noise band; nullopt where the
// problem has no accurate own candidate or no library baseline.
std::optional<std::string> own_vs_library(const WinnerFacts&);

// One roof of a device: a measured ceiling, raised to the best rate a library reached on this
// database's problems where a library beat the ceiling's own kernel (so no library shows above
// 100%); `source` says which it is.
struct Roof {
  std::string name;   // ceiling name: dram_copy_best, fp32_fma, tensor_f16, ...
  double value = 0;   // B/s for dram_copy_best, FLOP/s otherwise
  std::string method;  // the ceiling's method as measured
  std::string raised_by;  // empty, or "cublaslt on gemm.nt/bf16/m=..,n=..,k=.. (831.2 TFLOP/s)"
};

struct DeviceRoofs {
  std::optional<Roof> copy;                // dram_copy_best
  std::map<std::string, Roof> compute;     // by ceiling name: fp32_fma, tensor_f16, tensor_bf16, tensor_tf32
  std::map<std::string, bool> tensor_families;  // "family/dtype" -> runs on tensor cores (see roof_for)

  // The compute roof that bounds a problem: tensor_<dtype> where the family does compute-bound
  // work in that dtype (its problems run on tensor cores), else fp32_fma (elementwise and
  // reduction kernels compute in fp32 whatever they store). nullptr when not measured.
  const Roof* compute_roof(const std::string& family, DType dtype) const;
  // The roofline at the problem's intensity: min(compute roof, copy x intensity), in FLOP/s;
  // for a problem without FLOPs the copy roof in B/s. nullopt when a needed ceiling is missing.
  std::optional<double> roof_at(const WinnerFacts&) const;
  // achieved / roof_at; nullopt without a cost or a roof.
  std::optional<double> fraction_of_roof(const WinnerFacts&) const;
};

DeviceRoofs device_roofs(const std::vector<CeilingRecord>& ceilings, const std::string& device_key,
                         const std::vector<WinnerFacts>& facts);

// Everything a report reads from one database.
struct DbContents {
  DbContents() = default;
  DbContents(DbContents&&) = default;  // `facts` points into `winners`: moves keep it valid, copies would not
  DbContents& operator=(DbContents&&) = default;
  DbContents(const DbContents&) = delete;
  DbContents& operator=(const DbContents&) = delete;

  std::string path;
  int schema_version = 0;
  int schema_found = 0;  // older than schema_version when it was read through a migrated copy
  std::vector<DeviceFingerprint> devices;
  std::vector<SweepRow> sweeps;
  std::vector<WinnerRecord> winners;
  std::vector<CeilingRecord> ceilings;
  std::vector<WinnerFacts> facts;  // beside winners (pointers into `winners`)
  std::vector<std::pair<std::int64_t, std::string>> counters_unavailable;  // sweep id, reason
};

// Reads a database without changing it (an older schema through a migrated private copy).
// Throws ReportError.
DbContents read_db(const std::string& path, const BaselineKindFn& kind_of);

// Geometric mean of positive finite values; NaN for none.
double geomean(const std::vector<double>& values);

}  // namespace shapetune::report_data
