#include "collector/cli/cli_support.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "collector/cli/log.h"

namespace cumemtrace {

int UsageError(const std::string& command, const std::string& message) {
  const std::string name = command.empty() ? "cumemtrace" : "cumemtrace " + command;
  LogLine((command.empty() ? "" : command + ": ") + message + " (see '" + name + " --help')");
  return kExitUsage;
}

std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  std::string exe(path, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string TracerLibraryPath() {
  const char* override_path = getenv("CUMEMTRACE_TRACER_LIB");
  std::string path = override_path != nullptr && *override_path != '\0'
                         ? override_path
                         : ExecutableDir() + "/../lib/cumemtrace/libcumemtrace-tracer.so";
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) != nullptr) return resolved;
  return path;
}

std::string PythonHookDir() {
  return ExecutableDir() + "/../share/cumemtrace/python";
}

std::string RuntimeBaseDir() {
  for (const char* name : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    const char* value = getenv(name);
    if (value == nullptr || *value != '/') continue;
    struct stat st {};
    if (stat(value, &st) == 0 && S_ISDIR(st.st_mode) && access(value, W_OK | X_OK) == 0) {
      return value;
    }
  }
  return "/tmp";
}

int BlockSignalsIntoFd(std::initializer_list<int> signals, sigset_t* previous) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) sigaddset(&set, sig);
  if (sigprocmask(SIG_BLOCK, &set, previous) != 0) return -1;
  return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

std::string ShellQuote(const std::string& value) {
  bool plain = !value.empty();
  for (char ch : value) {
    if (!(isalnum(static_cast<unsigned char>(ch)) || ch == '/' || ch == '.' || ch == '-' ||
          ch == '_' || ch == ':' || ch == '=' || ch == ',' || ch == '+')) {
      plain = false;
      break;
    }
  }
  if (plain) return value;
  std::string quoted = "'";
  for (char ch : value) {
    if (ch == '\'') {
      quoted += "'\\''";
    } else {
      quoted += ch;
    }
  }
  return quoted + "'";
}

std::string BaseName(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

bool WriteNewFile(const std::string& path, const std::string& content, std::string* error) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create " + path + ": " + strerror(errno);
    return false;
  }
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "cannot write " + path + ": " + strerror(errno);
      close(fd);
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    *error = "cannot write " + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace cumemtrace
