#include "collector/cli/progress_printer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace cumemtrace {
namespace {

std::string SizeText(uint64_t bytes) {
  char text[32];
  if (bytes >= (uint64_t{1} << 30)) {
    snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  } else {
    snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return text;
}

}  // namespace

ProgressPrinter::ProgressPrinter(int fd, double show_after_s, Clock clock)
    : fd_(fd), tty_(isatty(fd) != 0), show_after_s_(show_after_s), clock_(std::move(clock)) {}

void ProgressPrinter::operator()(int pass, uint64_t done, uint64_t total) {
  const double now = clock_();
  if (pass != pass_ || done == 0) {  // a new pass (or the same pass of the next trace)
    pass_ = pass;
    pass_start_ = now;
  }
  const double elapsed = now - pass_start_;
  const bool finished = done >= total;
  char line[160];
  if (tty_) {
    if (finished) {
      if (drawn_) Write("\r\033[K");  // the next output starts on a clean line
      drawn_ = false;
      return;
    }
    if (elapsed < show_after_s_) return;
    constexpr int kWidth = 30;
    const int percent = static_cast<int>(done * 100 / total);
    const int filled = percent * kWidth / 100;
    snprintf(line, sizeof(line), "\rcumemtrace: analysis pass %d [%.*s%*s] %3d%% of %s (%.1f s)",
             pass, filled, "##############################", kWidth - filled, "", percent,
             SizeText(total).c_str(), elapsed);
    Write(line);
    drawn_ = true;
    return;
  }
  if (!finished || elapsed < show_after_s_) return;
  snprintf(line, sizeof(line), "cumemtrace: analysis pass %d: %s in %.1f s\n", pass,
           SizeText(total).c_str(), elapsed);
  Write(line);
}

void ProgressPrinter::Write(const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace cumemtrace
