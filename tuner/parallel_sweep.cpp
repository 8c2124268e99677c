#include "tuner/parallel_sweep.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>

#include "harness/child_process.hpp"
#include "tuner/merge.hpp"
#include "tuner/progress_events.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_parallel_sigint(int) { g_interrupted = true; }

// One listed GPU and the worker process it runs now, if any.
struct Slot {
  int device = 0;
  std::string label;  // "gpu1", or "gpu0.2" for a second worker on GPU 0
  pid_t pid = -1;
  int output = -1;    // the worker's stdout and stderr
  std::string partial_line;
  int events = -1;    // the worker's progress events (its fd 3), read without blocking
  std::string partial_events;
  std::deque<std::string> tail;  // its last lines, for the message if it dies
  int shard = 0;
  Clock::time_point started;
  int failures_in_a_row = 0;
  bool retired = false;
};

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : path.string();
}

std::string part_path(const std::string& dir, int shard, int count) {
  return dir + "/shard-" + std::to_string(shard) + "-of-" + std::to_string(count) + ".db";
}

// The worker's fd for its --json-progress events.
constexpr int kEventsFd = 3;

// Starts `argv` with its stdout and stderr on one pipe and fd kEventsFd on another; the child dies
// with this process. The events pipe is read without blocking: the worker's own GPU worker
// process inherits its end and may hold it open a moment after the worker has exited.
pid_t spawn(const std::vector<std::string>& argv, int* output, int* events) {
  int fds[2], event_fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  if (pipe2(event_fds, O_CLOEXEC) != 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (const int fd : {fds[0], fds[1], event_fds[0], event_fds[1]}) close(fd);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    // After stdout and stderr, which the events pipe may have been given fd kEventsFd before.
    if (event_fds[1] == kEventsFd) fcntl(kEventsFd, F_SETFD, 0);
    else dup2(event_fds[1], kEventsFd);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    const std::string message = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }
  close(fds[1]);
  close(event_fds[1]);
  fcntl(event_fds[0], F_SETFL, O_NONBLOCK);
  *output = fds[0];
  *events = event_fds[0];
  return pid;
}

// What one shard's workers have reported of its expected work, in the cost model's seconds. A
// shard run again resumes what it stored, which its new worker leaves out of its total: what the
// earlier attempts did is carried in base_s.
struct ShardProgress {
  double base_s = 0;
  std::optional<double> total_s, done_s;
  std::int64_t problems_done = 0;
  std::int64_t without_winner = 0, without_baseline = 0;
};

class ParallelSweep {
 public:
  ParallelSweep(const ParallelSweepOptions& o, std::ostream& out, std::ostream& err) : o_(o), out_(out), err_(err) {}
  int run();

 private:
  void launch(Slot&, int shard);
  void forward(Slot&, bool at_end);
  void read_events(Slot&);
  void handle_event(int shard, const std::string& line);
  void finished(Slot&, int status);
  ProgressSnapshot snapshot() const;
  void show_progress(bool force = false);
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  int running() const {
    return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pid > 0; }));
  }

  const ParallelSweepOptions& o_;
  std::ostream& out_;
  std::ostream& err_;
  std::string executable_, parts_dir_;
  int count_ = 0;
  std::vector<Slot> slots_;
  std::deque<int> queue_;
  std::vector<int> attempts_;
  std::vector<bool> done_;
  std::vector<int> given_up_;
  bool interrupted_ = false;
  int done_count_ = 0;
  Clock::time_point start_;
  std::vector<ShardProgress> shard_progress_;
  std::optional<ProgressLine> line_;
  std::ofstream json_file_;
  std::optional<JsonProgress> json_;
};

void ParallelSweep::launch(Slot& slot, int shard) {
  std::vector<std::string> argv{executable_, "sweep", o_.shape_file, "--shard",
                                std::to_string(shard) + "/" + std::to_string(count_), "--device",
                                std::to_string(slot.device), "--db", part_path(parts_dir_, shard, count_)};
  argv.insert(argv.end(), o_.sweep_args.begin(), o_.sweep_args.end());
  argv.push_back("--no-progress");
  argv.push_back("--json-progress=/dev/fd/" + std::to_string(kEventsFd));
  ++attempts_[static_cast<std::size_t>(shard)];
  ShardProgress& progress = shard_progress_[static_cast<std::size_t>(shard)];
  progress.base_s += progress.done_s.value_or(0);
  progress.total_s.reset();
  progress.done_s.reset();
  slot.pid = spawn(argv, &slot.output, &slot.events);
  slot.shard = shard;
  slot.started = Clock::now();
  slot.tail.clear();
  slot.partial_line.clear();
  slot.partial_events.clear();
  if (slot.pid < 0) {
    err_ << "[" << slot.label << "] cannot start a worker: " << std::strerror(errno) << "\n";
    slot.pid = -1;
    finished(slot, -1);
    return;
  }
  line_->clear();
  out_ << "[" << slot.label << "] shard " << shard << "/" << count_ << " started"
       << (attempts_[static_cast<std::size_t>(shard)] > 1 ? " again (resuming what it stored)" : "") << std::endl;
}

