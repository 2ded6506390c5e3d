// A CPU-only program that uses NVTX the way training code does. The injection test runs it
// under the tracer; it knows nothing about cumemtrace.
//
//   nvtx_probe [EXIT_CODE] [wait|threads]
//   wait:    first an NVTX call that records nothing (it only makes NVTX initialize), then
//            one byte on stdout, then the usual calls once a byte arrives on stdin
//   threads: NVTX initialized first, then 8 threads make their first ranges at once
//            (500 push/pop pairs each) instead of the usual calls
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int exit_code = argc > 1 ? std::atoi(argv[1]) : 0;
  const char* mode = argc > 2 ? argv[2] : "";
  if (strcmp(mode, "wait") == 0 || strcmp(mode, "threads") == 0) {
    nvtxNameCategoryA(1, "init");  // the tracer records no category names
  }
  if (strcmp(mode, "wait") == 0) {
    char byte = 'i';
    if (write(1, &byte, 1) != 1 || read(0, &byte, 1) != 1) return 100;
  }
  if (strcmp(mode, "threads") == 0) {
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&go] {
        while (!go.load()) {
        }
        for (int i = 0; i < 500; ++i) {
          nvtxRangePushA("work");
          nvtxRangePop();
        }
      });
    }
    go.store(true);
    for (std::thread& thread : threads) thread.join();
    return exit_code;
  }
  nvtxNameOsThreadA(0, "ignored");  // a bogus tid must not break anything
  nvtxRangePushA("forward");
  nvtxRangePushA("layer1");
  nvtxRangePop();
  nvtxRangePop();
  nvtxRangeId_t id = nvtxRangeStartA("epoch");
  std::thread worker([id] {
    nvtxRangePushA("backward");
    nvtxRangePop();
    nvtxRangeEnd(id);  // ends on another thread than it started
  });
  worker.join();
  nvtxDomainHandle_t domain = nvtxDomainCreateA("ep");
  nvtxStringHandle_t settling = nvtxDomainRegisterStringA(domain, "settling");
  nvtxEventAttributes_t attributes = {};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = settling;
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = 0xff00ff00;
  nvtxDomainRangePushEx(domain, &attributes);
  nvtxDomainRangePop(domain);
  nvtxMarkA("checkpoint");
  return exit_code;
}
