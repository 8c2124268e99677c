// The pieces of worker isolation that need no GPU: the wire encoding, the supervised child
// process (echo, crash, abort, hang, exit), the watchdog's limit, and a GPU worker started
// where no device is usable. tests/gpu/test_fault_isolation.cpp sweeps faulting kernels.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/wire.hpp"
#include "harness/child_process.hpp"
#include "harness/gpu_worker.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

using Kind = ChildProcess::Reply::Kind;
using Clock = std::chrono::steady_clock;

TEST(Wire, RoundTripsEveryKindAndRefusesTruncatedOrOverlongMessages) {
  wire::Writer w;
  w.u8(7).boolean(true).i64(-42).f64(0.125).str("").str(std::string("a\0b", 3)).i64(std::int64_t{1} << 40);
  const std::string bytes = w.bytes();
  wire::Reader r(bytes);
  EXPECT_EQ(r.u8(), 7);
  EXPECT_TRUE(r.boolean());
  EXPECT_EQ(r.i64(), -42);
  EXPECT_EQ(r.f64(), 0.125);
  EXPECT_EQ(r.str(), "");
  EXPECT_EQ(r.str(), std::string("a\0b", 3));
  EXPECT_THROW(r.i32(), wire::WireError);  // 2^40 does not fit an int
  EXPECT_NO_THROW(r.expect_done());
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    wire::Reader partial(std::string_view(bytes).substr(0, cut));
    auto read_all = [&] {
      partial.u8(), partial.boolean(), partial.i64(), partial.f64(), partial.str(), partial.str(), partial.i64();
    };
    EXPECT_THROW(read_all(), wire::WireError) << "cut at " << cut;
  }
  const std::string with_extra = bytes + "x";
  wire::Reader longer(with_extra);
  longer.u8(), longer.boolean(), longer.i64(), longer.f64(), longer.str(), longer.str(), longer.i64();
  EXPECT_THROW(longer.expect_done(), wire::WireError);
  wire::Writer negative;
  negative.i64(-5);
  wire::Reader bad_length(negative.bytes());
  EXPECT_THROW(bad_length.str(), wire::WireError);
  wire::Writer two;
  two.u8(2);
  wire::Reader bad_bool(two.bytes());
  EXPECT_THROW(bad_bool.boolean(), wire::WireError);
}

int echo(MessageChannel& channel) {
  while (auto m = channel.read())
    if (!channel.write("echo:" + *m)) return 1;
  return 0;
}

bool reaped(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD; }

TEST(ChildProcess, AnswersRequestsInOrderAndExitsWhenClosed) {
  pid_t pid;
  {
    auto child = ChildProcess::fork_running(echo);
    pid = child->pid();
    for (int i = 0; i < 100; ++i) {
      const auto reply = child->call("m" + std::to_string(i), 10);
      ASSERT_EQ(reply.kind, Kind::ok) << reply.death;
      EXPECT_EQ(reply.message, "echo:m" + std::to_string(i));
    }
    const std::string big(3 << 20, 'x');  // larger than any pipe buffer
    const auto reply = child->call(big, 10);
    ASSERT_EQ(reply.kind, Kind::ok);
    EXPECT_EQ(reply.message.size(), big.size() + 5);
    EXPECT_TRUE(child->alive());
  }
  EXPECT_TRUE(reaped(pid)) << "the child was left behind";
}

TEST(ChildProcess, ASegfaultIsADeathNamedBySignalWithTheChildsLastWords) {
  auto child = ChildProcess::fork_running([](MessageChannel& channel) {
    channel.read();
    std::fprintf(stderr, "about to fault\n");
    std::fflush(stderr);
    ::signal(SIGSEGV, SIG_DFL);  // a sanitizer's own handler would turn the signal into an exit
    ::raise(SIGSEGV);
    return 0;
  });
  const pid_t pid = child->pid();
  const auto reply = child->call("go", 10);
  EXPECT_EQ(reply.kind, Kind::died);
  EXPECT_CONTAINS(reply.death, "killed by signal 11");
  EXPECT_CONTAINS(reply.death, "SIGSEGV");
  EXPECT_EQ(child->last_output_line(), "about to fault");
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(reaped(pid));
  const auto again = child->call("go", 10);  // a dead child stays dead, and says why
  EXPECT_EQ(again.kind, Kind::died);
  EXPECT_CONTAINS(again.death, "signal 11");
}

