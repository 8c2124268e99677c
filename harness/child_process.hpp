// A supervised child process that answers framed messages: what isolates GPU work that may
// fault or hang from the process that owns the database. The parent sends one request and
// waits for one reply, with a time limit; a child that dies (a signal, an abort, an exit) or
// overruns the limit comes back as such, described in words, and is reaped, never left behind.
//
// Two ways to start one:
// - exec_self(): fork, then exec this same executable with an environment variable naming the
//   child's channel. main() must call serve_child_if_asked() first thing, which runs the
//   child's loop there and never returns to the rest of main. A fresh image is what CUDA needs:
//   a context cannot be used across fork(), and the parent may have touched CUDA already.
// - fork_running(): fork, and run a function in the child (tests; work that needs no CUDA).
// In both, the child ignores SIGINT (Ctrl-C reaches the parent, which decides), dies with its
// parent (PR_SET_PDEATHSIG), and has its stdout and stderr piped to the parent, which passes
// them on to its own stderr and keeps the last lines for the death message.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace shapetune {

// The child's end of the channel: blocking reads and writes of whole messages.
class MessageChannel {
 public:
  explicit MessageChannel(int fd) : fd_(fd) {}
  // The next message, or nullopt when the parent has closed its end (time to exit).
  std::optional<std::string> read();
  // False when the parent is gone.
  bool write(std::string_view message);

 private:
  int fd_;
};

// What a child runs: serves messages until read() says the parent is done; returns the exit code.
using ChildBody = std::function<int(MessageChannel&)>;

// "was killed by signal 11 (SIGSEGV: Segmentation fault)", "exited with status 3", from a waitpid() status.
std::string describe_wait_status(int status);

class ChildProcess {
 public:
  // Throws std::system_error when the process cannot be started.
  static std::unique_ptr<ChildProcess> fork_running(const ChildBody&);
  // `role` names what the exec'd image is to serve; serve_child_if_asked(role, ...) serves it.
  // Throws std::logic_error when this executable's main() never called serve_child_if_asked
  // (the exec'd copy would run main as if it were the parent).
  static std::unique_ptr<ChildProcess> exec_self(const std::string& role);
  ~ChildProcess();  // closes the channel, gives the child 2 s to exit, then kills it
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  struct Reply {
    enum class Kind { ok, died, timed_out } kind = Kind::ok;
    std::string message;  // the reply, when ok
    // How it ended, when not ok, as a predicate: "was killed by signal 6 (SIGABRT: Aborted)",
    // "exited with status 3", "gave no reply within 3 s and was killed".
    std::string death;
  };
  // Sends `request` and waits for the reply. timeout_s <= 0: no limit. A child that overruns
  // the limit is killed (SIGKILL) and reaped; a dead one is reaped. After a reply that is not
  // ok the process is gone: alive() is false and every later call says so.
  Reply call(std::string_view request, double timeout_s);

  bool alive() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The last non-empty line the child wrote to stdout or stderr ("" if none), for messages.
  std::string last_output_line() const;
  // Kills and reaps the child now (no-op when it is gone).
  void kill();

 private:
  ChildProcess(pid_t pid, int channel, int output);
  void drain_output();
  void reap(bool kill_first);

  pid_t pid_ = -1;
  int channel_ = -1;  // socket: requests out, replies in
  int output_ = -1;   // pipe: the child's stdout and stderr
  std::string output_tail_;
  std::string buffered_;  // reply bytes read past a message's end (none in a request/reply protocol)
  std::string death_;
};

// Call first in main(). When this process is the exec'd child of ChildProcess::exec_self(role)
// with this `role`, runs `body` and exits with its code; otherwise returns (and records that
// exec_self may be used: this main can tell the two apart).
void serve_child_if_asked(const std::string& role, const ChildBody& body);

}  // namespace shapetune