// Passes the worker's complete lines on, prefixed with its slot; at the end, the rest too.
void ParallelSweep::forward(Slot& slot, bool at_end) {
  line_->clear();
  std::size_t start = 0;
  for (std::size_t nl; (nl = slot.partial_line.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = slot.partial_line.substr(start, nl - start);
    out_ << "[" << slot.label << "] " << line << "\n";
    slot.tail.push_back(line);
    if (slot.tail.size() > 5) slot.tail.pop_front();
  }
  slot.partial_line.erase(0, start);
  if (at_end && !slot.partial_line.empty()) {
    out_ << "[" << slot.label << "] " << slot.partial_line << "\n";
    slot.tail.push_back(slot.partial_line);
    slot.partial_line.clear();
  }
  out_.flush();
}

// Takes in what the worker's events pipe holds now (a line still being written waits); closes it
// at its end, so that poll() does not keep reporting it.
void ParallelSweep::read_events(Slot& slot) {
  if (slot.events < 0) return;
  char buffer[65536];
  ssize_t n;
  while ((n = read(slot.events, buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) slot.partial_events.append(buffer, static_cast<std::size_t>(n));
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    close(slot.events);
    slot.events = -1;
  }
  std::size_t start = 0;
  for (std::size_t nl; (nl = slot.partial_events.find('\n', start)) != std::string::npos; start = nl + 1)
    handle_event(slot.shard, slot.partial_events.substr(start, nl - start));
  slot.partial_events.erase(0, start);
}

// A worker's "progress" becomes its shard's part of the whole sweep's; its other events go on to
// --json-progress as they are.
void ParallelSweep::handle_event(int shard, const std::string& line) {
  const auto event = read_progress_event(line);
  if (!event) return;
  ShardProgress& progress = shard_progress_[static_cast<std::size_t>(shard)];
  if (event->event == "progress" || event->event == "sweep_start") {
    if (event->expected_s) progress.total_s = *event->expected_s;
    if (event->done_s) progress.done_s = *event->done_s;
    if (event->problems_done) progress.problems_done = *event->problems_done;
  } else if (event->event == "sweep_end") {
    if (event->problems_done) progress.problems_done = *event->problems_done;
    progress.without_winner = event->without_winner.value_or(0);
    progress.without_baseline = event->without_baseline.value_or(0);
  }
  if (event->event != "progress" && json_) json_->write(line);
  show_progress();
}

// The whole sweep in the cost model's seconds: a shard that has reported counts what it said
// (all of it once it is done), one that has not the plan's expected time for it, or failing a
// plan the mean of those that have.
ProgressSnapshot ParallelSweep::snapshot() const {
  std::vector<double> reported;
  for (int k = 1; k <= count_; ++k)
    if (const auto& p = shard_progress_[static_cast<std::size_t>(k)]; p.total_s) reported.push_back(p.base_s + *p.total_s);
  const double mean = reported.empty() ? 0 : std::accumulate(reported.begin(), reported.end(), 0.0) / reported.size();
  const bool planned = o_.shard_expected_s.size() == static_cast<std::size_t>(count_);
  ProgressSnapshot s;
  s.problems = o_.problem_count;
  s.elapsed_s = seconds();
  for (int k = 1; k <= count_; ++k) {
    const ShardProgress& p = shard_progress_[static_cast<std::size_t>(k)];
    const double total = p.total_s ? p.base_s + *p.total_s : planned ? o_.shard_expected_s[static_cast<std::size_t>(k - 1)] : mean;
    s.expected_total_s += total;
    s.expected_done_s += done_[static_cast<std::size_t>(k)] ? total : p.base_s + p.done_s.value_or(0);
    s.problems_done += static_cast<std::size_t>(p.problems_done);
  }
  s.current = std::to_string(running()) + (running() == 1 ? " worker" : " workers") + " running, " +
              std::to_string(done_count_) + "/" + std::to_string(count_) + " shards done";
  return s;
}

void ParallelSweep::show_progress(bool force) {
  const ProgressSnapshot s = snapshot();
  line_->update(s, s.elapsed_s);
  if (json_) json_->progress(s, s.elapsed_s, force);
}

// status: a waitpid() status, or -1 when the worker could not be started.
void ParallelSweep::finished(Slot& slot, int status) {
  const int shard = slot.shard;
  const double seconds = std::chrono::duration<double>(Clock::now() - slot.started).count();
  slot.pid = -1;
  if (slot.output >= 0) close(slot.output);
  slot.output = -1;
  read_events(slot);
  if (slot.events >= 0) close(slot.events);  // a grandchild may still hold it; nothing more is wanted
  slot.events = -1;
  line_->clear();
  const bool ok = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const bool interrupted = status >= 0 && ((WIFEXITED(status) && WEXITSTATUS(status) == 130) ||
                                           (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT));
  if (ok) {
    done_[static_cast<std::size_t>(shard)] = true;
    slot.failures_in_a_row = 0;
    ++done_count_;
    const int left = static_cast<int>(queue_.size()) + running();
    std::ostringstream line;
    line << "[" << slot.label << "] shard " << shard << "/" << count_ << " done in " << format_duration(seconds) << "; "
         << done_count_ << " of " << count_ << " shards done";
    // The estimate of the progress line, which counts the running shards' finished work too.
    const ProgressSnapshot s = snapshot();
    if (left > 0 && s.expected_total_s > 0) line << ", about " << format_duration(s.seconds_left()) << " left";
    out_ << line.str() << std::endl;
    show_progress(true);
    return;
  }
  if (interrupted || g_interrupted) {
    interrupted_ = true;
    out_ << "[" << slot.label << "] shard " << shard << "/" << count_ << " interrupted" << std::endl;
    return;
  }
  std::string how = status < 0 ? "could not be started" : describe_wait_status(status);
  err_ << "[" << slot.label << "] the worker of shard " << shard << "/" << count_ << " " << how << " after "
       << format_duration(seconds);
  if (!slot.tail.empty()) err_ << "; its last line: " << slot.tail.back();
  err_ << "\n";
  if (attempts_[static_cast<std::size_t>(shard)] < o_.max_attempts) {
    queue_.push_front(shard);
    err_ << "  shard " << shard << " goes back to the queue (attempt " << attempts_[static_cast<std::size_t>(shard)] + 1
         << " of " << o_.max_attempts << " next)\n";
  } else {
    given_up_.push_back(shard);
    err_ << "  shard " << shard << " failed " << o_.max_attempts << " times: given up\n";
  }
  if (++slot.failures_in_a_row >= 2) {
    slot.retired = true;
    err_ << "  " << slot.label << " takes no more shards: two workers in a row died on it\n";
  }
}

int ParallelSweep::run() {
  start_ = Clock::now();
  executable_ = o_.executable.empty() ? self_executable() : o_.executable;
  if (executable_.empty()) {
    err_ << "error: cannot find this program's own path (/proc/self/exe) to start the workers\n";
    return 2;
  }
  const int workers = static_cast<int>(o_.devices.size());
  count_ = o_.shard_count > 0 ? o_.shard_count : 4 * workers;
  count_ = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(count_), o_.problem_count)));
  parts_dir_ = o_.db_path + ".parts";
  std::error_code error;
  std::filesystem::create_directories(parts_dir_, error);
  if (error) {
    err_ << "error: cannot create " << parts_dir_ << " for the workers' databases: " << error.message() << "\n";
    return 2;
  }
  attempts_.assign(static_cast<std::size_t>(count_) + 1, 0);
  done_.assign(static_cast<std::size_t>(count_) + 1, false);
  for (int k = 1; k <= count_; ++k) queue_.push_back(k);
  for (int i = 0; i < workers; ++i) {
    Slot slot;
    slot.device = o_.devices[static_cast<std::size_t>(i)];
    const auto same = std::count(o_.devices.begin(), o_.devices.begin() + i, slot.device);
    slot.label = "gpu" + std::to_string(slot.device) + (same ? "." + std::to_string(same + 1) : "");
    slots_.push_back(std::move(slot));
  }
  shard_progress_.assign(static_cast<std::size_t>(count_) + 1, ShardProgress{});
  if (o_.json_progress == "-") {
    json_.emplace(err_);
  } else if (!o_.json_progress.empty()) {
    json_file_.open(o_.json_progress, std::ios::out | std::ios::trunc);
    if (!json_file_) {
      err_ << "error: --json-progress: cannot write " << o_.json_progress << "\n";
      return 2;
    }
    json_.emplace(json_file_);
  }
  line_.emplace(err_, o_.json_progress == "-" ? ProgressStyle::none : o_.progress, 0.0, o_.progress_interval_s,
                o_.progress_columns);
  out_ << "Parallel sweep of " << o_.shape_file << ": " << o_.problem_count << " problems in " << count_
       << " shards (split by expected time) over " << workers << " workers; each writes " << parts_dir_
       << "/shard-K-of-" << count_ << ".db, merged into " << o_.db_path << " at the end" << std::endl;

  g_interrupted = false;
  const auto previous = std::signal(SIGINT, on_parallel_sigint);
  while (true) {
    if (g_interrupted) interrupted_ = true;
    if (!interrupted_)
      for (Slot& slot : slots_)
        if (slot.pid < 0 && !slot.retired && !queue_.empty()) {
          const int shard = queue_.front();
          queue_.pop_front();
          launch(slot, shard);
        }
    if (running() == 0) break;
    std::vector<pollfd> fds;
    std::vector<Slot*> owners;
    for (Slot& slot : slots_)
      if (slot.pid > 0) {
        fds.push_back({slot.output, POLLIN, 0});
        owners.push_back(&slot);
        if (slot.events >= 0) {
          fds.push_back({slot.events, POLLIN, 0});
          owners.push_back(&slot);
        }
      }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
      line_->clear();
      err_ << "error: waiting for the workers: " << std::strerror(errno) << "\n";
      break;
    }
    show_progress();  // the elapsed time moves even while no worker says anything
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Slot& slot = *owners[i];
      if (fds[i].fd != slot.output) {
        if (fds[i].fd == slot.events) read_events(slot);
        continue;
      }
      char buffer[65536];
      const ssize_t n = read(slot.output, buffer, sizeof buffer);
      if (n > 0) {
        slot.partial_line.append(buffer, static_cast<std::size_t>(n));
        forward(slot, false);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      forward(slot, true);  // end of output: the worker has exited (or closed both streams)
      int status = 0;
      while (waitpid(slot.pid, &status, 0) < 0 && errno == EINTR) {
      }
      finished(slot, status);
    }
  }
  std::signal(SIGINT, previous);
  line_->clear();

  // Every part that exists is merged, finished or not: what a dead or interrupted worker
  // stored is real measurement too, and the winners come only from finished problems.
  std::vector<std::string> parts;
  for (int k = 1; k <= count_; ++k)
    if (std::filesystem::exists(part_path(parts_dir_, k, count_), error)) parts.push_back(part_path(parts_dir_, k, count_));
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  out_ << "Workers done in " << format_duration(seconds) << "; merging " << parts.size() << " part databases" << std::endl;
  const int merged = parts.empty() ? 0 : run_merge(o_.db_path, parts, catalogue_cost, completed_config_key, out_, err_);
  std::vector<int> not_done;
  for (int k = 1; k <= count_; ++k)
    if (!done_[static_cast<std::size_t>(k)]) not_done.push_back(k);
  if (interrupted_) {
    err_ << "interrupted: " << not_done.size() << " of " << count_ << " shards unfinished; rerun the same command to resume\n";
    return 130;
  }
  if (!not_done.empty()) {
    err_ << "error: " << not_done.size() << " of " << count_ << " shards could not be finished (";
    for (std::size_t i = 0; i < not_done.size(); ++i) err_ << (i ? ", " : "") << not_done[i];
    err_ << "); what they stored is merged. Rerun the same command to resume them.\n";
    return 1;
  }
  if (merged != 0) return merged;
  std::int64_t without_winner = 0, without_baseline = 0;
  for (const ShardProgress& p : shard_progress_) {
    without_winner += p.without_winner;
    without_baseline += p.without_baseline;
  }
  auto problems = [](std::int64_t n) { return std::to_string(n) + (n == 1 ? " problem" : " problems"); };
  out_ << "Parallel sweep complete: " << count_ << " shards on " << workers << " workers in " << format_duration(seconds);
  if (without_winner) out_ << "; " << problems(without_winner) << " without an accurate candidate";
  if (without_baseline) out_ << "; " << problems(without_baseline) << " without a baseline (the workers' warnings above)";
  out_ << "; winners in " << o_.db_path << std::endl;
  return 0;
}

}  // namespace

int run_parallel_sweep(const ParallelSweepOptions& options, std::ostream& out, std::ostream& err) {
  return ParallelSweep(options, out, err).run();
}

}  // namespace shapetune
