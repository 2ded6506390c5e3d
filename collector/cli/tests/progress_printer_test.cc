// ProgressPrinter against a clock the test moves: nothing for a quick pass, one line per
// slow pass with its own time in a log, one line redrawn in place on a pseudo-terminal.
#include "collector/cli/progress_printer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <string>

namespace cumemtrace {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Everything readable from `fd` now (non-blocking).
std::string Drain(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
  return out;
}

// Feeds one pass of `total` bytes that lasts `seconds`, in four steps.
void Pass(ProgressPrinter& printer, double* now, int pass, uint64_t total, double seconds) {
  printer(pass, 0, total);
  for (int step = 1; step <= 4; ++step) {
    *now += seconds / 4;
    printer(pass, total * step / 4, total);
  }
}

TEST(ProgressPrinter, InALogOneLinePerSlowPassWithThatPassesOwnTime) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  double now = 500.0;  // long after the printer was made: the run's own time is not the pass's
  ProgressPrinter printer(fds[1], 1.5, [&now] { return now; });
  now = 900.0;
  Pass(printer, &now, 1, 3 * kMiB, 0.2);  // quick: nothing
  EXPECT_EQ(Drain(fds[0]), "");
  Pass(printer, &now, 1, 40 * kMiB, 3.2);
  Pass(printer, &now, 2, 40 * kMiB, 0.4);
  Pass(printer, &now, 3, 40 * kMiB, 2.0);
  EXPECT_EQ(Drain(fds[0]),
            "cumemtrace: analysis pass 1: 40.0 MiB in 3.2 s\n"
            "cumemtrace: analysis pass 3: 40.0 MiB in 2.0 s\n");
  close(fds[0]);
  close(fds[1]);
}

TEST(ProgressPrinter, OnATerminalOneLineRedrawnInPlaceThenErased) {
  int master = -1;
  int slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  termios raw{};
  ASSERT_EQ(tcgetattr(slave, &raw), 0);
  cfmakeraw(&raw);  // bytes as written, no "\n" -> "\r\n"
  ASSERT_EQ(tcsetattr(slave, TCSANOW, &raw), 0);
  double now = 0;
  ProgressPrinter printer(slave, 1.5, [&now] { return now; });
  Pass(printer, &now, 1, 2 * kMiB, 0.5);
  EXPECT_EQ(Drain(master), "");
  Pass(printer, &now, 2, 2 * kMiB, 4.0);  // 1 s, 2 s, 3 s, end: two redraws, then erased
  const std::string out = Drain(master);
  EXPECT_EQ(out,
            "\rcumemtrace: analysis pass 2 [###############               ]  50% of 2.0 MiB "
            "(2.0 s)"
            "\rcumemtrace: analysis pass 2 [######################        ]  75% of 2.0 MiB "
            "(3.0 s)"
            "\r\033[K");
  EXPECT_EQ(out.find('\n'), std::string::npos);
  close(master);
  close(slave);
}

}  // namespace
}  // namespace cumemtrace
