// One attempt at the NVTX fork race: a thread makes the process's first NVTX call while the
// main thread forks, and the child then makes its own first call. When the fork lands
// between the header's "started" and "complete" marks of that first call, the child spins
// in nvtxInitOnce forever. Exit status 0: the child finished; 3: it hung (killed after 1 s).
//
//   nvtx_fork_race [OFFSET_NS]   fork OFFSET_NS nanoseconds after the moment the thread
//                                makes its first NVTX call (negative: before it);
//                                nvtx_fork_race.sh sweeps it over the window
//
// Both threads spin (on a clock) to their moments, set 100 us ahead: a released thread that
// is only scheduled milliseconds later on a loaded machine would otherwise almost never meet
// the fork, whatever the window's length.
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace {
long long NowNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}
void SpinUntil(long long t) {
  while (NowNs() < t) {
  }
}
}  // namespace

int main(int argc, char** argv) {
  const long long offset_ns = argc > 1 ? atoll(argv[1]) : 0;
  std::atomic<long long> call_at{0};
  std::thread first([&call_at] {
    long long t = 0;
    while ((t = call_at.load(std::memory_order_acquire)) == 0) {
    }
    SpinUntil(t);
    nvtxRangePushA("first");
    nvtxRangePop();
  });
  usleep(1000);  // the thread is spinning by now, unless the machine is busy
  const long long t = NowNs() + 100000;
  call_at.store(t, std::memory_order_release);
  SpinUntil(t + offset_ns);
  const pid_t child = fork();
  if (child == 0) {
    nvtxRangePushA("child");
    nvtxRangePop();
    _exit(0);
  }
  first.join();
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return 0;
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return 3;
}
