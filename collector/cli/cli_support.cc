#include "collector/cli/cli_support.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <streambuf>

#include "collector/cli/log.h"

namespace cumemtrace {

int UsageError(const std::string& command, const std::string& message) {
  const std::string name = command.empty() ? "cumemtrace" : "cumemtrace " + command;
  LogLine((command.empty() ? "" : command + ": ") + message + " (see '" + name + " --help')");
  return kExitUsage;
}

int EmptyValueError(const std::string& command, const std::string& option) {
  return UsageError(command, option + " needs a value, not an empty string");
}

std::string KernelsEnvValue(const char* what) {
  const std::string value = what != nullptr ? what : "records";
  if (value == "records") return "1";
  if (value == "launches") return "launches";
  return "";
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

std::string PytestPluginDir() { return ExecutableDir() + "/../share/cumemtrace/pytest"; }

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

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

namespace {

// An ostream buffer that writes to a descriptor and remembers the first failure.
class DescriptorBuffer : public std::streambuf {
 public:
  explicit DescriptorBuffer(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof(buffer_)); }
  int failure() const { return failure_; }
  bool Flush() { return sync() == 0; }

 protected:
  int_type overflow(int_type ch) override {
    if (!Drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return Drain() ? 0 : -1; }

 private:
  bool Drain() {
    const char* p = pbase();
    size_t left = static_cast<size_t>(pptr() - pbase());
    while (left > 0 && failure_ == 0) {
      const ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failure_ = errno;
        break;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    setp(buffer_, buffer_ + sizeof(buffer_));
    return failure_ == 0;
  }

  int fd_;
  int failure_ = 0;
  char buffer_[1 << 16];
};

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

bool WriteOutputFile(const std::string& path, Placement placement,
                     const std::function<void(std::ostream&)>& write_content,
                     std::string* error) {
  // A hidden temporary in the same folder, so that placing it is a rename within one
  // filesystem; mkstemp creates it with mode 0600.
  std::string temporary = DirectoryOf(path) + "/." + BaseName(path) + ".tmp-XXXXXX";
  const int fd = mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot create " + path + ": " + strerror(errno);
    return false;
  }
  DescriptorBuffer buffer(fd);
  {
    std::ostream out(&buffer);
    write_content(out);
    out.flush();
  }
  int failure = buffer.Flush() ? 0 : buffer.failure();
  // A full disk may only show at fsync or close (delayed allocation, NFS).
  if (failure == 0 && fsync(fd) != 0 && errno != EINVAL && errno != EROFS) failure = errno;
  if (close(fd) != 0 && failure == 0 && errno != EINTR) failure = errno;
  if (failure != 0) {
    *error = "cannot write " + path + ": " + strerror(failure);
    unlink(temporary.c_str());
    return false;
  }
  int placed = 0;
  if (placement == Placement::kReplace) {
    placed = rename(temporary.c_str(), path.c_str());
  } else {
    // Never replaces a file that appeared meanwhile; link() where the filesystem lacks
    // RENAME_NOREPLACE.
    placed = renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (placed != 0 && (errno == EINVAL || errno == ENOSYS)) {
      placed = link(temporary.c_str(), path.c_str());
    }
  }
  const int saved = errno;
  unlink(temporary.c_str());  // after a rename, the name is gone already
  if (placed != 0) {
    *error = (saved == EEXIST ? path + " already exists" : "cannot create " + path + ": " +
                                                                strerror(saved));
    return false;
  }
  return true;
}

bool WriteOutputFile(const std::string& path, Placement placement, std::string_view content,
                     std::string* error) {
  return WriteOutputFile(
      path, placement, [content](std::ostream& out) { out.write(content.data(), content.size()); },
      error);
}

bool WriteNewFile(const std::string& path, const std::string& content, std::string* error) {
  return WriteOutputFile(path, Placement::kNew, content, error);
}

bool MakeOutputDir(const std::string& path, std::string* error) {
  if (mkdir(path.c_str(), 0700) == 0) return true;
  struct stat st {};
  if (errno == EEXIST && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
  *error = errno == EEXIST ? path + " exists and is not a folder"
                           : "cannot create " + path + ": " + strerror(errno);
  return false;
}

}  // namespace cumemtrace
