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
#include <iomanip>
#include <ostream>
#include <sstream>

#include "harness/child_process.hpp"
#include "tuner/merge.hpp"
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

// Starts `argv` with its stdout and stderr on a pipe; the child dies with this process.
pid_t spawn(const std::vector<std::string>& argv, int* output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    const std::string message = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }
  close(fds[1]);
  *output = fds[0];
  return pid;
}

std::string fmt_duration(double s) {
  std::ostringstream text;
  if (s < 90) text << std::fixed << std::setprecision(0) << s << " s";
  else text << std::fixed << std::setprecision(1) << s / 60 << " min";
  return text.str();
}

class ParallelSweep {
 public:
  ParallelSweep(const ParallelSweepOptions& o, std::ostream& out, std::ostream& err) : o_(o), out_(out), err_(err) {}
  int run();

 private:
  void launch(Slot&, int shard);
  void forward(Slot&, bool at_end);
  void finished(Slot&, int status);
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
  double done_seconds_ = 0;
  int done_count_ = 0;
  Clock::time_point start_;
};

void ParallelSweep::launch(Slot& slot, int shard) {
  std::vector<std::string> argv{executable_, "sweep", o_.shape_file, "--shard",
                                std::to_string(shard) + "/" + std::to_string(count_), "--device",
                                std::to_string(slot.device), "--db", part_path(parts_dir_, shard, count_)};
  argv.insert(argv.end(), o_.sweep_args.begin(), o_.sweep_args.end());
  ++attempts_[static_cast<std::size_t>(shard)];
  slot.pid = spawn(argv, &slot.output);
  slot.shard = shard;
  slot.started = Clock::now();
  slot.tail.clear();
  slot.partial_line.clear();
  if (slot.pid < 0) {
    err_ << "[" << slot.label << "] cannot start a worker: " << std::strerror(errno) << "\n";
    slot.pid = -1;
    finished(slot, -1);
    return;
  }
  out_ << "[" << slot.label << "] shard " << shard << "/" << count_ << " started"
       << (attempts_[static_cast<std::size_t>(shard)] > 1 ? " again (resuming what it stored)" : "") << std::endl;
}

// Passes the worker's complete lines on, prefixed with its slot; at the end, the rest too.
void ParallelSweep::forward(Slot& slot, bool at_end) {
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

// status: a waitpid() status, or -1 when the worker could not be started.
void ParallelSweep::finished(Slot& slot, int status) {
  const int shard = slot.shard;
  const double seconds = std::chrono::duration<double>(Clock::now() - slot.started).count();
  slot.pid = -1;
  if (slot.output >= 0) close(slot.output);
  slot.output = -1;
  const bool ok = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const bool interrupted = status >= 0 && ((WIFEXITED(status) && WEXITSTATUS(status) == 130) ||
                                           (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT));
  if (ok) {
    done_[static_cast<std::size_t>(shard)] = true;
    slot.failures_in_a_row = 0;
    done_seconds_ += seconds;
    ++done_count_;
    const int left = static_cast<int>(queue_.size()) + running();
    std::ostringstream line;
    line << "[" << slot.label << "] shard " << shard << "/" << count_ << " done in " << fmt_duration(seconds) << "; "
         << done_count_ << " of " << count_ << " shards done";
    const int workers = static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.retired; }));
    if (left > 0 && workers > 0)
      line << ", about " << fmt_duration(done_seconds_ / done_count_ * left / workers) << " left";
    out_ << line.str() << std::endl;
    return;
  }
  if (interrupted || g_interrupted) {
    interrupted_ = true;
    out_ << "[" << slot.label << "] shard " << shard << "/" << count_ << " interrupted" << std::endl;
    return;
  }
  std::string how = status < 0 ? "could not be started" : describe_wait_status(status);
  err_ << "[" << slot.label << "] the worker of shard " << shard << "/" << count_ << " " << how << " after "
       << fmt_duration(seconds);
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
      }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
      err_ << "error: waiting for the workers: " << std::strerror(errno) << "\n";
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Slot& slot = *owners[i];
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

  // Every part that exists is merged, finished or not: what a dead or interrupted worker
  // stored is real measurement too, and the winners come only from finished problems.
  std::vector<std::string> parts;
  for (int k = 1; k <= count_; ++k)
    if (std::filesystem::exists(part_path(parts_dir_, k, count_), error)) parts.push_back(part_path(parts_dir_, k, count_));
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  out_ << "Workers done in " << fmt_duration(seconds) << "; merging " << parts.size() << " part databases" << std::endl;
  const int merged = parts.empty() ? 0 : run_merge(o_.db_path, parts, catalogue_cost, out_, err_);
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
  out_ << "Parallel sweep complete: " << count_ << " shards on " << workers << " workers in " << fmt_duration(seconds)
       << "; winners in " << o_.db_path << std::endl;
  return 0;
}

}  // namespace

int run_parallel_sweep(const ParallelSweepOptions& options, std::ostream& out, std::ostream& err) {
  return ParallelSweep(options, out, err).run();
}

}  // namespace shapetune
