#include "db/schema.hpp"

namespace shapetune {

namespace {

// Conventions:
// - REAL columns never say NOT NULL: SQLite stores a NaN as NULL, and a NaN error or margin is
//   a legitimate value. The store reads a NULL REAL back as NaN.
// - Optional groups (a candidate's accuracy and timing) are all NULL when absent; the store
//   decides presence by one INTEGER/TEXT column of the group (checked, timing_mode).
// - Booleans are INTEGER 0/1; Problem, Shape and Config are stored as their key() text, with
//   the problem's parts beside its key so that SQL can filter on them.

constexpr std::string_view kMigration1 = R"sql(
PRAGMA application_id = 1397248084;  -- 0x53485054, 'SHPT' (kApplicationId)

CREATE TABLE devices (
  key                TEXT PRIMARY KEY,  -- DeviceFingerprint::key()
  name               TEXT NOT NULL,
  compute_capability INTEGER NOT NULL,
  sm_count           INTEGER NOT NULL,
  l2_bytes           INTEGER NOT NULL,
  memory_bytes       INTEGER NOT NULL,
  driver_version     TEXT NOT NULL,
  runtime_version    TEXT NOT NULL,
  cublas_version     TEXT NOT NULL,
  cudnn_version      TEXT NOT NULL
);

-- AUTOINCREMENT so that ids are never reused: the highest id is the latest sweep.
CREATE TABLE sweeps (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  device_key  TEXT NOT NULL REFERENCES devices(key),
  command     TEXT NOT NULL,
  git_sha     TEXT NOT NULL,
  yaml_path   TEXT NOT NULL,
  yaml_sha256 TEXT NOT NULL,
  options     TEXT NOT NULL,
  started_at  TEXT NOT NULL,
  finished_at TEXT,           -- NULL while running and after a crash
  status      TEXT NOT NULL
);
CREATE INDEX sweeps_by_work ON sweeps(device_key, yaml_sha256, options);

CREATE TABLE candidates (
  id          INTEGER PRIMARY KEY,
  sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
  problem_key TEXT NOT NULL,
  primitive   TEXT NOT NULL,
  dtype       TEXT NOT NULL,
  shape_key   TEXT NOT NULL,
  variant     TEXT NOT NULL,
  config_key  TEXT NOT NULL,
  baseline    INTEGER NOT NULL CHECK (baseline IN (0, 1)),
  status      TEXT NOT NULL,
  reason      TEXT NOT NULL,
  -- accuracy: NULL until the candidate ran
  max_abs_error  REAL,
  max_rel_error  REAL,
  mismatches     INTEGER,
  checked        INTEGER,
  first_mismatch TEXT,
  atol REAL,
  rtol REAL,
  -- timing: NULL unless the candidate was timed
  median_us           REAL,
  p10_us              REAL,
  p90_us              REAL,
  min_us              REAL,
  median_ci_rel       REAL,
  samples             INTEGER,
  timing_mode         TEXT,
  launches_per_sample INTEGER,
  input_sets          INTEGER,
  stop_reason         TEXT,
  measured_at TEXT NOT NULL,
  -- Also the index for resume checks and per-problem reads, which filter on a prefix of it.
  UNIQUE (sweep_id, problem_key, variant, config_key)
);

CREATE TABLE sweep_problems (
  sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
  problem_key TEXT NOT NULL,
  status      TEXT NOT NULL,  -- "done" or "skipped"
  reason      TEXT NOT NULL,
  PRIMARY KEY (sweep_id, problem_key)
);

-- The dispatch table. No foreign keys: a winner outlives the sweep that found it.
CREATE TABLE winners (
  device_key  TEXT NOT NULL,
  problem_key TEXT NOT NULL,
  primitive   TEXT NOT NULL,
  dtype       TEXT NOT NULL,
  shape_key   TEXT NOT NULL,
  variant     TEXT NOT NULL,
  config_key  TEXT NOT NULL,
  baseline    INTEGER NOT NULL CHECK (baseline IN (0, 1)),
  median_us           REAL,
  p10_us              REAL,
  p90_us              REAL,
  min_us              REAL,
  median_ci_rel       REAL,
  samples             INTEGER NOT NULL,
  timing_mode         TEXT NOT NULL,
  launches_per_sample INTEGER NOT NULL,
  input_sets          INTEGER NOT NULL,
  stop_reason         TEXT NOT NULL,
  atol REAL,
  rtol REAL,
  best_baseline       TEXT NOT NULL,  -- empty when no baseline ran accurately
  baseline_us         REAL,
  speedup_vs_baseline REAL,
  runner_up_variant   TEXT NOT NULL,
  runner_up_config    TEXT NOT NULL,
  runner_up_us        REAL,
  margin_rel          REAL,
  tie         INTEGER NOT NULL CHECK (tie IN (0, 1)),
  sweep_id    INTEGER NOT NULL,
  git_sha     TEXT NOT NULL,
  measured_at TEXT NOT NULL,
  PRIMARY KEY (device_key, problem_key)
);
)sql";

constexpr std::string_view kMigration2 = R"sql(
-- Empirical ceilings (bandwidth, FMA rate, launch overhead) that results are judged against.
CREATE TABLE ceilings (
  device_key  TEXT NOT NULL,
  name        TEXT NOT NULL,
  value       REAL,
  unit        TEXT NOT NULL,
  method      TEXT NOT NULL,
  git_sha     TEXT NOT NULL,
  measured_at TEXT NOT NULL,
  PRIMARY KEY (device_key, name)
);
)sql";

