// Worker isolation on a GPU: a sweep over the test-only fault_injection primitive, whose
// variants write out of bounds, trap, spin forever and abort on the host, finishes with the
// working copy as every winner, each fault stored as crashed or timeout with what happened, and
// the worker restarted once per fault. Runs the shapetune binary with SHAPETUNE_FAULT_VARIANTS=1,
// as a user's process would, so this process's own catalogue stays as it is.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "db/store.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

// shapetune sits beside the tests' folder, in a build tree as in a carried bundle.
std::string shapetune_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "shapetune").string();
}

struct CliRun {
  int code = -1;
  std::string output;
};

CliRun run_with_faults(const test_support::TempDir& dir, const std::string& args) {
  const std::string log = dir.file("run.log");
  const std::string command = "SHAPETUNE_FAULT_VARIANTS=1 '" + shapetune_binary() + "' " + args + " >'" + log + "' 2>&1";
  const int status = std::system(command.c_str());
  CliRun run;
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = test_support::read_file(log);
  return run;
}

constexpr const char* kFaults = R"(name: faults
matrices:
  - primitive: fault_injection
    dtypes: [f32]
    axes:
      n: [1, 4097]
)";

TEST(FaultIsolation, ASweepOutlivesFaultingAndHangingVariantsAndKeepsTheRightWinners) {
  SHAPETUNE_REQUIRE_GPU();
  test_support::TempDir dir;
  const std::string yaml = dir.file("faults.yaml"), db = dir.file("faults.db");
  std::ofstream(yaml) << kFaults;

  const CliRun sweep = run_with_faults(dir, "sweep '" + yaml + "' --db '" + db + "' --candidate-timeout 5 --time-cap 0.05 --seed 3");
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  // Four faults in each of the two problems, each followed by a fresh worker.
  EXPECT_CONTAINS(sweep.output, "GPU worker restarted 8 times");
  EXPECT_CONTAINS(sweep.output, "4 crashed or hung");

  auto store = Store::open(db, OpenMode::read_only);
  const auto winners = store->winners();
  ASSERT_EQ(winners.size(), 2u) << sweep.output;
  for (const auto& w : winners) {
    EXPECT_EQ(w.variant, "copy") << w.problem.key();
    const auto candidates = store->candidates(w.sweep_id, w.problem.key());
    std::map<std::string, CandidateRecord> by_variant;
    for (const auto& c : candidates) by_variant[c.variant] = c;
    ASSERT_EQ(by_variant.size(), 5u) << w.problem.key();
    EXPECT_EQ(by_variant["copy"].status, CandidateStatus::ok);
    EXPECT_EQ(by_variant["out_of_bounds"].status, CandidateStatus::crashed);
    EXPECT_CONTAINS(by_variant["out_of_bounds"].reason, "illegal memory access");
    EXPECT_EQ(by_variant["trap"].status, CandidateStatus::crashed);
    EXPECT_CONTAINS(by_variant["trap"].reason, "cudaErrorLaunchFailure");
    EXPECT_EQ(by_variant["spin"].status, CandidateStatus::timeout);
    EXPECT_CONTAINS(by_variant["spin"].reason, "no reply within 5 s");
    EXPECT_EQ(by_variant["host_abort"].status, CandidateStatus::crashed);
    EXPECT_CONTAINS(by_variant["host_abort"].reason, "SIGABRT");
    EXPECT_EQ(store->faulted_candidates(w.sweep_id, w.problem.key()).size(), 4u);
  }

  // What a user sees afterwards: the count per problem in winners and check, and a check that
  // passes (the winners are the working copy).
  const CliRun listed = run_with_faults(dir, "winners --db '" + db + "'");
  ASSERT_EQ(listed.code, 0) << listed.output;
  EXPECT_CONTAINS(listed.output, "crashed");
  const CliRun checked = run_with_faults(dir, "check --db '" + db + "' --candidate-timeout 5");
  EXPECT_EQ(checked.code, 0) << checked.output;
  EXPECT_CONTAINS(checked.output, "crashed in sweep");
  EXPECT_CONTAINS(checked.output, "PASS");
}

}  // namespace
}  // namespace shapetune
