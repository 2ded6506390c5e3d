// One attempt at the NVTX fork race: a thread makes the process's first NVTX call while the
// main thread forks, and the child then makes its own first call. When the fork lands
// between the header's "started" and "complete" marks of that first call, the child spins
// in nvtxInitOnce forever. Exit status 0: the child finished; 3: it hung (killed after 2 s).
//
//   nvtx_fork_race [DELAY]   DELAY: busy-loop iterations between releasing the thread and
//                            fork (nvtx_fork_race.sh sweeps it to cover the window)
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

int main(int argc, char** argv) {
  const long delay = argc > 1 ? atol(argv[1]) : 0;
  std::atomic<bool> go{false};
  std::thread first([&go] {
    while (!go.load(std::memory_order_acquire)) {
    }
    nvtxRangePushA("first");
    nvtxRangePop();
  });
  go.store(true, std::memory_order_release);
  for (volatile long i = 0; i < delay; i = i + 1) {
  }
  const pid_t child = fork();
  if (child == 0) {
    nvtxRangePushA("child");
    nvtxRangePop();
    _exit(0);
  }
  first.join();
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return 0;
    usleep(10000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return 3;
}
