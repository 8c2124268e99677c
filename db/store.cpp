#include "db/store.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "db/schema.hpp"

namespace shapetune {

namespace {

constexpr int kBusyTimeoutMs = 5000;

// Turns an SQLite failure into a StoreError naming the file and, where the user can fix the
// cause, what to do about it.
[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& path, std::string_view doing) {
  const std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string context = " (while " + std::string(doing) + ")";
  switch (rc & 0xff) {  // the primary code; extended codes only refine it
    case SQLITE_NOTADB:
      throw StoreError(path + " is not an SQLite database (is it the right file?)");
    case SQLITE_CORRUPT:
      throw StoreError(path + " is corrupt: " + detail + context + "; restore it from a copy or use a new database");
    case SQLITE_BUSY:
      throw StoreError(path + " stayed locked by another process for " + std::to_string(kBusyTimeoutMs / 1000) +
                       " s" + context + "; wait for it to finish and try again");
    case SQLITE_READONLY:
      throw StoreError(path + " cannot be written: " + detail + context +
                       "; check the file's permissions, or do not open it read-only");
    case SQLITE_FULL:
      throw StoreError(path + ": the disk is full" + context + "; free some space and try again");
    default:
      throw StoreError(path + ": " + std::string(doing) + " failed: " + detail);
  }
}

// Runs SQL that binds no values: schema text, transaction control, pragmas.
void execute(sqlite3* db, const std::string& path, std::string_view doing, const std::string& sql) {
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(db, rc, path, doing);
}

// A prepared statement whose parameters are bound by name and whose columns are read by name,
// so that long INSERTs and SELECT * stay correct when columns are listed in another order.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, std::string_view doing, std::string_view sql)
      : db_(db), path_(path), doing_(doing) {
    const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(db, rc, path, doing);
    bound_.assign(static_cast<std::size_t>(sqlite3_bind_parameter_count(stmt_)), false);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // nullopt binds NULL.
  Statement& bind_int(const char* name, std::optional<std::int64_t> value) {
    const int index = parameter(name);
    return checked(index, value ? sqlite3_bind_int64(stmt_, index, *value) : sqlite3_bind_null(stmt_, index));
  }
  Statement& bind_real(const char* name, std::optional<double> value) {
    const int index = parameter(name);
    return checked(index, value ? sqlite3_bind_double(stmt_, index, *value) : sqlite3_bind_null(stmt_, index));
  }
  Statement& bind_text(const char* name, std::optional<std::string_view> value) {
    const int index = parameter(name);
    return checked(index, value ? sqlite3_bind_text64(stmt_, index, value->data(), value->size(), SQLITE_TRANSIENT,
                                                      SQLITE_UTF8)
                                : sqlite3_bind_null(stmt_, index));
  }
  Statement& bind_bool(const char* name, bool value) { return bind_int(name, value ? 1 : 0); }

  // True while there is a row to read.
  bool step() {
    require_all_bound();
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_sqlite(db_, rc, path_, doing_);
  }
  void run() {
    while (step()) {
    }
  }
  // For running the statement again with new values (every parameter must be bound again).
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    bound_.assign(bound_.size(), false);
  }

  // Columns are read as what they were written as: SQLite's columns take any type, so a page
  // damaged in place can hold text where a number was, which sqlite3_column_double reads as 0.
  bool is_null(std::string_view name) const { return sqlite3_column_type(stmt_, column(name)) == SQLITE_NULL; }
  std::int64_t integer(std::string_view name) const {
    const int index = column(name);
    expect_type(index, name, {SQLITE_INTEGER, SQLITE_NULL}, "an integer");
    return sqlite3_column_int64(stmt_, index);
  }
  std::int64_t integer_at(int index) const { return sqlite3_column_int64(stmt_, index); }
  std::string text_at(int index) const {
    const auto* bytes = sqlite3_column_text(stmt_, index);
    return bytes ? std::string(reinterpret_cast<const char*>(bytes)) : std::string();
  }
  sqlite3_stmt* raw() const { return stmt_; }
  // SQLite stores NaN as NULL, so NULL reads back as NaN.
  double real(std::string_view name) const {
    const int index = column(name);
    expect_type(index, name, {SQLITE_FLOAT, SQLITE_INTEGER, SQLITE_NULL}, "a number");
    if (sqlite3_column_type(stmt_, index) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
    return sqlite3_column_double(stmt_, index);
  }
  std::string text(std::string_view name) const {
    const int index = column(name);
    expect_type(index, name, {SQLITE_TEXT, SQLITE_NULL}, "text");
    const auto* bytes = sqlite3_column_text(stmt_, index);
    if (!bytes) return {};
    return std::string(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, index)));
  }

 private:
  int parameter(const char* name) const {
    const int index = sqlite3_bind_parameter_index(stmt_, name);
    if (index == 0) throw std::logic_error(std::string("no parameter ") + name + " in: " + sqlite3_sql(stmt_));
    return index;
  }

  Statement& checked(int index, int rc) {
    if (rc != SQLITE_OK) throw_sqlite(db_, rc, path_, doing_);
    bound_[static_cast<std::size_t>(index - 1)] = true;
    return *this;
  }

  // SQLite would silently bind NULL to a forgotten parameter.
  void require_all_bound() const {
    for (std::size_t i = 0; i < bound_.size(); ++i)
      if (!bound_[i])
        throw std::logic_error(std::string("parameter ") + sqlite3_bind_parameter_name(stmt_, static_cast<int>(i + 1)) +
                               " was not bound in: " + sqlite3_sql(stmt_));
  }

  void expect_type(int index, std::string_view name, std::initializer_list<int> allowed, const char* what) const {
    const int type = sqlite3_column_type(stmt_, index);
    for (const int a : allowed)
      if (type == a) return;
    static const char* const kNames[] = {"?", "an integer", "a real", "text", "a blob", "NULL"};
    throw StoreError(path_ + " is corrupt: column " + std::string(name) + " holds " + kNames[type < 0 || type > 5 ? 0 : type] +
                     " where " + what + " belongs (" + std::string(doing_) +
                     "); restore it from a copy or use a new database");
  }

  int column(std::string_view name) const {
    const int count = sqlite3_column_count(stmt_);
    for (int i = 0; i < count; ++i)
      if (name == sqlite3_column_name(stmt_, i)) return i;
    throw std::logic_error("no column " + std::string(name) + " in: " + sqlite3_sql(stmt_));
  }

  sqlite3* db_;
  const std::string& path_;
  std::string doing_;
  sqlite3_stmt* stmt_ = nullptr;
  std::vector<bool> bound_;
};

