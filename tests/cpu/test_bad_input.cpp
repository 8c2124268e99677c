// Bad input to the command line, as a new user tried it (issue 24's findings): non-finite
// numbers, a device key that names no device, an export over its own database, and output that
// cannot be written. Each is a clear error with a nonzero exit code, and nothing is damaged.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>

#include "cli/cli.hpp"
#include "core/sha256.hpp"
#include "db/store.hpp"
#include "harness/device.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

using test_support::contains;

using Result = test_support::CliResult;
constexpr auto run = &test_support::run_shapetune;

const char* kKey = "NVIDIA H200|sm_90|132SM|140GiB";

// A database with one device and one winner.
std::string one_winner_db(const test_support::TempDir& dir) {
  const std::string db = dir.file("w.db");
  auto store = Store::open(db);
  store->upsert_device(DeviceFingerprint{"NVIDIA H200", 90, 132, 62914560, std::int64_t{140} << 30, "580.0", "13.0",
                                         "13.1.0", "9.14.0"});
  WinnerRecord w;
  w.device_key = kKey;
  w.problem = Problem{"softmax", DType::f32, Shape({{"rows", 4096}, {"cols", 4096}})};
  w.variant = "vec_online";
  w.config = Config({{"threads_per_row", 128}, {"block_size", 256}});
  w.timing.median_us = 40;
  store->store_winner(w);
  return db;
}

std::string hash_of(const std::string& path) { return sha256_hex(test_support::read_file(path)); }

TEST(BadInput, NonFiniteNumbersAreRefused) {
  for (const char* value : {"nan", "NaN", "inf", "-inf"}) {
    const Result r = run({"sweep", (test_support::source_dir() / "shapes" / "quick.yaml").string(), "--dry-run",
                          "--budget", value});
    EXPECT_EQ(r.code, 2) << value;
    EXPECT_TRUE(contains(r.err, "--budget expects a finite number")) << r.err;
  }
  const Result threshold = run({"check", "--db", "x.db", "--threshold", "nan"});
  EXPECT_EQ(threshold.code, 2);
  EXPECT_TRUE(contains(threshold.err, "finite")) << threshold.err;
}

TEST(BadInput, ADeviceKeyThatNamesNoDeviceIsAnError) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"winners", "--db", db, "--device-key", "WRONG"},
        std::vector<std::string>{"export", "--db", db, "--format", "json", "--device-key", "WRONG"}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_TRUE(contains(r.err, "no device with key 'WRONG'")) << r.err;
    EXPECT_TRUE(contains(r.err, kKey)) << "names the devices there: " << r.err;
    EXPECT_EQ(r.out, "") << args[0];
  }
  EXPECT_EQ(run({"winners", "--db", db, "--device-key", kKey}).code, 0);
}

TEST(BadInput, ExportNeverWritesOverItsOwnDatabase) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  const std::string before = hash_of(db);
  for (const std::string& target : {db, db + "-wal", dir.file("./w.db")}) {
    const Result r = run({"export", "--db", db, "--format", "json", "-o", target});
    EXPECT_EQ(r.code, 2) << target;
    EXPECT_TRUE(contains(r.err, "is the database")) << r.err;
  }
  EXPECT_EQ(hash_of(db), before);
  EXPECT_EQ(run({"winners", "--db", db}).code, 0);
}

// A stream whose every write fails, as stdout on a full disk or once closed.
class FailingBuffer : public std::streambuf {
 protected:
  int_type overflow(int_type) override { return traits_type::eof(); }
  std::streamsize xsputn(const char*, std::streamsize) override { return 0; }
};

TEST(BadInput, OutputThatCannotBeWrittenIsAFailure) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"winners", "--db", db},
                                              std::vector<std::string>{"export", "--db", db, "--format", "csv"},
                                              std::vector<std::string>{"list"}}) {
    FailingBuffer failing;
    std::ostream out(&failing);
    std::ostringstream err;
    EXPECT_NE(run_cli(args, out, err), 0) << args[0];
    EXPECT_TRUE(contains(err.str(), "cannot write to standard output")) << err.str();
  }
}

// Databases damaged in place (issue 24 found 75 of 420 page-corrupted copies exported with
// garbled names or a text read as 0, exit 0). Each kind of damage is now an error.
class DamagedDatabase : public ::testing::Test {
 protected:
  test_support::TempDir dir;
  std::string db = one_winner_db(dir);

  std::string bytes() const { return test_support::read_file(db); }
  void write(const std::string& content) const {
    std::ofstream file(db, std::ios::binary | std::ios::trunc);
    file << content;
  }
  Result export_json() const { return run({"export", "--db", db, "--format", "json"}); }
};

TEST_F(DamagedDatabase, AGarbledVariantNameIsRefused) {
  std::string content = bytes();
  const auto at = content.find("vec_online");
  ASSERT_NE(at, std::string::npos);
  content[at + 3] = 'X';  // vecXonline: same length, the page still well-formed
  write(content);
  const Result r = export_json();
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.err, "variant 'vecXonline' of softmax")) << r.err;
  EXPECT_EQ(r.out, "");
  const Result w = run({"winners", "--db", db});
  EXPECT_TRUE(contains(w.out, "(unknown here)")) << w.out;
  EXPECT_TRUE(contains(w.err, "warning: 1 winner(s) name what this build's catalogue does not have")) << w.err;
}

