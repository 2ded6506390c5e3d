// A CPU-only program that uses NVTX the way training code does. The injection test runs it
// under the tracer; it knows nothing about cumemtrace.
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <thread>

int main(int argc, char** argv) {
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
  return argc > 1 ? std::atoi(argv[1]) : 0;
}