constexpr std::string_view kMigration3 = R"sql(
-- In-place primitives (Adam) are timed with their state restored before every sample.
ALTER TABLE candidates ADD COLUMN state_restored INTEGER CHECK (state_restored IN (0, 1));
ALTER TABLE winners ADD COLUMN state_restored INTEGER NOT NULL DEFAULT 0 CHECK (state_restored IN (0, 1));
)sql";

constexpr std::string_view kMigration4 = R"sql(
-- The cost model of each winner's problem (bytes moved, FLOPs), for rooflines and targets.
ALTER TABLE winners ADD COLUMN bytes REAL;
ALTER TABLE winners ADD COLUMN flops REAL;
)sql";

constexpr std::string_view kMigration5 = R"sql(
-- Hardware counters (CUPTI range profiler) of profiled candidates, one row per metric. Besides
-- CUPTI's metrics (names with "__"), the derived fp32_flops, fp16_flops and kernels.
CREATE TABLE counters (
  sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
  problem_key TEXT NOT NULL,
  variant     TEXT NOT NULL,
  config_key  TEXT NOT NULL,
  metric      TEXT NOT NULL,
  value       REAL,
  PRIMARY KEY (sweep_id, problem_key, variant, config_key, metric)
);
-- Why a sweep collected no counters ("insufficient privileges: ..."); NULL when it did, or was
-- not asked to.
ALTER TABLE sweeps ADD COLUMN counters_unavailable TEXT;
)sql";

constexpr std::string_view kMigration6 = R"sql(
-- The library's own identity of the algorithm a library winner ran (cuBLASLt: the algorithm's
-- configuration attributes), so dispatch replays that kernel rather than whatever the
-- heuristic ranks first on a later day or cuBLAS version. Empty for other winners.
ALTER TABLE winners ADD COLUMN library_algo TEXT NOT NULL DEFAULT '';
)sql";

constexpr Migration kMigrations[] = {
    {1, "devices, sweeps, candidates, sweep problems and winners", kMigration1},
    {2, "ceilings", kMigration2},
    {3, "state_restored flag on timings", kMigration3},
    {4, "cost model (bytes, flops) of each winner", kMigration4},
    {5, "hardware counters of profiled candidates", kMigration5},
    {6, "library algorithm identity of a winner (cuBLASLt), replayed by dispatch", kMigration6},
};

}  // namespace

std::span<const Migration> schema_migrations() { return kMigrations; }

}  // namespace shapetune
