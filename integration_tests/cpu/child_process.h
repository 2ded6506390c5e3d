// Test support for the end-to-end tests: start a real process with its stdout and stderr on
// pipes, then read both to the end and reap it, with a bound on how long a hung child may
// hold the test; a private scratch directory; the shell's view of an exit status.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cumemtrace::testing {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};

// The shell's view of a waitpid status: the exit code, or 128+N when signal N ended it.
inline int ExitCode(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// `command` run by /bin/sh, as the shell reports its end (ExitCode).
inline int Shell(const std::string& command) { return ExitCode(std::system(command.c_str())); }

// A whole file's bytes ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// A fresh directory /tmp/<prefix>-XXXXXX, or "" when it cannot be made.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  return mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
}

struct ChildExit {
  int status = 0;  // as waitpid gives it
  std::string out;
  std::string err;
  rusage usage{};
  double seconds = 0;
  int code() const { return ExitCode(status); }
};

// Starts args[0] with exactly `env` ("NAME=value" entries), in `cwd` when not empty; `fds`
// are (our descriptor, its number in the child) pairs.
inline Child SpawnChild(const std::vector<std::string>& args, std::vector<std::string> env,
                        const std::string& cwd = "",
                        const std::vector<std::pair<int, int>>& fds = {}) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) abort();
  Child child;
  child.pid = fork();
  if (child.pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    for (const auto& [ours, theirs] : fds) {
      // dup2 clears CLOEXEC, except onto itself: then the descriptor would vanish at exec and
      // the child's first open (the tracer's socket) would take its number.
      if (ours == theirs) {
        fcntl(ours, F_SETFD, 0);
      } else {
        dup2(ours, theirs);
      }
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(120);
    execve(argv[0], argv.data(), envp.data());
    _exit(121);
  }
  close(out[1]);
  close(err[1]);
  child.out_fd = out[0];
  child.err_fd = err[0];
  return child;
}

// Reads stdout and stderr to EOF, then reaps the child. A child that stays silent for
// timeout_s is killed and fails the test instead of hanging it.
inline ChildExit WaitChild(const Child& child, int timeout_s = 60) {
  const auto start = std::chrono::steady_clock::now();
  ChildExit result;
  pollfd fds[2] = {{child.out_fd, POLLIN, 0}, {child.err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  for (int open_fds = 2; open_fds > 0;) {
    const int ready = poll(fds, 2, timeout_s * 1000);
    if (ready < 0) continue;  // EINTR
    if (ready == 0) {
      kill(child.pid, SIGKILL);
      ADD_FAILURE() << "pid " << child.pid << " hung for " << timeout_s << " s";
      timeout_s = 5;
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  wait4(child.pid, &result.status, 0, &result.usage);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace cumemtrace::testing
