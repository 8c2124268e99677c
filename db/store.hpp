// The SQLite store: one file per user, a versioned schema, one transaction per unit of work.
// Knows nothing of CUDA: it stores the plain records of core/records.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/counters.hpp"
#include "core/records.hpp"
#include "core/types.hpp"

struct sqlite3;

namespace shapetune {

// Every failure to open, migrate, read or write; the message says which file and what to do.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Provenance of one sweep. Two sweeps with the same device, YAML hash and options are the
// same piece of work: an unfinished one is resumed rather than started again.
struct SweepInfo {
  std::string device_key;
  std::string command;      // the command line as typed
  std::string git_sha;      // of the shapetune build that ran it
  std::string yaml_path;
  std::string yaml_sha256;
  std::string options;      // canonical text of the options that change results
};

struct SweepRow {
  std::int64_t id = 0;
  SweepInfo info;
  std::string started_at;   // UTC ISO 8601
  std::string finished_at;  // empty while running or after a crash
  std::string status;       // "running", "complete", "interrupted", "budget"
};

// An empirical ceiling measured on a device (copy bandwidth, FMA rate, ...).
struct CeilingRecord {
  std::string device_key;
  std::string name;    // e.g. "dram_copy_memcpy"
  double value = 0;
  std::string unit;    // e.g. "B/s", "FLOP/s", "us"
  std::string method;  // how it was measured, one line
  std::string git_sha;
  std::string measured_at;
};

// The hardware counters of one profiled candidate (CUPTI metric name -> value).
struct CounterRecord {
  std::int64_t sweep_id = 0;
  std::string problem_key;
  std::string variant;
  std::string config_key;
  counters::Values values;
};

// What merging one database into another added or changed, row counts per table.
struct MergeCounts {
  int from_schema = 0;  // the input's schema version (older ones are migrated in a private copy)
  std::int64_t devices = 0, ceilings = 0;
  std::int64_t sweeps_added = 0, sweeps_updated = 0;  // updated: the copy held here had not finished
  std::int64_t problems = 0, candidates_added = 0, candidates_replaced = 0, counters = 0, winners = 0;
  bool changed() const {
    return devices + ceilings + sweeps_added + sweeps_updated + problems + candidates_added + candidates_replaced +
               counters + winners > 0;
  }
};

enum class OpenMode { read_write, read_only };

class Store {
 public:
  // Opens (read_write creates) a database and brings its schema to the latest version.
  // Throws StoreError when the file is not SQLite, is SQLite but not a shapetune database,
  // has a schema newer than this build understands, or cannot be created/written.
  // read_only never writes the file: a database of an older schema is read through a migrated
  // private copy (removed with the Store).
  static std::unique_ptr<Store> open(const std::string& path, OpenMode mode = OpenMode::read_write);
  static int latest_schema_version();
  // The schema version the file holds (0: a new, empty file), without migrating anything.
  static int file_schema_version(const std::string& path);
  // A consistent copy of a shapetune database at `destination` (SQLite's backup API: a sweep may
  // be writing), refused unless the source passes the full integrity check and its schema is
  // not newer than this build's. Returns its schema version.
  static int backup(const std::string& path, const std::string& destination);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;

  void upsert_device(const DeviceFingerprint&);
  std::optional<DeviceFingerprint> device(const std::string& key) const;
  std::vector<DeviceFingerprint> devices() const;

  std::int64_t begin_sweep(const SweepInfo&);
  // Latest sweep with the same device, YAML hash and options that never finished.
  std::optional<std::int64_t> find_resumable_sweep(const SweepInfo&) const;
  std::optional<SweepRow> sweep(std::int64_t id) const;
  std::vector<SweepRow> sweeps() const;
  void finish_sweep(std::int64_t id, const std::string& status);

  // One transaction each, so a crash loses at most the candidate in flight.
  void record_candidate(const CandidateRecord&);
  bool has_candidate(std::int64_t sweep_id, const std::string& problem_key, const std::string& variant,
                     const std::string& config_key) const;
  std::vector<CandidateRecord> candidates(std::int64_t sweep_id, const std::string& problem_key) const;
  std::vector<CandidateRecord> candidates(std::int64_t sweep_id) const;
  // The candidates of one problem that crashed or hung their GPU worker (status crashed or
  // timeout), in the order they were stored.
  std::vector<CandidateRecord> faulted_candidates(std::int64_t sweep_id, const std::string& problem_key) const;

  // Problem-level outcome within a sweep: "done", or "skipped" with the reason.
  void record_problem(std::int64_t sweep_id, const std::string& problem_key, const std::string& status,
                      const std::string& reason);
  std::optional<std::string> problem_status(std::int64_t sweep_id, const std::string& problem_key) const;

  // Per problem of one device (or only problem_key's, when given), ordered by problem key: the
  // sweeps that finished it ("done"), the latest started first (then the largest options, command
  // and git sha text, for a fixed order). The dispatch row is chosen from them (newest_measurements).
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> done_sweeps(const std::string& device_key,
                                                                            const std::string& problem_key = "") const;

  // Copies every row of the shapetune database at `path` into this one, in one transaction: its
  // devices, ceilings, sweeps with their problems, candidates and counters, and its winners.
  // A sweep is the same sweep when device, command, git sha, shape file (path and hash), options
  // and start time are equal; it is then not added twice. Conflicts keep the later measurement:
  // a candidate (sweep, problem, variant, config) or a ceiling (device, name) replaces the row
  // here only when its measured_at is later; a problem's "done" replaces "skipped"; a finished
  // copy of a sweep updates an unfinished one. A winner is taken only from the latest sweep that
  // finished its problem (done_sweeps' first), where one is held; otherwise the later one. So
  // merging the same file twice changes nothing. The input is only read; an older schema is
  // migrated in a private copy. Recompute the winners after (tuner/merge).
  MergeCounts merge_from(const std::string& path);

  // Replaces the dispatch row for (device, problem).
  void store_winner(const WinnerRecord&);
  // Every winner, or one device's when device_key is not empty; ordered by problem key.
  std::vector<WinnerRecord> winners(const std::string& device_key = "") const;
  // One device's row for one problem, if it has one.
  std::optional<WinnerRecord> winner(const std::string& device_key, const std::string& problem_key) const;

  void store_ceiling(const CeilingRecord&);  // replaces (device, name)
  std::vector<CeilingRecord> ceilings(const std::string& device_key = "") const;

  // Replaces the candidate's earlier counters, in one transaction.
  void record_counters(const CounterRecord&);
  // One candidate's counters; empty when it was never profiled.
  counters::Values counter_values(std::int64_t sweep_id, const std::string& problem_key, const std::string& variant,
                                  const std::string& config_key) const;
  // Every profiled candidate of a sweep, ordered by problem, variant and config.
  std::vector<CounterRecord> counter_records(std::int64_t sweep_id) const;
  // "counters unavailable: <reason>" for a sweep: recorded once, the latest reason kept.
  void set_counters_unavailable(std::int64_t sweep_id, const std::string& reason);
  std::optional<std::string> counters_unavailable(std::int64_t sweep_id) const;

 private:
  Store(sqlite3* db, std::string path);
  sqlite3* db_;
  std::string path_;
  std::optional<std::filesystem::path> copy_dir_;  // a private copy read in place of path_, removed with the Store
};

// UTC now as "2026-11-30T19:18:14Z".
std::string utc_now_iso8601();

}  // namespace shapetune
