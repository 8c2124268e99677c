#include "harness/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace shapetune {
namespace {

constexpr std::uint32_t kMaxMessageBytes = 1u << 30;
constexpr std::size_t kOutputTailBytes = 8192;
constexpr const char* kChildEnv = "SHAPETUNE_CHILD";  // "ROLE:CHANNEL_FD:PARENT_PID"

std::set<std::string>& served_roles() {
  static std::set<std::string> roles;
  return roles;
}

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_frame(int fd, std::string_view message) {
  const auto size = static_cast<std::uint32_t>(message.size());
  char header[4];
  std::memcpy(header, &size, 4);
  return write_all(fd, header, 4) && write_all(fd, message.data(), message.size());
}

// Everything the child does before its body: its own process rules, whichever way it started.
void become_child(pid_t parent) {
  // A worker that crashes is expected here; a core dump of a process with GPU mappings is
  // gigabytes and seconds.
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before the line above
}

// In the child after fork(): stdout and stderr into the output pipe.
void redirect_output(int output) {
  ::dup2(output, STDOUT_FILENO);
  ::dup2(output, STDERR_FILENO);
  if (output != STDOUT_FILENO && output != STDERR_FILENO) ::close(output);
}

struct Fds {
  int parent_channel, child_channel, output_read, output_write;
};

Fds make_fds() {
  int pair[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) throw_errno("socketpair");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int saved = errno;
    ::close(pair[0]);
    ::close(pair[1]);
    errno = saved;
    throw_errno("pipe2");
  }
  return {pair[0], pair[1], out[0], out[1]};
}

// fork(), closing every descriptor of `fds` when it fails (std::system_error then).
pid_t fork_or_throw(const Fds& fds) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int saved = errno;
    for (int fd : {fds.parent_channel, fds.child_channel, fds.output_read, fds.output_write}) ::close(fd);
    errno = saved;
    throw_errno("fork");
  }
  return pid;
}

}  // namespace

std::optional<std::string> MessageChannel::read() {
  auto read_exact = [this](char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::read(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  };
  char header[4];
  if (!read_exact(header, 4)) return std::nullopt;
  std::uint32_t size;
  std::memcpy(&size, header, 4);
  if (size > kMaxMessageBytes) return std::nullopt;
  std::string message(size, '\0');
  if (!read_exact(message.data(), size)) return std::nullopt;
  return message;
}

bool MessageChannel::write(std::string_view message) { return write_frame(fd_, message); }

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::sigabbrev_np(sig);
    std::string text = "was killed by signal " + std::to_string(sig) + " (" + (name ? std::string("SIG") + name + ": " : "") +
                       ::strsignal(sig) + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

std::unique_ptr<ChildProcess> ChildProcess::fork_running(const ChildBody& body) {
  const Fds fds = make_fds();
  const pid_t parent = ::getpid();
  const pid_t pid = fork_or_throw(fds);
  if (pid == 0) {
    ::close(fds.parent_channel);
    ::close(fds.output_read);
    become_child(parent);
    redirect_output(fds.output_write);
    MessageChannel channel(fds.child_channel);
    int rc = 1;
    try {
      rc = body(channel);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(fds.child_channel);
  ::close(fds.output_write);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds.parent_channel, fds.output_read));
}

std::unique_ptr<ChildProcess> ChildProcess::exec_self(const std::string& role) {
  if (!served_roles().count(role))
    throw std::logic_error("cannot start a '" + role + "' child: this executable's main() does not call "
                           "serve_child_if_asked(\"" + role + "\", ...) first");
  const Fds fds = make_fds();
  const pid_t parent = ::getpid();
  const std::string env = role + ":" + std::to_string(fds.child_channel) + ":" + std::to_string(parent);
  // Everything the child needs is prepared before fork(): between fork and exec only
  // async-signal-safe calls are allowed (the parent may have threads).
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw_errno("readlink /proc/self/exe");
  self[n] = '\0';
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kChildEnv, std::strlen(kChildEnv)) != 0 || (*e)[std::strlen(kChildEnv)] != '=')
      env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kChildEnv) + "=" + env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = "shapetune-" + role;
  char* argv[] = {arg0.data(), nullptr};

  const pid_t pid = fork_or_throw(fds);
  if (pid == 0) {
    ::signal(SIGINT, SIG_IGN);  // kept across exec, so the child ignores Ctrl-C from its first instruction
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds.output_write, STDOUT_FILENO);
    ::dup2(fds.output_write, STDERR_FILENO);
    // The channel must survive exec: clear its close-on-exec flag (the others keep theirs).
    ::fcntl(fds.child_channel, F_SETFD, 0);
    ::execve(self, argv, envp.data());
    static const char failed[] = "exec of this executable failed\n";
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, failed, sizeof failed - 1);
    ::_exit(127);
  }
  ::close(fds.child_channel);
  ::close(fds.output_write);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds.parent_channel, fds.output_read));
}