TEST_F(DamagedDatabase, TextWhereANumberBelongsIsRefused) {
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "UPDATE winners SET median_us = 'forty'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
  }
  const Result r = export_json();
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "is corrupt: column median_us holds text where a number belongs")) << r.err;
}

TEST_F(DamagedDatabase, ABrokenPageIsRefusedAtOpen) {
  std::string content = bytes();
  ASSERT_GT(content.size(), 3u * 4096);
  for (std::size_t i = 4096 + 8; i < 2 * 4096; ++i) content[i] = static_cast<char>(0xA5);  // page 2's b-tree
  write(content);
  const Result r = export_json();
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.err, "is corrupt")) << r.err;
}

// Read-only verbs leave a database as they found it: the same bytes, and no -wal or -shm files
// beside it (a read-only connection to a WAL database used to leave both behind).
TEST(ReadOnlyVerbs, NeverChangeTheDatabaseOrLeaveFilesBeside) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);  // Store::open left it in WAL mode, checkpointed
  namespace fs = std::filesystem;
  ASSERT_FALSE(fs::exists(db + "-wal"));
  const std::string before = hash_of(db);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"winners", "--db", db}, std::vector<std::string>{"export", "--db", db, "--format", "json"},
        std::vector<std::string>{"export", "--db", db, "--format", "header"},
        std::vector<std::string>{"report", "--db", db, "-o", dir.file("report")}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 0) << args[0] << ": " << r.err;
    EXPECT_EQ(hash_of(db), before) << args[0] << " changed the database";
    EXPECT_FALSE(fs::exists(db + "-wal")) << args[0] << " left a -wal file";
    EXPECT_FALSE(fs::exists(db + "-shm")) << args[0] << " left a -shm file";
  }
}

// SQLite opens a file in WAL mode when the header's write version (byte 19) is 2, whatever the
// read version (byte 18) says; tests/fuzz found that a 1 or 3 there made `winners` leave -wal and
// -shm files behind.
TEST(ReadOnlyVerbs, AWalHeaderWithAnotherReadVersionLeavesNoFilesBeside) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  {
    std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(18);
    file.put('\x01');
  }
  const std::string before = hash_of(db);
  const Result r = run({"winners", "--db", db});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(hash_of(db), before);
  EXPECT_FALSE(std::filesystem::exists(db + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(db + "-shm"));
}

TEST(ReadOnlyVerbs, ReadAWalDatabaseInAReadOnlyDirectory) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories anyway";
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  ASSERT_EQ(chmod(dir.path().c_str(), 0555), 0);
  const Result r = run({"winners", "--db", db});
  chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "vec_online")) << r.out;
}

// A database another writer holds is waited for (the busy timeout), then refused with a clear
// message; nothing is damaged.
TEST(ReadOnlyVerbs, ALockedDatabaseIsWaitedForThenRefusedClearly) {
  test_support::TempDir dir;
  const std::string db = one_winner_db(dir);
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::string message;
  try {
    auto store = Store::open(db);
    store->upsert_device(DeviceFingerprint{"Other", 90, 1, 1, 1, "1", "1", "1", "1"});
  } catch (const StoreError& e) {
    message = e.what();
  }
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_TRUE(contains(message, "stayed locked by another process")) << message;
  EXPECT_EQ(run({"winners", "--db", db}).code, 0);
}

// shapetune-bench: a filter that selects nothing (or is no regex) is an error, and so is having no
// device to measure on, as for every shapetune verb (exit 2, not 0 or 1).
struct Exit {
  int code;
  std::string output;
};

Exit run_bench(const std::string& args) {
  test_support::TempDir dir;
  const std::string log = dir.file("log");
  const std::string command = std::string(SHAPETUNE_BENCH_BINARY) + " " +
                              (test_support::source_dir() / "shapes" / "quick.yaml").string() + " " + args + " >" + log +
                              " 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, test_support::read_file(log)};
}

TEST(BadInput, BenchFilterThatSelectsNothingIsAnError) {
  for (const char* filter : {"'--benchmark_filter=^no such case$'", "'--benchmark_filter=(unclosed'"}) {
    const Exit e = run_bench(filter);
    EXPECT_EQ(e.code, 2) << filter << "\n" << e.output;
    EXPECT_TRUE(contains(e.output, "no case ran")) << e.output;
  }
}

TEST(BadInput, BenchWithoutADeviceExitsTwo) {
  if (!cuda_unavailable_reason()) GTEST_SKIP() << "a CUDA device is usable here";
  const Exit e = run_bench("'--benchmark_filter=^softmax/f32/rows=1024,cols=1000/cudnn'");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "no usable CUDA device")) << e.output;
}

}  // namespace
}  // namespace shapetune
