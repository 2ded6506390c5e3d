// A CPU-only program that exercises NVTX the way a training loop would, for the NVTX
// end-to-end test: a named thread, a start/end range around everything, nested push/pop
// ranges "step" > "forward" and "step" > "backward" three times, one mark. Inside each
// backward, CUB-like ranges in the domain "CCCL" (as CUB opens them around its device
// algorithms: GPT-2's embedding backward sorts with cub::DeviceRadixSort), which must roll up
// into backward; once, a range in the program's own domain "trainer", which keeps its name.
// It exits with the status given as its first argument.
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

namespace {

void DomainPush(nvtxDomainHandle_t domain, const char* message) {
  nvtxEventAttributes_t attributes = {};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message;
  nvtxDomainRangePushEx(domain, &attributes);
}

}  // namespace

int main(int argc, char** argv) {
  const int exit_code = argc > 1 ? atoi(argv[1]) : 0;
  nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "trainer");
  const nvtxDomainHandle_t cccl = nvtxDomainCreateA("CCCL");
  const nvtxDomainHandle_t trainer = nvtxDomainCreateA("trainer");
  const nvtxRangeId_t epoch = nvtxRangeStartA("epoch");
  DomainPush(trainer, "load data");
  nvtxDomainRangePop(trainer);
  for (int step = 0; step < 3; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("forward");
    nvtxRangePop();
    nvtxRangePushA("backward");
    DomainPush(cccl, "cub::DeviceRadixSort::SortPairs");
    DomainPush(cccl, "cub::DeviceScan::ExclusiveSum");
    nvtxDomainRangePop(cccl);
    nvtxDomainRangePop(cccl);
    nvtxRangePop();
    nvtxRangePop();
  }
  nvtxMarkA("checkpoint");
  nvtxRangeEnd(epoch);
  return exit_code;
}