void serve_child_if_asked(const std::string& role, const ChildBody& body) {
  served_roles().insert(role);
  const char* env = std::getenv(kChildEnv);
  if (!env) return;
  const std::string text = env;
  const auto first = text.find(':'), second = text.find(':', first + 1);
  if (first == std::string::npos || second == std::string::npos || text.substr(0, first) != role) return;
  const int fd = std::atoi(text.substr(first + 1, second - first - 1).c_str());
  const pid_t parent = static_cast<pid_t>(std::atoll(text.substr(second + 1).c_str()));
  ::unsetenv(kChildEnv);  // what this child starts is not a child of the same kind
  become_child(parent);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  MessageChannel channel(fd);
  int rc = 1;
  try {
    rc = body(channel);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s child: %s\n", role.c_str(), e.what());
  }
  std::fflush(nullptr);
  ::_exit(rc);
}

ChildProcess::ChildProcess(pid_t pid, int channel, int output) : pid_(pid), channel_(channel), output_(output) {
  ::fcntl(output_, F_SETFL, ::fcntl(output_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  if (channel_ >= 0) ::close(channel_);
  channel_ = -1;
  if (pid_ > 0) {
    // Closing the channel asks the child to exit; it gets a moment to do so.
    for (int i = 0; i < 200 && pid_ > 0; ++i) {
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pid_ > 0) reap(true);
  }
  drain_output();
  if (output_ >= 0) ::close(output_);
}

// Passes what the child printed on to this process's stderr, keeping the tail.
void ChildProcess::drain_output() {
  if (output_ < 0) return;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(output_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, buffer, static_cast<std::size_t>(n));
    output_tail_.append(buffer, static_cast<std::size_t>(n));
    if (output_tail_.size() > 2 * kOutputTailBytes) output_tail_.erase(0, output_tail_.size() - kOutputTailBytes);
  }
}

std::string ChildProcess::last_output_line() const {
  std::size_t end = output_tail_.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return "";
  const std::size_t start = output_tail_.rfind('\n', end);
  return output_tail_.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

void ChildProcess::reap(bool kill_first) {
  if (pid_ <= 0) return;
  if (kill_first) ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  if (death_.empty()) death_ = describe_wait_status(status);
  pid_ = -1;
  if (channel_ >= 0) ::close(channel_);
  channel_ = -1;
  drain_output();
}

void ChildProcess::kill() {
  if (pid_ > 0 && death_.empty()) death_ = "was stopped by its parent";
  reap(true);
}

ChildProcess::Reply ChildProcess::call(std::string_view request, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  Reply reply;
  if (pid_ <= 0) {
    reply.kind = Reply::Kind::died;
    reply.death = death_.empty() ? "not running" : death_;
    return reply;
  }
  auto died = [&] {
    // The channel closed or broke: the child is ending, or has. Reap it, with a grace period
    // for an exit already under way (then it is killed).
    for (int i = 0; i < 500 && pid_ > 0; ++i) {
      int status;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        death_ = describe_wait_status(status);
        pid_ = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (pid_ > 0) {
      death_ = "closed its channel without exiting";
      reap(true);
    } else {
      if (channel_ >= 0) ::close(channel_);
      channel_ = -1;
      drain_output();
    }
    reply.kind = Reply::Kind::died;
    reply.death = death_;
    return reply;
  };
  drain_output();
  if (!write_frame(channel_, request)) return died();

  const bool limited = timeout_s > 0 && std::isfinite(timeout_s);
  const auto deadline =
      limited ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))
              : Clock::time_point::max();
  std::string& got = buffered_;
  for (;;) {
    if (got.size() >= 4) {
      std::uint32_t size;
      std::memcpy(&size, got.data(), 4);
      if (size > kMaxMessageBytes) {
        death_ = "sent a garbled reply (a message of " + std::to_string(size) + " bytes)";
        reap(true);
        reply.kind = Reply::Kind::died;
        reply.death = death_;
        return reply;
      }
      if (got.size() >= 4 + std::size_t{size}) {
        reply.message = got.substr(4, size);
        got.erase(0, 4 + std::size_t{size});
        drain_output();
        return reply;
      }
    }
    int wait_ms = -1;
    if (limited) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        char limit[64];
        std::snprintf(limit, sizeof limit, "gave no reply within %.3g s and was killed", timeout_s);
        death_ = limit;
        reap(true);
        reply.kind = Reply::Kind::timed_out;
        reply.death = death_;
        return reply;
      }
      wait_ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd fds[2] = {{channel_, POLLIN, 0}, {output_, POLLIN, 0}};
    const int ready = ::poll(fds, output_ >= 0 ? 2 : 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll");
    }
    if (fds[1].revents & POLLIN) drain_output();
    if (fds[1].revents & (POLLHUP | POLLERR) && !(fds[1].revents & POLLIN)) {
      ::close(output_);
      output_ = -1;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      const ssize_t n = ::read(channel_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return died();
      got.append(buffer, static_cast<std::size_t>(n));
    }
  }
}

}  // namespace shapetune
