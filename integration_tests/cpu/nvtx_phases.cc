// A CPU-only program that exercises NVTX the way a training loop would, for the NVTX
// end-to-end test: a named thread, a start/end range around everything, nested push/pop
// ranges "step" > "forward" and "step" > "backward" three times, one mark. It exits with
// the status given as its first argument.
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

int main(int argc, char** argv) {
  const int exit_code = argc > 1 ? atoi(argv[1]) : 0;
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "trainer");
  const nvtxRangeId_t epoch = nvtxRangeStartA("epoch");
  for (int step = 0; step < 3; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("forward");
    nvtxRangePop();
    nvtxRangePushA("backward");
    nvtxRangePop();
    nvtxRangePop();
  }
  nvtxMarkA("checkpoint");
  nvtxRangeEnd(epoch);
  return exit_code;
}