// BEGIN IMMEDIATE takes the write lock up front, so a busy database fails at BEGIN (after the
// busy timeout) rather than half-way through; anything not committed is rolled back.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path, std::string_view doing) : db_(db), path_(path), doing_(doing) {
    execute(db_, path_, doing_, "BEGIN IMMEDIATE");
  }
  ~Transaction() {
    if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  void commit() {
    execute(db_, path_, doing_, "COMMIT");
    committed_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  std::string doing_;
  bool committed_ = false;
};

std::int64_t pragma_integer(sqlite3* db, const std::string& path, const std::string& pragma) {
  Statement query(db, path, "reading the database header", "PRAGMA " + pragma);
  return query.step() ? query.integer_at(0) : 0;
}

int user_version(sqlite3* db, const std::string& path) {
  return static_cast<int>(pragma_integer(db, path, "user_version"));
}

// Keyed values (dtype, status, timing mode, shape and config keys) that do not parse mean the
// row was written by something else; say where rather than return a default.
template <typename T>
T parsed_or_throw(std::optional<T> value, std::string_view what, const std::string& text, const std::string& path) {
  if (!value) throw StoreError(path + ": unknown " + std::string(what) + " '" + text + "' (written by a newer shapetune?)");
  return *value;
}

template <typename T>
T key_or_throw(const std::string& key, const std::string& path) {
  try {
    return T::parse_key(key);
  } catch (const std::invalid_argument& e) {
    throw StoreError(path + ": " + e.what());
  }
}

// The field of an optional group, or nullopt (bound as NULL) when the group is absent.
template <typename Group, typename Field>
std::optional<Field> member_of(const std::optional<Group>& group, Field Group::*field) {
  if (!group) return std::nullopt;
  return (*group).*field;
}

// ---- opening -------------------------------------------------------------------------------

// The checks SQLite would answer only with "unable to open database file".
void check_file_access(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  const fs::file_status status = fs::status(path, ignored);
  if (fs::is_directory(status)) throw StoreError(path + " is a directory; give the path of a database file");
  const bool exists = fs::exists(status);
  // SQLite would block on a FIFO's open and read a device without end.
  if (exists && !fs::is_regular_file(status))
    throw StoreError(path + " is not a regular file (a pipe, a device or a socket); give the path of a database file");
  if (mode == OpenMode::read_only) {
    if (!exists) throw StoreError(path + " does not exist; check the path, or run a sweep to create it");
    return;
  }
  fs::path directory = fs::path(path).parent_path();
  if (directory.empty()) directory = ".";
  if (!fs::is_directory(directory, ignored))
    throw StoreError("cannot create " + path + ": directory " + directory.string() +
                     " does not exist; create it or choose another database path");
  // Even an existing database needs its directory: SQLite writes its -wal and -shm files there.
  if (access(directory.c_str(), W_OK) != 0)
    throw StoreError("cannot write " + path + ": directory " + directory.string() +
                     " is not writable; choose another database path or open it read-only");
  if (exists && access(path.c_str(), W_OK) != 0)
    throw StoreError(path + " is not writable; fix its permissions or open it read-only");
}

// SQLite's quick_check (the pages and b-trees; not cell contents, which the column readers check)
// on every open: a database damaged in place is refused before anything is read from it.
void check_integrity(sqlite3* db, const std::string& path) {
  Statement check(db, path, "checking the database's integrity", "PRAGMA quick_check(1)");
  if (!check.step()) throw StoreError(path + " is corrupt: quick_check returned nothing");
  const auto* first = sqlite3_column_text(check.raw(), 0);
  const std::string result = first ? reinterpret_cast<const char*>(first) : "";
  if (result != "ok")
    throw StoreError(path + " is corrupt: " + result + "; restore it from a copy or use a new database");
}

// A shapetune database carries kApplicationId; a new or empty file has no schema yet and is
// claimed by migration 1. Anything else belongs to some other program.
void check_is_shapetune(sqlite3* db, const std::string& path) {
  const std::int64_t application_id = pragma_integer(db, path, "application_id");
  if (application_id == kApplicationId) return;
  Statement objects(db, path, "reading the database schema", "SELECT count(*) FROM sqlite_master");
  objects.step();
  if (application_id == 0 && objects.integer_at(0) == 0) return;
  throw StoreError(path + " is an SQLite database but not a shapetune database; choose another database path");
}

void check_schema_version(int version, const std::string& path, OpenMode mode) {
  const int latest = Store::latest_schema_version();
  if (version > latest)
    throw StoreError(path + " has schema v" + std::to_string(version) + "; this shapetune understands up to v" +
                     std::to_string(latest) + ": upgrade shapetune");
  (void)mode;  // an older schema is migrated: in place read-write, in a private copy read-only
}

void migrate(sqlite3* db, const std::string& path, int version_found) {
  for (const Migration& migration : schema_migrations()) {
    // Skipping without a transaction keeps opening an up-to-date database free of write locks.
    if (migration.version <= version_found) continue;
    const std::string doing =
        "migrating to schema v" + std::to_string(migration.version) + " (" + std::string(migration.description) + ")";
    Transaction transaction(db, path, doing);
    // Another process may have migrated between our first look and the lock.
    if (user_version(db, path) >= migration.version) continue;
    execute(db, path, doing, std::string(migration.sql));
    // PRAGMA takes no bound parameters; the value is our own constant.
    execute(db, path, doing, "PRAGMA user_version = " + std::to_string(migration.version));
    transaction.commit();
  }
}

struct CloseDatabase {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};

// Every table of a database and its columns in order (SQLite's own tables left out).
using TableColumns = std::map<std::string, std::vector<std::string>>;
TableColumns table_columns(sqlite3* db, const std::string& path) {
  Statement query(db, path, "reading the database schema", R"sql(
      SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p
      WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY m.name, p.cid)sql");
  TableColumns out;
  while (query.step()) {
    const auto* table = sqlite3_column_text(query.raw(), 0);
    const auto* column = sqlite3_column_text(query.raw(), 1);
    if (table && column) out[reinterpret_cast<const char*>(table)].emplace_back(reinterpret_cast<const char*>(column));
  }
  return out;
}

// The tables and columns the migrations make, learnt once from an empty in-memory database.
const TableColumns& latest_table_columns() {
  static const TableColumns columns = [] {
    sqlite3* handle = nullptr;
    sqlite3_open(":memory:", &handle);
    std::unique_ptr<sqlite3, CloseDatabase> db(handle);
    migrate(db.get(), ":memory:", 0);
    return table_columns(db.get(), ":memory:");
  }();
  return columns;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A file whose user_version says "latest" but whose tables are not the latest schema's (edited by
// hand, damaged in sqlite_master, or written by a fork) is refused before any row is read.
void check_tables(sqlite3* db, const std::string& path) {
  const TableColumns found = table_columns(db, path);
  const std::string version = "schema v" + std::to_string(Store::latest_schema_version());
  for (const auto& [table, columns] : latest_table_columns()) {
    const auto it = found.find(table);
    if (it == found.end())
      throw StoreError(path + " is not a shapetune database of " + version + ": it has no table " + table +
                       "; restore it from a copy or use a new database");
    if (it->second != columns)
      throw StoreError(path + " is not a shapetune database of " + version + ": table " + table + " has columns (" +
                       joined(it->second) + ") where " + version + " has (" + joined(columns) +
                       "); restore it from a copy or use a new database");
  }
}

// ---- row mapping ---------------------------------------------------------------------------

void bind_problem(Statement& statement, const Problem& problem) {
  statement.bind_text(":problem_key", problem.key())
      .bind_text(":primitive", problem.primitive)
      .bind_text(":dtype", dtype_name(problem.dtype))
      .bind_text(":shape_key", problem.shape.key());
}

Problem read_problem(const Statement& row, const std::string& path) {
  const std::string dtype = row.text("dtype");
  return Problem{row.text("primitive"), parsed_or_throw(parse_dtype(dtype), "dtype", dtype, path),
                 key_or_throw<Shape>(row.text("shape_key"), path)};
}

void bind_timing(Statement& statement, const std::optional<TimingStats>& timing) {
  const std::optional<TimingMode> mode = member_of(timing, &TimingStats::mode);
  const std::optional<bool> restored = member_of(timing, &TimingStats::state_restored);
  statement.bind_real(":median_us", member_of(timing, &TimingStats::median_us))
      .bind_real(":p10_us", member_of(timing, &TimingStats::p10_us))
      .bind_real(":p90_us", member_of(timing, &TimingStats::p90_us))
      .bind_real(":min_us", member_of(timing, &TimingStats::min_us))
      .bind_real(":median_ci_rel", member_of(timing, &TimingStats::median_ci_rel))
      .bind_int(":samples", member_of(timing, &TimingStats::samples))
      .bind_text(":timing_mode", mode ? std::optional(timing_mode_name(*mode)) : std::nullopt)
      .bind_int(":launches_per_sample", member_of(timing, &TimingStats::launches_per_sample))
      .bind_int(":input_sets", member_of(timing, &TimingStats::input_sets))
      .bind_text(":stop_reason", member_of(timing, &TimingStats::stop_reason))
      .bind_int(":state_restored", restored ? std::optional<std::int64_t>(*restored) : std::nullopt);
}

TimingStats read_timing(const Statement& row, const std::string& path) {
  const std::string mode = row.text("timing_mode");
  TimingStats timing;
  timing.median_us = row.real("median_us");
  timing.p10_us = row.real("p10_us");
  timing.p90_us = row.real("p90_us");
  timing.min_us = row.real("min_us");
  timing.median_ci_rel = row.real("median_ci_rel");
  timing.samples = static_cast<int>(row.integer("samples"));
  timing.mode = parsed_or_throw(parse_timing_mode(mode), "timing mode", mode, path);
  timing.launches_per_sample = static_cast<int>(row.integer("launches_per_sample"));
  timing.input_sets = static_cast<int>(row.integer("input_sets"));
  timing.stop_reason = row.text("stop_reason");
  timing.state_restored = row.integer("state_restored") != 0;
  return timing;
}

void bind_accuracy(Statement& statement, const std::optional<AccuracyReport>& accuracy) {
  statement.bind_real(":max_abs_error", member_of(accuracy, &AccuracyReport::max_abs_error))
      .bind_real(":max_rel_error", member_of(accuracy, &AccuracyReport::max_rel_error))
      .bind_int(":mismatches", member_of(accuracy, &AccuracyReport::mismatches))
      .bind_int(":checked", member_of(accuracy, &AccuracyReport::checked))
      .bind_text(":first_mismatch", member_of(accuracy, &AccuracyReport::first_mismatch));
}

AccuracyReport read_accuracy(const Statement& row) {
  return AccuracyReport{row.real("max_abs_error"), row.real("max_rel_error"), row.integer("mismatches"),
                        row.integer("checked"), row.text("first_mismatch")};
}

DeviceFingerprint read_device(const Statement& row) {
  DeviceFingerprint device;
  device.name = row.text("name");
  device.compute_capability = static_cast<int>(row.integer("compute_capability"));
  device.sm_count = static_cast<int>(row.integer("sm_count"));
  device.l2_bytes = row.integer("l2_bytes");
  device.memory_bytes = row.integer("memory_bytes");
  device.driver_version = row.text("driver_version");
  device.runtime_version = row.text("runtime_version");
  device.cublas_version = row.text("cublas_version");
  device.cudnn_version = row.text("cudnn_version");
  return device;
}

SweepRow read_sweep(const Statement& row) {
  SweepRow sweep;
  sweep.id = row.integer("id");
  sweep.info = SweepInfo{row.text("device_key"), row.text("command"),     row.text("git_sha"),
                         row.text("yaml_path"),  row.text("yaml_sha256"), row.text("options")};
  sweep.started_at = row.text("started_at");
  sweep.finished_at = row.text("finished_at");
  sweep.status = row.text("status");
  return sweep;
}

CandidateRecord read_candidate(const Statement& row, const std::string& path) {
  const std::string status = row.text("status");
  CandidateRecord candidate;
  candidate.sweep_id = row.integer("sweep_id");
  candidate.problem = read_problem(row, path);
  candidate.variant = row.text("variant");
  candidate.config = key_or_throw<Config>(row.text("config_key"), path);
  candidate.baseline = row.integer("baseline") != 0;
  candidate.status = parsed_or_throw(parse_candidate_status(status), "candidate status", status, path);
  candidate.reason = row.text("reason");
  if (!row.is_null("checked")) candidate.accuracy = read_accuracy(row);
  if (!row.is_null("timing_mode")) candidate.timing = read_timing(row, path);
  candidate.tolerance = Tolerance{row.real("atol"), row.real("rtol")};
  candidate.measured_at = row.text("measured_at");
  return candidate;
}

WinnerRecord read_winner(const Statement& row, const std::string& path) {
  WinnerRecord winner;
  winner.device_key = row.text("device_key");
  winner.problem = read_problem(row, path);
  winner.variant = row.text("variant");
  winner.config = key_or_throw<Config>(row.text("config_key"), path);
  winner.baseline = row.integer("baseline") != 0;
  winner.timing = read_timing(row, path);
  winner.tolerance = Tolerance{row.real("atol"), row.real("rtol")};
  winner.best_baseline = row.text("best_baseline");
  winner.baseline_us = row.real("baseline_us");
  winner.speedup_vs_baseline = row.real("speedup_vs_baseline");
  winner.runner_up_variant = row.text("runner_up_variant");
  winner.runner_up_config = key_or_throw<Config>(row.text("runner_up_config"), path);
  winner.runner_up_us = row.real("runner_up_us");
  winner.margin_rel = row.real("margin_rel");
  winner.tie = row.integer("tie") != 0;
  winner.cost = Cost{row.real("bytes"), row.real("flops")};
  winner.library_algo = row.text("library_algo");
  winner.sweep_id = row.integer("sweep_id");
  winner.git_sha = row.text("git_sha");
  winner.measured_at = row.text("measured_at");
  return winner;
}

CeilingRecord read_ceiling(const Statement& row) {
  return CeilingRecord{row.text("device_key"), row.text("name"),    row.real("value"),      row.text("unit"),
                       row.text("method"),     row.text("git_sha"), row.text("measured_at")};
}

}  // namespace

// ---- Store ---------------------------------------------------------------------------------

namespace {

// Whether SQLite will open the file in WAL mode: it does when byte 19 of the header (the write
// format version) is 2, whatever byte 18 says (tests/fuzz found a header with 3 and 2).
bool is_wal_database(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  unsigned char header[20] = {};
  return file.read(reinterpret_cast<char*>(header), sizeof header) && header[19] == 2;
}

// A file: URI of `path` (SQLite decodes %XX; ?, # and % must not appear raw).
std::string file_uri(const std::string& path, const std::string& query) {
  std::string out = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "?" + query;
}

// How a read-only verb opens a database without writing anything beside it. A WAL database
// with no -wal file has nothing outside the main file, so it is opened immutable: SQLite then
// creates no -wal or -shm (which a read-only connection would otherwise leave behind) and needs
// no write access to the directory. One with a -wal (a sweep writing now, or one that stopped
// without checkpointing) is read through the -wal as usual; where the directory is read-only
// and SQLite cannot make the -shm it needs, a private copy of both files is read instead.
struct ReadOnlyOpen {
  std::string target;  // a URI
  std::optional<std::filesystem::path> copy_dir;
};

// A new private directory under the system's temporary one; `what` completes the error message.
std::filesystem::path make_temp_dir(const std::string& what) {
  std::string pattern = (std::filesystem::temp_directory_path() / "shapetune-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw StoreError("cannot create a temporary directory to " + what);
  return pattern;
}

ReadOnlyOpen read_only_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  if (!is_wal_database(path)) return {file_uri(path, "mode=ro"), std::nullopt};
  if (!fs::exists(path + "-wal", ignored)) return {file_uri(path, "mode=ro&immutable=1"), std::nullopt};
  fs::path directory = fs::path(path).parent_path();
  if (directory.empty()) directory = ".";
  if (access(directory.c_str(), W_OK) == 0 || fs::exists(path + "-shm", ignored))
    return {file_uri(path, "mode=ro"), std::nullopt};
  const fs::path pattern = make_temp_dir("read a copy of " + path);
  const fs::path copy = pattern / "copy.db";
  std::error_code error;
  fs::copy_file(path, copy, error);
  if (!error) fs::copy_file(path + "-wal", copy.string() + "-wal", error);
  if (error) {
    fs::remove_all(pattern, ignored);
    throw StoreError("cannot copy " + path + " and its -wal to read them: " + error.message());
  }
  fs::permissions(copy, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ignored);
  fs::permissions(copy.string() + "-wal", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ignored);
  return {file_uri(copy.string(), "mode=ro"), pattern};
}

// A temporary directory that goes with this object (none when empty).
class OwnedDir {
 public:
  explicit OwnedDir(std::optional<std::filesystem::path> dir = std::nullopt) : dir_(std::move(dir)) {}
  OwnedDir(OwnedDir&& other) noexcept : dir_(other.release()) {}
  OwnedDir& operator=(OwnedDir&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  ~OwnedDir() { reset(); }
  const std::optional<std::filesystem::path>& get() const { return dir_; }
  // Removes the directory held now and holds `next` instead.
  void reset(std::optional<std::filesystem::path> next = std::nullopt) {
    std::error_code ignored;
    if (dir_) std::filesystem::remove_all(*dir_, ignored);
    dir_ = std::move(next);
  }
  std::optional<std::filesystem::path> release() { return std::exchange(dir_, std::nullopt); }

 private:
  std::optional<std::filesystem::path> dir_;
};

// A database opened read-only as the read-only verbs open it (read_only_target), with the private
// copy that may need, and the busy timeout set. StoreError naming `path` when it cannot be.
struct ReadOnlyConnection {
  std::unique_ptr<sqlite3, CloseDatabase> db;
  OwnedDir copy;
};

ReadOnlyConnection open_read_only(const std::string& path, std::string_view doing) {
  ReadOnlyConnection c;
  const ReadOnlyOpen target = read_only_target(path);
  c.copy.reset(target.copy_dir);
  sqlite3* handle = nullptr;
  const int rc = sqlite3_open_v2(target.target.c_str(), &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  c.db.reset(handle);  // allocated even when opening fails
  if (rc != SQLITE_OK) throw_sqlite(c.db.get(), rc, path, doing);
  sqlite3_busy_timeout(c.db.get(), kBusyTimeoutMs);
  return c;
}

int copy_database(const std::string& input, const std::string& copy);  // below, with merging

}  // namespace

std::unique_ptr<Store> Store::open(const std::string& path, OpenMode mode) {
  check_file_access(path, mode);
  std::unique_ptr<sqlite3, CloseDatabase> db;
  OwnedDir copy_dir;  // removed when the Store is (or here, if opening fails)
  if (mode == OpenMode::read_only) {
    ReadOnlyConnection c = open_read_only(path, "opening the database");
    db = std::move(c.db);
    copy_dir.reset(c.copy.release());
  } else {
    sqlite3* handle = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    db.reset(handle);  // allocated even when opening fails
    if (rc != SQLITE_OK) throw_sqlite(db.get(), rc, path, "opening the database");
    sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  }

  check_is_shapetune(db.get(), path);
  check_integrity(db.get(), path);
  int version = user_version(db.get(), path);
  check_schema_version(version, path, mode);
  if (mode == OpenMode::read_only && version < latest_schema_version()) {
    // A database of an older schema is read through a migrated private copy: read-only verbs
    // read every schema this project ever wrote, and never write the file (`shapetune migrate`
    // upgrades it in place, keeping a backup).
    db.reset();
    copy_dir.reset(make_temp_dir("read an older schema of " + path));  // copy_database reads the file anew
    const std::string copy = (*copy_dir.get() / "migrated.db").string();
    copy_database(path, copy);
    Store::open(copy, OpenMode::read_write);
    sqlite3* handle = nullptr;
    const int rc = sqlite3_open_v2(copy.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr);
    db.reset(handle);
    if (rc != SQLITE_OK) throw_sqlite(db.get(), rc, path, "opening its migrated copy");
    sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
    version = user_version(db.get(), path);
  }
  if (mode == OpenMode::read_write) {
    // WAL lets readers (winners, export) run while a sweep writes.
    execute(db.get(), path, "switching to WAL journaling", "PRAGMA journal_mode = WAL");
    execute(db.get(), path, "enabling foreign keys", "PRAGMA foreign_keys = ON");
    migrate(db.get(), path, version);
  }
  check_tables(db.get(), path);
  auto store = std::unique_ptr<Store>(new Store(db.release(), path));
  store->copy_dir_ = copy_dir.release();
  return store;
}

int Store::latest_schema_version() { return schema_migrations().back().version; }

int Store::backup(const std::string& path, const std::string& destination) { return copy_database(path, destination); }

int Store::file_schema_version(const std::string& path) {
  check_file_access(path, OpenMode::read_only);
  const ReadOnlyConnection c = open_read_only(path, "opening the database");
  check_is_shapetune(c.db.get(), path);
  return user_version(c.db.get(), path);
}

Store::Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

Store::~Store() {
  sqlite3_close_v2(db_);
  std::error_code ignored;
  if (copy_dir_) std::filesystem::remove_all(*copy_dir_, ignored);
}

int Store::schema_version() const { return user_version(db_, path_); }

void Store::upsert_device(const DeviceFingerprint& device) {
  const std::string key = device.key();
  Transaction transaction(db_, path_, "recording device " + key);
  // An upsert, not INSERT OR REPLACE: REPLACE deletes the row that sweeps refer to.
  Statement insert(db_, path_, "recording device " + key, R"sql(
      INSERT INTO devices (key, name, compute_capability, sm_count, l2_bytes, memory_bytes,
                           driver_version, runtime_version, cublas_version, cudnn_version)
      VALUES (:key, :name, :compute_capability, :sm_count, :l2_bytes, :memory_bytes,
              :driver_version, :runtime_version, :cublas_version, :cudnn_version)
      ON CONFLICT (key) DO UPDATE SET
        name = excluded.name, compute_capability = excluded.compute_capability,
        sm_count = excluded.sm_count, l2_bytes = excluded.l2_bytes, memory_bytes = excluded.memory_bytes,
        driver_version = excluded.driver_version, runtime_version = excluded.runtime_version,
        cublas_version = excluded.cublas_version, cudnn_version = excluded.cudnn_version)sql");
  insert.bind_text(":key", key)
      .bind_text(":name", device.name)
      .bind_int(":compute_capability", device.compute_capability)
      .bind_int(":sm_count", device.sm_count)
      .bind_int(":l2_bytes", device.l2_bytes)
      .bind_int(":memory_bytes", device.memory_bytes)
      .bind_text(":driver_version", device.driver_version)
      .bind_text(":runtime_version", device.runtime_version)
      .bind_text(":cublas_version", device.cublas_version)
      .bind_text(":cudnn_version", device.cudnn_version)
      .run();
  transaction.commit();
}

std::optional<DeviceFingerprint> Store::device(const std::string& key) const {
  Statement query(db_, path_, "reading device " + key, "SELECT * FROM devices WHERE key = :key");
  query.bind_text(":key", key);
  if (!query.step()) return std::nullopt;
  return read_device(query);
}

std::vector<DeviceFingerprint> Store::devices() const {
  Statement query(db_, path_, "reading devices", "SELECT * FROM devices ORDER BY key");
  std::vector<DeviceFingerprint> out;
  while (query.step()) out.push_back(read_device(query));
  return out;
}

std::int64_t Store::begin_sweep(const SweepInfo& info) {
  const std::string doing = "starting a sweep on device " + info.device_key;
  Transaction transaction(db_, path_, doing);
  Statement insert(db_, path_, doing, R"sql(
      INSERT INTO sweeps (device_key, command, git_sha, yaml_path, yaml_sha256, options,
                          started_at, finished_at, status)
      VALUES (:device_key, :command, :git_sha, :yaml_path, :yaml_sha256, :options,
              :started_at, NULL, 'running'))sql");
  insert.bind_text(":device_key", info.device_key)
      .bind_text(":command", info.command)
      .bind_text(":git_sha", info.git_sha)
      .bind_text(":yaml_path", info.yaml_path)
      .bind_text(":yaml_sha256", info.yaml_sha256)
      .bind_text(":options", info.options)
      .bind_text(":started_at", utc_now_iso8601())
      .run();
  const std::int64_t id = sqlite3_last_insert_rowid(db_);
  transaction.commit();
  return id;
}

std::optional<std::int64_t> Store::find_resumable_sweep(const SweepInfo& info) const {
  Statement query(db_, path_, "looking for a sweep to resume", R"sql(
      SELECT id FROM sweeps
      WHERE device_key = :device_key AND yaml_sha256 = :yaml_sha256 AND options = :options
        AND (finished_at IS NULL OR finished_at = '')
      ORDER BY id DESC LIMIT 1)sql");
  query.bind_text(":device_key", info.device_key)
      .bind_text(":yaml_sha256", info.yaml_sha256)
      .bind_text(":options", info.options);
  if (!query.step()) return std::nullopt;
  return query.integer("id");
}

std::optional<SweepRow> Store::sweep(std::int64_t id) const {
  Statement query(db_, path_, "reading sweep #" + std::to_string(id), "SELECT * FROM sweeps WHERE id = :id");
  query.bind_int(":id", id);
  if (!query.step()) return std::nullopt;
  return read_sweep(query);
}

std::vector<SweepRow> Store::sweeps() const {
  Statement query(db_, path_, "reading sweeps", "SELECT * FROM sweeps ORDER BY id");
  std::vector<SweepRow> out;
  while (query.step()) out.push_back(read_sweep(query));
  return out;
}

void Store::finish_sweep(std::int64_t id, const std::string& status) {
  const std::string doing = "finishing sweep #" + std::to_string(id);
  Transaction transaction(db_, path_, doing);
  Statement update(db_, path_, doing,
                   "UPDATE sweeps SET finished_at = :finished_at, status = :status WHERE id = :id");
  update.bind_text(":finished_at", utc_now_iso8601()).bind_text(":status", status).bind_int(":id", id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + " has no sweep #" + std::to_string(id) + " to finish");
  transaction.commit();
}

void Store::record_candidate(const CandidateRecord& record) {
  const std::string doing = "recording candidate " + record.variant + " [" + record.config.key() + "] for " +
                            record.problem.key();
  Transaction transaction(db_, path_, doing);
  Statement insert(db_, path_, doing, R"sql(
      INSERT OR REPLACE INTO candidates (
        sweep_id, problem_key, primitive, dtype, shape_key, variant, config_key, baseline, status, reason,
        max_abs_error, max_rel_error, mismatches, checked, first_mismatch, atol, rtol,
        median_us, p10_us, p90_us, min_us, median_ci_rel, samples, timing_mode, launches_per_sample,
        input_sets, stop_reason, state_restored, measured_at)
      VALUES (
        :sweep_id, :problem_key, :primitive, :dtype, :shape_key, :variant, :config_key, :baseline, :status, :reason,
        :max_abs_error, :max_rel_error, :mismatches, :checked, :first_mismatch, :atol, :rtol,
        :median_us, :p10_us, :p90_us, :min_us, :median_ci_rel, :samples, :timing_mode, :launches_per_sample,
        :input_sets, :stop_reason, :state_restored, :measured_at))sql");
  insert.bind_int(":sweep_id", record.sweep_id)
      .bind_text(":variant", record.variant)
      .bind_text(":config_key", record.config.key())
      .bind_bool(":baseline", record.baseline)
      .bind_text(":status", candidate_status_name(record.status))
      .bind_text(":reason", record.reason)
      .bind_real(":atol", record.tolerance.atol)
      .bind_real(":rtol", record.tolerance.rtol)
      .bind_text(":measured_at", utc_now_iso8601());
  bind_problem(insert, record.problem);
  bind_accuracy(insert, record.accuracy);
  bind_timing(insert, record.timing);
  insert.run();
  transaction.commit();
}

bool Store::has_candidate(std::int64_t sweep_id, const std::string& problem_key, const std::string& variant,
                         const std::string& config_key) const {
  Statement query(db_, path_, "looking up a candidate of " + problem_key, R"sql(
      SELECT 1 FROM candidates
      WHERE sweep_id = :sweep_id AND problem_key = :problem_key AND variant = :variant
        AND config_key = :config_key)sql");
  query.bind_int(":sweep_id", sweep_id)
      .bind_text(":problem_key", problem_key)
      .bind_text(":variant", variant)
      .bind_text(":config_key", config_key);
  return query.step();
}

std::vector<CandidateRecord> Store::candidates(std::int64_t sweep_id, const std::string& problem_key) const {
  Statement query(db_, path_, "reading the candidates of " + problem_key,
                  "SELECT * FROM candidates WHERE sweep_id = :sweep_id AND problem_key = :problem_key ORDER BY id");
  query.bind_int(":sweep_id", sweep_id).bind_text(":problem_key", problem_key);
  std::vector<CandidateRecord> out;
  while (query.step()) out.push_back(read_candidate(query, path_));
  return out;
}

std::vector<CandidateRecord> Store::candidates(std::int64_t sweep_id) const {
  Statement query(db_, path_, "reading the candidates of sweep #" + std::to_string(sweep_id),
                  "SELECT * FROM candidates WHERE sweep_id = :sweep_id ORDER BY id");
  query.bind_int(":sweep_id", sweep_id);
  std::vector<CandidateRecord> out;
  while (query.step()) out.push_back(read_candidate(query, path_));
  return out;
}

std::vector<CandidateRecord> Store::faulted_candidates(std::int64_t sweep_id, const std::string& problem_key) const {
  Statement query(db_, path_, "reading the crashed candidates of " + problem_key,
                  "SELECT * FROM candidates WHERE sweep_id = :sweep_id AND problem_key = :problem_key "
                  "AND status IN ('crashed', 'timeout') ORDER BY id");
  query.bind_int(":sweep_id", sweep_id).bind_text(":problem_key", problem_key);
  std::vector<CandidateRecord> out;
  while (query.step()) out.push_back(read_candidate(query, path_));
  return out;
}

void Store::record_problem(std::int64_t sweep_id, const std::string& problem_key, const std::string& status,
                           const std::string& reason) {
  const std::string doing = "recording the outcome of " + problem_key;
  Transaction transaction(db_, path_, doing);
  Statement insert(db_, path_, doing, R"sql(
      INSERT OR REPLACE INTO sweep_problems (sweep_id, problem_key, status, reason)
      VALUES (:sweep_id, :problem_key, :status, :reason))sql");
  insert.bind_int(":sweep_id", sweep_id)
      .bind_text(":problem_key", problem_key)
      .bind_text(":status", status)
      .bind_text(":reason", reason)
      .run();
  transaction.commit();
}

std::optional<std::string> Store::problem_status(std::int64_t sweep_id, const std::string& problem_key) const {
  Statement query(db_, path_, "reading the outcome of " + problem_key,
                  "SELECT status FROM sweep_problems WHERE sweep_id = :sweep_id AND problem_key = :problem_key");
  query.bind_int(":sweep_id", sweep_id).bind_text(":problem_key", problem_key);
  if (!query.step()) return std::nullopt;
  return query.text("status");
}

void Store::store_winner(const WinnerRecord& winner) {
  const std::string doing = "storing the winner of " + winner.problem.key();
  Transaction transaction(db_, path_, doing);
  Statement insert(db_, path_, doing, R"sql(
      INSERT OR REPLACE INTO winners (
        device_key, problem_key, primitive, dtype, shape_key, variant, config_key, baseline,
        median_us, p10_us, p90_us, min_us, median_ci_rel, samples, timing_mode, launches_per_sample,
        input_sets, stop_reason, state_restored, atol, rtol, best_baseline, baseline_us, speedup_vs_baseline,
        runner_up_variant, runner_up_config, runner_up_us, margin_rel, tie, bytes, flops, library_algo, sweep_id,
        git_sha, measured_at)
      VALUES (
        :device_key, :problem_key, :primitive, :dtype, :shape_key, :variant, :config_key, :baseline,
        :median_us, :p10_us, :p90_us, :min_us, :median_ci_rel, :samples, :timing_mode, :launches_per_sample,
        :input_sets, :stop_reason, :state_restored, :atol, :rtol, :best_baseline, :baseline_us, :speedup_vs_baseline,
        :runner_up_variant, :runner_up_config, :runner_up_us, :margin_rel, :tie, :bytes, :flops, :library_algo,
        :sweep_id, :git_sha, :measured_at))sql");
  insert.bind_text(":device_key", winner.device_key)
      .bind_text(":variant", winner.variant)
      .bind_text(":config_key", winner.config.key())
      .bind_bool(":baseline", winner.baseline)
      .bind_real(":atol", winner.tolerance.atol)
      .bind_real(":rtol", winner.tolerance.rtol)
      .bind_text(":best_baseline", winner.best_baseline)
      .bind_real(":baseline_us", winner.baseline_us)
      .bind_real(":speedup_vs_baseline", winner.speedup_vs_baseline)
      .bind_text(":runner_up_variant", winner.runner_up_variant)
      .bind_text(":runner_up_config", winner.runner_up_config.key())
      .bind_real(":runner_up_us", winner.runner_up_us)
      .bind_real(":margin_rel", winner.margin_rel)
      .bind_bool(":tie", winner.tie)
      .bind_real(":bytes", winner.cost.bytes)
      .bind_real(":flops", winner.cost.flops)
      .bind_text(":library_algo", winner.library_algo)
      .bind_int(":sweep_id", winner.sweep_id)
      .bind_text(":git_sha", winner.git_sha)
      .bind_text(":measured_at", winner.measured_at);
  bind_problem(insert, winner.problem);
  bind_timing(insert, winner.timing);
  insert.run();
  transaction.commit();
}

std::vector<WinnerRecord> Store::winners(const std::string& device_key) const {
  Statement query(db_, path_, "reading winners",
                  device_key.empty() ? "SELECT * FROM winners ORDER BY problem_key, device_key"
                                     : "SELECT * FROM winners WHERE device_key = :device_key ORDER BY problem_key");
  if (!device_key.empty()) query.bind_text(":device_key", device_key);
  std::vector<WinnerRecord> out;
  while (query.step()) out.push_back(read_winner(query, path_));
  return out;
}

std::optional<WinnerRecord> Store::winner(const std::string& device_key, const std::string& problem_key) const {
  Statement query(db_, path_, "reading the winner of " + problem_key,
                  "SELECT * FROM winners WHERE device_key = :device_key AND problem_key = :problem_key");
  query.bind_text(":device_key", device_key).bind_text(":problem_key", problem_key);
  if (!query.step()) return std::nullopt;
  return read_winner(query, path_);
}

void Store::store_ceiling(const CeilingRecord& ceiling) {
  const std::string doing = "storing ceiling " + ceiling.name;
  Transaction transaction(db_, path_, doing);
  Statement insert(db_, path_, doing, R"sql(
      INSERT OR REPLACE INTO ceilings (device_key, name, value, unit, method, git_sha, measured_at)
      VALUES (:device_key, :name, :value, :unit, :method, :git_sha, :measured_at))sql");
  insert.bind_text(":device_key", ceiling.device_key)
      .bind_text(":name", ceiling.name)
      .bind_real(":value", ceiling.value)
      .bind_text(":unit", ceiling.unit)
      .bind_text(":method", ceiling.method)
      .bind_text(":git_sha", ceiling.git_sha)
      .bind_text(":measured_at", ceiling.measured_at)
      .run();
  transaction.commit();
}

std::vector<CeilingRecord> Store::ceilings(const std::string& device_key) const {
  Statement query(db_, path_, "reading ceilings",
                  device_key.empty() ? "SELECT * FROM ceilings ORDER BY device_key, name"
                                     : "SELECT * FROM ceilings WHERE device_key = :device_key ORDER BY name");
  if (!device_key.empty()) query.bind_text(":device_key", device_key);
  std::vector<CeilingRecord> out;
  while (query.step()) out.push_back(read_ceiling(query));
  return out;
}

void Store::record_counters(const CounterRecord& record) {
  const std::string doing = "recording the counters of " + record.variant + " [" + record.config_key + "] for " +
                            record.problem_key;
  Transaction transaction(db_, path_, doing);
  Statement remove(db_, path_, doing, R"sql(
      DELETE FROM counters
      WHERE sweep_id = :sweep_id AND problem_key = :problem_key AND variant = :variant AND config_key = :config_key)sql");
  remove.bind_int(":sweep_id", record.sweep_id)
      .bind_text(":problem_key", record.problem_key)
      .bind_text(":variant", record.variant)
      .bind_text(":config_key", record.config_key)
      .run();
  Statement insert(db_, path_, doing, R"sql(
      INSERT INTO counters (sweep_id, problem_key, variant, config_key, metric, value)
      VALUES (:sweep_id, :problem_key, :variant, :config_key, :metric, :value))sql");
  for (const auto& [metric, value] : record.values) {
    insert.bind_int(":sweep_id", record.sweep_id)
        .bind_text(":problem_key", record.problem_key)
        .bind_text(":variant", record.variant)
        .bind_text(":config_key", record.config_key)
        .bind_text(":metric", metric)
        .bind_real(":value", value);
    insert.run();
    insert.reset();
  }
  transaction.commit();
}

counters::Values Store::counter_values(std::int64_t sweep_id, const std::string& problem_key,
                                       const std::string& variant, const std::string& config_key) const {
  Statement query(db_, path_, "reading the counters of " + variant + " for " + problem_key, R"sql(
      SELECT metric, value FROM counters
      WHERE sweep_id = :sweep_id AND problem_key = :problem_key AND variant = :variant AND config_key = :config_key)sql");
  query.bind_int(":sweep_id", sweep_id)
      .bind_text(":problem_key", problem_key)
      .bind_text(":variant", variant)
      .bind_text(":config_key", config_key);
  counters::Values values;
  while (query.step()) values[query.text("metric")] = query.real("value");
  return values;
}

std::vector<CounterRecord> Store::counter_records(std::int64_t sweep_id) const {
  Statement query(db_, path_, "reading the counters of sweep #" + std::to_string(sweep_id), R"sql(
      SELECT * FROM counters WHERE sweep_id = :sweep_id
      ORDER BY problem_key, variant, config_key, metric)sql");
  query.bind_int(":sweep_id", sweep_id);
  std::vector<CounterRecord> out;
  while (query.step()) {
    const std::string problem = query.text("problem_key"), variant = query.text("variant"),
                      config = query.text("config_key");
    if (out.empty() || out.back().problem_key != problem || out.back().variant != variant ||
        out.back().config_key != config)
      out.push_back({sweep_id, problem, variant, config, {}});
    out.back().values[query.text("metric")] = query.real("value");
  }
  return out;
}

void Store::set_counters_unavailable(std::int64_t sweep_id, const std::string& reason) {
  const std::string doing = "recording why sweep #" + std::to_string(sweep_id) + " has no counters";
  Transaction transaction(db_, path_, doing);
  Statement update(db_, path_, doing, "UPDATE sweeps SET counters_unavailable = :reason WHERE id = :id");
  update.bind_text(":reason", reason).bind_int(":id", sweep_id).run();
  if (sqlite3_changes(db_) == 0) throw StoreError(path_ + " has no sweep #" + std::to_string(sweep_id));
  transaction.commit();
}

std::optional<std::string> Store::counters_unavailable(std::int64_t sweep_id) const {
  Statement query(db_, path_, "reading sweep #" + std::to_string(sweep_id),
                  "SELECT counters_unavailable FROM sweeps WHERE id = :id");
  query.bind_int(":id", sweep_id);
  if (!query.step() || query.is_null("counters_unavailable")) return std::nullopt;
  return query.text("counters_unavailable");
}

// ---- merging --------------------------------------------------------------------------------

namespace {

// "a = excluded.a, b = excluded.b" over `columns`, for an upsert that takes the incoming row.
std::string take_excluded(const std::vector<std::string>& columns) {
  std::string out;
  for (const auto& c : columns) out += (out.empty() ? "" : ", ") + c + " = excluded." + c;
  return out;
}

std::string prefixed(const std::string& prefix, const std::vector<std::string>& columns) {
  std::string out;
  for (const auto& c : columns) out += (out.empty() ? "" : ", ") + prefix + c;
  return out;
}

std::vector<std::string> without(std::vector<std::string> columns, std::initializer_list<std::string_view> drop) {
  std::erase_if(columns, [&](const std::string& c) { return std::find(drop.begin(), drop.end(), c) != drop.end(); });
  return columns;
}

// A consistent copy of the database at `input` (SQLite's backup API: a writer may be running)
// in `copy`, refused unless it is a sound shapetune database no newer than this build. Returns
// its schema version.
int copy_database(const std::string& input, const std::string& copy) {
  check_file_access(input, OpenMode::read_only);
  const ReadOnlyConnection c = open_read_only(input, "opening the database to copy");
  sqlite3* const source = c.db.get();
  check_is_shapetune(source, input);
  check_integrity(source, input);
  const int version = user_version(source, input);
  check_schema_version(version, input, OpenMode::read_write);  // refuses only a newer schema

  sqlite3* handle = nullptr;
  int rc = sqlite3_open_v2(copy.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<sqlite3, CloseDatabase> destination(handle);
  if (rc != SQLITE_OK) throw_sqlite(destination.get(), rc, copy, "creating a private copy");
  sqlite3_backup* backup = sqlite3_backup_init(destination.get(), "main", source, "main");
  if (!backup) throw_sqlite(destination.get(), sqlite3_errcode(destination.get()), copy, "copying " + input);
  rc = sqlite3_backup_step(backup, -1);
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) throw_sqlite(destination.get(), rc, input, "copying the database");
  // The full check, not the quick one every open runs: an index that disagrees with its table
  // (which quick_check misses) would let typed readers see the index's values while a merge
  // copies the table's.
  Statement check(destination.get(), input, "checking the database", "PRAGMA integrity_check(1)");
  const std::string result = check.step() ? check.text_at(0) : "";
  if (result != "ok") throw StoreError(input + " is corrupt: " + result + "; restore it from a copy");
  return version;
}

}  // namespace

// Which of the sweeps that finished a problem holds its winner: the latest started, then a
// fixed order of the rest of the sweep's identity (ids differ between merged databases).
constexpr std::string_view kLatestSweepFirst =
    "s.started_at DESC, s.options DESC, s.command DESC, s.git_sha DESC, s.yaml_sha256 DESC, s.yaml_path DESC, s.id DESC";

std::vector<std::pair<std::string, std::vector<std::int64_t>>> Store::done_sweeps(const std::string& device_key,
                                                                                 const std::string& problem_key) const {
  Statement query(db_, path_, "finding the sweeps behind device " + device_key + "'s winners",
                  "SELECT p.problem_key AS problem_key, s.id AS id "
                  "FROM sweep_problems AS p JOIN sweeps AS s ON s.id = p.sweep_id "
                  "WHERE s.device_key = :device_key AND p.status = 'done'" +
                      std::string(problem_key.empty() ? "" : " AND p.problem_key = :problem_key") +
                      " ORDER BY p.problem_key, " + std::string(kLatestSweepFirst));
  query.bind_text(":device_key", device_key);
  if (!problem_key.empty()) query.bind_text(":problem_key", problem_key);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  while (query.step()) {
    std::string problem = query.text("problem_key");
    if (out.empty() || out.back().first != problem) out.emplace_back(std::move(problem), std::vector<std::int64_t>{});
    out.back().second.push_back(query.integer("id"));
  }
  return out;
}

MergeCounts Store::merge_from(const std::string& input) {
  const OwnedDir copy_dir(make_temp_dir("merge " + input));
  const std::string copy = (*copy_dir.get() / "input.db").string();
  MergeCounts counts;
  counts.from_schema = copy_database(input, copy);
  {
    // Migrated to this build's schema, and every row read once through the typed readers: a
    // damaged cell (text where a number belongs) is refused here rather than copied into a good
    // database that would then fail to read.
    const auto checked = Store::open(copy, OpenMode::read_write);
    (void)checked->devices();
    (void)checked->ceilings();
    (void)checked->winners();
    for (const SweepRow& sweep : checked->sweeps()) {
      (void)checked->candidates(sweep.id);
      (void)checked->counter_records(sweep.id);
    }
  }

  const std::string doing = "merging " + input;
  Statement(db_, path_, doing, "ATTACH DATABASE :path AS merged_input").bind_text(":path", copy).run();
  struct Detach {
    sqlite3* db;
    ~Detach() { sqlite3_exec(db, "DETACH DATABASE merged_input", nullptr, nullptr, nullptr); }
  } detach{db_};
  Transaction transaction(db_, path_, doing);  // ends (commit or rollback) before the detach
  auto run = [&](const std::string& sql) {
    execute(db_, path_, doing, sql);
    return static_cast<std::int64_t>(sqlite3_changes(db_));
  };
  const TableColumns& columns = latest_table_columns();

  const std::string device_columns = joined(columns.at("devices"));
  counts.devices = run("INSERT INTO main.devices (" + device_columns + ") SELECT " + device_columns +
                       " FROM merged_input.devices WHERE true ON CONFLICT (key) DO NOTHING");
  const std::string ceiling_columns = joined(columns.at("ceilings"));
  counts.ceilings = run("INSERT INTO main.ceilings (" + ceiling_columns + ") SELECT " + ceiling_columns +
                        " FROM merged_input.ceilings WHERE true ON CONFLICT (device_key, name) DO UPDATE SET " +
                        take_excluded(without(columns.at("ceilings"), {"device_key", "name"})) +
                        " WHERE excluded.measured_at > ceilings.measured_at");

  // Sweeps one by one: each is matched by its identity, or added with an id of this database's.
  run("CREATE TEMP TABLE IF NOT EXISTS merge_sweep_map (input_id INTEGER PRIMARY KEY, id INTEGER NOT NULL)");
  run("DELETE FROM temp.merge_sweep_map");
  Statement sweeps(db_, path_, doing, "SELECT * FROM merged_input.sweeps ORDER BY id");
  Statement find(db_, path_, doing, R"sql(
      SELECT id, finished_at FROM main.sweeps
      WHERE device_key = :device_key AND command = :command AND git_sha = :git_sha AND yaml_path = :yaml_path
        AND yaml_sha256 = :yaml_sha256 AND options = :options AND started_at = :started_at
      ORDER BY id LIMIT 1)sql");
  Statement finish(db_, path_, doing, R"sql(
      UPDATE main.sweeps SET finished_at = :finished_at, status = :status,
        counters_unavailable = coalesce(counters_unavailable, :counters_unavailable)
      WHERE id = :id)sql");
  Statement insert(db_, path_, doing, R"sql(
      INSERT INTO main.sweeps (device_key, command, git_sha, yaml_path, yaml_sha256, options, started_at,
                               finished_at, status, counters_unavailable)
      VALUES (:device_key, :command, :git_sha, :yaml_path, :yaml_sha256, :options, :started_at,
              :finished_at, :status, :counters_unavailable))sql");
  Statement map(db_, path_, doing, "INSERT INTO temp.merge_sweep_map (input_id, id) VALUES (:input_id, :id)");
  auto optional_text = [&](std::string_view column) -> std::optional<std::string> {
    if (sweeps.is_null(column)) return std::nullopt;
    return sweeps.text(column);
  };
  while (sweeps.step()) {
    const SweepRow row = read_sweep(sweeps);
    const auto finished_at = optional_text("finished_at");
    const auto counters_unavailable = optional_text("counters_unavailable");
    find.reset();
    find.bind_text(":device_key", row.info.device_key)
        .bind_text(":command", row.info.command)
        .bind_text(":git_sha", row.info.git_sha)
        .bind_text(":yaml_path", row.info.yaml_path)
        .bind_text(":yaml_sha256", row.info.yaml_sha256)
        .bind_text(":options", row.info.options)
        .bind_text(":started_at", row.started_at);
    std::int64_t id = 0;
    if (find.step()) {
      id = find.integer("id");
      const std::string here_finished = find.text("finished_at");
      if (finished_at && !finished_at->empty() && (here_finished.empty() || *finished_at > here_finished)) {
        finish.reset();
        finish.bind_text(":finished_at", *finished_at)
            .bind_text(":status", row.status)
            .bind_text(":counters_unavailable", counters_unavailable)
            .bind_int(":id", id)
            .run();
        ++counts.sweeps_updated;
      }
    } else {
      insert.reset();
      insert.bind_text(":device_key", row.info.device_key)
          .bind_text(":command", row.info.command)
          .bind_text(":git_sha", row.info.git_sha)
          .bind_text(":yaml_path", row.info.yaml_path)
          .bind_text(":yaml_sha256", row.info.yaml_sha256)
          .bind_text(":options", row.info.options)
          .bind_text(":started_at", row.started_at)
          .bind_text(":finished_at", finished_at)
          .bind_text(":status", row.status)
          .bind_text(":counters_unavailable", counters_unavailable)
          .run();
      id = sqlite3_last_insert_rowid(db_);
      ++counts.sweeps_added;
    }
    map.reset();
    map.bind_int(":input_id", row.id).bind_int(":id", id).run();
  }

  counts.problems = run(R"sql(
      INSERT INTO main.sweep_problems (sweep_id, problem_key, status, reason)
      SELECT m.id, p.problem_key, p.status, p.reason
      FROM merged_input.sweep_problems AS p JOIN temp.merge_sweep_map AS m ON m.input_id = p.sweep_id WHERE true
      ON CONFLICT (sweep_id, problem_key) DO UPDATE SET status = excluded.status, reason = excluded.reason
      WHERE sweep_problems.status <> 'done' AND excluded.status = 'done')sql");

  const auto candidate_columns = without(columns.at("candidates"), {"id", "sweep_id"});
  const auto count_candidates = [&] {
    Statement count(db_, path_, doing, "SELECT count(*) FROM main.candidates");
    count.step();
    return count.integer_at(0);
  };
  const std::int64_t before = count_candidates();
  const std::int64_t changed = run(
      "INSERT INTO main.candidates (sweep_id, " + joined(candidate_columns) + ") SELECT m.id, " +
      prefixed("c.", candidate_columns) +
      " FROM merged_input.candidates AS c JOIN temp.merge_sweep_map AS m ON m.input_id = c.sweep_id WHERE true"
      " ORDER BY c.id ON CONFLICT (sweep_id, problem_key, variant, config_key) DO UPDATE SET " +
      take_excluded(without(candidate_columns, {"problem_key", "variant", "config_key"})) +
      " WHERE excluded.measured_at > candidates.measured_at");
  counts.candidates_added = count_candidates() - before;
  counts.candidates_replaced = changed - counts.candidates_added;

  const auto counter_columns = without(columns.at("counters"), {"sweep_id"});
  counts.counters = run("INSERT INTO main.counters (sweep_id, " + joined(counter_columns) + ") SELECT m.id, " +
                        prefixed("k.", counter_columns) +
                        " FROM merged_input.counters AS k JOIN temp.merge_sweep_map AS m ON m.input_id = k.sweep_id"
                        " WHERE true ON CONFLICT DO NOTHING");

  // Winners: where a finished sweep of (device, problem) is held here, only a row of the latest
  // such sweep is taken, and it replaces a row of any other sweep but never one of the same
  // sweep (which the winners' recomputation may have written): so no order of merges flips a
  // row back and forth. Elsewhere the later measured_at wins. A winner whose sweep the input no
  // longer holds keeps sweep id 0: unknown here.
  run("CREATE TEMP TABLE IF NOT EXISTS merge_latest (device_key TEXT, problem_key TEXT, sweep_id INTEGER,"
      " PRIMARY KEY (device_key, problem_key))");
  run("DELETE FROM temp.merge_latest");
  run("INSERT INTO temp.merge_latest (device_key, problem_key, sweep_id) SELECT device_key, problem_key, id FROM ("
      " SELECT s.device_key AS device_key, p.problem_key AS problem_key, s.id AS id, row_number() OVER ("
      "  PARTITION BY s.device_key, p.problem_key ORDER BY " + std::string(kLatestSweepFirst) + ") AS rank"
      " FROM main.sweep_problems AS p JOIN main.sweeps AS s ON s.id = p.sweep_id WHERE p.status = 'done')"
      " WHERE rank = 1");
  const auto winner_columns = without(columns.at("winners"), {"sweep_id"});
  counts.winners = run(
      "INSERT INTO main.winners (sweep_id, " + joined(winner_columns) + ") SELECT coalesce(m.id, 0), " +
      prefixed("w.", winner_columns) +
      " FROM merged_input.winners AS w LEFT JOIN temp.merge_sweep_map AS m ON m.input_id = w.sweep_id"
      " LEFT JOIN temp.merge_latest AS l ON l.device_key = w.device_key AND l.problem_key = w.problem_key"
      " WHERE l.sweep_id IS NULL OR l.sweep_id = coalesce(m.id, 0)"
      " ON CONFLICT (device_key, problem_key) DO UPDATE SET sweep_id = excluded.sweep_id, " +
      take_excluded(without(winner_columns, {"device_key", "problem_key"})) +
      " WHERE CASE WHEN EXISTS (SELECT 1 FROM temp.merge_latest AS k WHERE k.device_key = excluded.device_key"
      " AND k.problem_key = excluded.problem_key) THEN winners.sweep_id IS NOT excluded.sweep_id"
      " ELSE excluded.measured_at > winners.measured_at END");
  transaction.commit();
  return counts;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[sizeof "2026-11-30T19:18:14Z"];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace shapetune