TEST(ChildProcess, AnAbortAndAnExitAreDeathsToo) {
  auto aborting = ChildProcess::fork_running([](MessageChannel& channel) {
    channel.read();
    std::abort();
    return 0;
  });
  const auto aborted = aborting->call("go", 10);
  EXPECT_EQ(aborted.kind, Kind::died);
  EXPECT_CONTAINS(aborted.death, "SIGABRT");

  auto exiting = ChildProcess::fork_running([](MessageChannel& channel) {
    channel.read();
    return 3;
  });
  const auto exited = exiting->call("go", 10);
  EXPECT_EQ(exited.kind, Kind::died);
  EXPECT_EQ(exited.death, "exited with status 3");
}

TEST(ChildProcess, AHangIsKilledAtTheLimitAndReaped) {
  auto child = ChildProcess::fork_running([](MessageChannel& channel) {
    channel.read();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    return 0;
  });
  const pid_t pid = child->pid();
  const auto t0 = Clock::now();
  const auto reply = child->call("go", 0.5);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(reply.kind, Kind::timed_out);
  EXPECT_CONTAINS(reply.death, "no reply within 0.5 s");
  EXPECT_GE(waited, 0.45);
  EXPECT_LT(waited, 5.0);
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(reaped(pid));
}

TEST(ChildProcess, IgnoresCtrlCSoTheCandidateInFlightFinishes) {
  auto child = ChildProcess::fork_running([](MessageChannel& channel) {
    while (auto m = channel.read()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      channel.write(*m);
    }
    return 0;
  });
  std::thread interrupt([pid = child->pid()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(pid, SIGINT);
  });
  const auto reply = child->call("still here", 10);
  interrupt.join();
  EXPECT_EQ(reply.kind, Kind::ok) << reply.death;
  EXPECT_EQ(reply.message, "still here");
}

TEST(ChildProcess, ExecSelfRefusesARoleMainDoesNotServe) {
  EXPECT_THROW(ChildProcess::exec_self("no-such-role"), std::logic_error);
}

TEST(CandidateTimeLimit, HasAFloorGrowsWithTheWorkAndTheBaselineAndYieldsToTheOption) {
  MeasureOptions o;
  const double floor = candidate_time_limit_s(o, Cost{1e3, 0}, 0);
  EXPECT_GE(floor, kCandidateTimeoutFloorS);
  EXPECT_LT(floor, kCandidateTimeoutFloorS + 2 * o.stop.time_cap_s + 1);
  // A 1 GB problem: 10 ms at 100 GB/s, 20x for each of min_samples + warm-up + 8 launches, and
  // 1 s of host work.
  const double big = candidate_time_limit_s(o, Cost{1e9, 0}, 0);
  EXPECT_NEAR(big, kCandidateTimeoutFloorS + 2 * o.stop.time_cap_s + 20 * 0.01 * (o.stop.min_samples + 2 + 8) + 1, 1e-9);
  // A baseline slower than the modest model raises the limit.
  EXPECT_GT(candidate_time_limit_s(o, Cost{1e9, 0}, 1e6), big + 100);
  o.candidate_timeout_s = 3;
  EXPECT_EQ(candidate_time_limit_s(o, Cost{1e12, 1e15}, 1e9), 3);
}

TEST(GpuWorker, WithoutAUsableDeviceStartSaysWhyAndLeavesNoProcess) {
  if (!cuda_unavailable_reason()) GTEST_SKIP() << "a CUDA device is usable here; tests/gpu starts workers on it";
  GpuWorker worker(0, MeasureOptions{});
  const auto why = worker.start();
  ASSERT_TRUE(why.has_value()) << "the worker started without a device";
  EXPECT_FALSE(why->empty());
  EXPECT_EQ(worker.restarts(), 0);
  // Nothing left running: every child of this process has been reaped.
  EXPECT_TRUE(::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD);
}

}  // namespace
}  // namespace shapetune
