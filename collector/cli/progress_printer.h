// Progress of a long analysis, shown only for a pass that lasts long enough to be waited
// for: on a terminal one line redrawn in place and erased when the pass ends; in a log one
// line per such pass, with that pass's own time. A small trace prints nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace cumemtrace {

class ProgressPrinter {
 public:
  // Seconds on a monotonic clock.
  using Clock = std::function<double()>;
  // Writes to `fd` (a terminal or not, as isatty says) once a pass has lasted `show_after_s`.
  ProgressPrinter(int fd, double show_after_s, Clock clock);
  // The engine's AnalysisOptions::progress: each pass starts with done == 0 and ends with
  // done == total.
  void operator()(int pass, uint64_t done, uint64_t total);

  static constexpr double kShowAfterSeconds = 1.5;

 private:
  void Write(const std::string& text);

  const int fd_;
  const bool tty_;
  const double show_after_s_;
  const Clock clock_;
  int pass_ = 0;
  double pass_start_ = 0;
  bool drawn_ = false;  // a terminal line is showing
};

}  // namespace cumemtrace
