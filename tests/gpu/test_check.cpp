// `shapetune check` on a GPU: a fresh sweep passes; a planted regression (the stored median made
// ten times faster) and a planted accuracy violation (a tolerance no f16 kernel can meet) fail
// with exit code 1 and say which.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <fstream>
#include <sstream>

#include "cli/cli.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

constexpr const char* kMatrix = R"(name: check
matrices:
  - primitive: softmax
    dtypes: [f32, f16]
    axes:
      rows: [64, 3]
      cols: [1000, 4097]
    zip: [rows, cols]
)";

struct CliResult {
  int code;
  std::string out, err;
};

CliResult run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

using test_support::contains;

// One SQL statement on the database, as a user's tampering (or a stale file) would change it.
void execute(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  char* message = nullptr;
  const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &message);
  const std::string text = message ? message : "";
  sqlite3_free(message);
  const int changed = sqlite3_changes(raw);
  sqlite3_close(raw);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << text;
  ASSERT_EQ(changed, 1) << sql;
}

TEST(CheckOnGpu, PassesAfterASweepAndCatchesPlantedFailures) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("check.yaml"), db = dir.file("check.db");
  std::ofstream(yaml) << kMatrix;
  const CliResult sweep =
      run({"sweep", yaml, "--db", db, "--time-cap", "0.05", "--variant", "cudnn,vec_online", "--seed", "3"});
  ASSERT_EQ(sweep.code, 0) << sweep.out << sweep.err;

  // Fresh winners: accurate, and their times within the limit (or faster).
  const CliResult fresh = run({"check", yaml, "--db", db, "--seed", "11"});
  EXPECT_EQ(fresh.code, 0) << fresh.out << fresh.err;
  EXPECT_TRUE(contains(fresh.out, "PASS: 4 winners checked")) << fresh.out;
  EXPECT_TRUE(contains(fresh.out, "softmax/f16/rows=3,cols=4097")) << fresh.out;
  const CliResult all = run({"check", "--db", db});  // every winner of this device
  EXPECT_EQ(all.code, 0) << all.out << all.err;

  // A problem of the matrix that was never swept: listed, a failure only with --strict.
  const std::string wider = dir.file("wider.yaml");
  std::ofstream(wider) << kMatrix << "  - primitive: softmax\n    dtypes: [f32]\n    axes:\n      rows: [5]\n      cols: [77]\n";
  const CliResult untuned = run({"check", wider, "--db", db});
  EXPECT_EQ(untuned.code, 0) << untuned.out << untuned.err;
  EXPECT_TRUE(contains(untuned.out, "not tuned")) << untuned.out;
  EXPECT_EQ(run({"check", wider, "--db", db, "--strict"}).code, 1);

  // Planted regression: the stored median ten times faster than the kernel can be.
  execute(db, "UPDATE winners SET median_us = median_us / 10 WHERE problem_key = 'softmax/f32/rows=64,cols=1000'");
  const CliResult slow = run({"check", yaml, "--db", db});
  EXPECT_EQ(slow.code, 1) << slow.out << slow.err;
  EXPECT_TRUE(contains(slow.out, "REGRESSION")) << slow.out;
  EXPECT_TRUE(contains(slow.out, "FAIL (1 regression)")) << slow.out;
  execute(db, "UPDATE winners SET median_us = median_us * 10 WHERE problem_key = 'softmax/f32/rows=64,cols=1000'");

  // Planted accuracy violation: no f16 output matches the float64 reference exactly.
  execute(db, "UPDATE winners SET atol = 0, rtol = 0 WHERE problem_key = 'softmax/f16/rows=64,cols=1000'");
  const CliResult wrong = run({"check", yaml, "--db", db});
  EXPECT_EQ(wrong.code, 1) << wrong.out << wrong.err;
  EXPECT_TRUE(contains(wrong.out, "VIOLATION")) << wrong.out;
  EXPECT_TRUE(contains(wrong.out, "FAIL (1 accuracy violation)")) << wrong.out;
}

}  // namespace
}  // namespace shapetune
