#include "collector/cli/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cumemtrace {

void LogLine(const std::string& message) {
  std::string line = "cumemtrace: " + message + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone; nothing better to do
    p += n;
    left -= static_cast<size_t>(n);
  }
}

std::string ErrnoText() { return strerror(errno); }

}  // namespace cumemtrace
