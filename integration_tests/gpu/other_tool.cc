// Another CUDA tool, injected the way Nsight Systems or compute-sanitizer are: the driver
// loads it through CUDA_INJECTION64_PATH and calls InitializeInjection, where it subscribes
// to CUPTI and counts kernel launches. At exit it says on stderr whether it got CUPTI and
// how many launches it saw (gpu_profiler.py checks that cumemtrace left CUPTI to it).
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace {

std::atomic<unsigned long long> g_launches{0};
CUptiResult g_status = CUPTI_ERROR_UNKNOWN;
CUpti_SubscriberHandle g_subscriber = nullptr;

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_ENTER) {
    g_launches.fetch_add(1, std::memory_order_relaxed);
  }
}

void Report() {
  fprintf(stderr, "other_tool: subscribe status %d, %llu launches\n", static_cast<int>(g_status),
          g_launches.load());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  g_status = cuptiSubscribe(&g_subscriber, OnCallback, nullptr);
  if (g_status == CUPTI_SUCCESS) {
    for (CUpti_CallbackId id :
         {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz}) {
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
  }
  atexit(Report);
  return 1;
}
