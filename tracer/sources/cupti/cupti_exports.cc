// The CUPTI entry points the tracer exports (tracer.map). Preloaded, these definitions come
// before libcupti's, so a client the program starts (torch.profiler's Kineto, a CUPTI
// sample) reaches them and shares the tracer's subscription through the mux (cupti_mux.h).
//
// Exported: what involves the subscriber, the callbacks, the activity buffer callbacks, the
// enabled kinds, flushes, dropped counts, the clock and the
// process-wide switches (turned off again when the client ends). Not exported, so they go to
// libcupti unchanged: what is process-wide and harmless to share or takes no client state
// (cuptiActivityGetNextRecord: the client's buffers hold CUPTI's records byte for byte;
// cuptiGetTimestamp: CUPTI's clock is the client's when it registered one; attributes,
// thread id type, external correlation, result strings, versions, the profiler and PM
// sampling APIs).
//
// When the mux does not serve the program (its decision, CuptiMux::Shared), each call goes
// to the next definition in the lookup order (the libcupti the caller would have reached
// without the tracer), else to the copy loaded by soname.
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>

#include "tracer/sources/cupti/cupti_mux.h"

namespace {

using cumemtrace::tracer::CuptiMux;

void* NextDefinition(const char* name) {
  if (void* next = dlsym(RTLD_NEXT, name)) return next;
  void* handle = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  return handle != nullptr ? dlsym(handle, name) : nullptr;
}

template <typename F>
F Next(std::atomic<F>* cache, const char* name) {
  F f = cache->load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<F>(NextDefinition(name));
    cache->store(f, std::memory_order_release);
  }
  return f;
}

}  // namespace

// Forwards to libcupti when the mux does not serve the program; CUPTI_ERROR_NOT_INITIALIZED
// when there is no libcupti to forward to.
#define CUMEMTRACE_FORWARD(name, ...)                                         \
  do {                                                                        \
    static std::atomic<decltype(&name)> next{nullptr};                        \
    const auto f = Next(&next, #name);                                        \
    return f != nullptr ? f(__VA_ARGS__) : CUPTI_ERROR_NOT_INITIALIZED;       \
  } while (0)

#define CUMEMTRACE_EXPORT extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI

CUMEMTRACE_EXPORT cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                 void* userdata) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().Subscribe(subscriber, callback, userdata);
  CUMEMTRACE_FORWARD(cuptiSubscribe, subscriber, callback, userdata);
}

CUMEMTRACE_EXPORT cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                    CUpti_CallbackFunc callback, void* userdata,
                                    CUpti_SubscriberParams* params) {
  if (CuptiMux::Get().Shared()) {
    if (params != nullptr && params->structSize == 0) return CUPTI_ERROR_INVALID_PARAMETER;
    const CUptiResult result = CuptiMux::Get().Subscribe(subscriber, callback, userdata);
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && params != nullptr &&
        params->oldSubscriberName != nullptr && params->oldSubscriberSize > 0) {
      // The subscriber already there is the program's own earlier one.
      const char kName[] = "CUPTI for another client of this process";
      size_t i = 0;
      for (; i + 1 < params->oldSubscriberSize && i + 1 < sizeof(kName); ++i) {
        params->oldSubscriberName[i] = kName[i];
      }
      params->oldSubscriberName[i] = '\0';
    }
    return result;
  }
  CUMEMTRACE_FORWARD(cuptiSubscribe_v2, subscriber, callback, userdata, params);
}

CUMEMTRACE_EXPORT cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().Unsubscribe(subscriber);
  CUMEMTRACE_FORWARD(cuptiUnsubscribe, subscriber);
}

CUMEMTRACE_EXPORT cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                      CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (CuptiMux::Get().Shared()) {
    return CuptiMux::Get().EnableCallback(enable, subscriber, domain, cbid);
  }
  CUMEMTRACE_FORWARD(cuptiEnableCallback, enable, subscriber, domain, cbid);
}

CUMEMTRACE_EXPORT cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                    CUpti_CallbackDomain domain) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().EnableDomain(enable, subscriber, domain);
  CUMEMTRACE_FORWARD(cuptiEnableDomain, enable, subscriber, domain);
}

CUMEMTRACE_EXPORT cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().EnableAllDomains(enable, subscriber);
  CUMEMTRACE_FORWARD(cuptiEnableAllDomains, enable, subscriber);
}

CUMEMTRACE_EXPORT cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                        CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (CuptiMux::Get().Shared()) {
    return CuptiMux::Get().GetCallbackState(enable, subscriber, domain, cbid);
  }
  CUMEMTRACE_FORWARD(cuptiGetCallbackState, enable, subscriber, domain, cbid);
}

CUMEMTRACE_EXPORT cuptiFinalize(void) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().Finalize();
  static std::atomic<decltype(&cuptiFinalize)> next{nullptr};
  const auto f = Next(&next, "cuptiFinalize");
  return f != nullptr ? f() : CUPTI_ERROR_NOT_INITIALIZED;
}

CUMEMTRACE_EXPORT cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                 CUpti_BuffersCallbackCompleteFunc completed) {
  if (CuptiMux::Get().Shared()) {
    return CuptiMux::Get().ActivityRegisterCallbacks(requested, completed);
  }
  CUMEMTRACE_FORWARD(cuptiActivityRegisterCallbacks, requested, completed);
}

CUMEMTRACE_EXPORT cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityEnable(kind, /*and_dump=*/false);
  CUMEMTRACE_FORWARD(cuptiActivityEnable, kind);
}

CUMEMTRACE_EXPORT cuptiActivityEnableAndDump(CUpti_ActivityKind kind) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityEnable(kind, /*and_dump=*/true);
  CUMEMTRACE_FORWARD(cuptiActivityEnableAndDump, kind);
}

CUMEMTRACE_EXPORT cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityDisable(kind);
  CUMEMTRACE_FORWARD(cuptiActivityDisable, kind);
}

CUMEMTRACE_EXPORT cuptiActivityEnableContext(CUcontext context, CUpti_ActivityKind kind) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityEnableContext(context, kind);
  CUMEMTRACE_FORWARD(cuptiActivityEnableContext, context, kind);
}

CUMEMTRACE_EXPORT cuptiActivityDisableContext(CUcontext context, CUpti_ActivityKind kind) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityDisableContext(context, kind);
  CUMEMTRACE_FORWARD(cuptiActivityDisableContext, context, kind);
}

CUMEMTRACE_EXPORT cuptiActivityFlushAll(uint32_t flag) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityFlushAll(flag);
  CUMEMTRACE_FORWARD(cuptiActivityFlushAll, flag);
}

// Deprecated (buffers are global since CUDA 6): a flush of everything, as in CUPTI.
CUMEMTRACE_EXPORT cuptiActivityFlush(CUcontext context, uint32_t stream_id, uint32_t flag) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityFlushAll(flag);
  CUMEMTRACE_FORWARD(cuptiActivityFlush, context, stream_id, flag);
}

CUMEMTRACE_EXPORT cuptiActivityFlushPeriod(uint32_t time) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityFlushPeriod(time);
  CUMEMTRACE_FORWARD(cuptiActivityFlushPeriod, time);
}

CUMEMTRACE_EXPORT cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream_id,
                                                    size_t* dropped) {
  if (CuptiMux::Get().Shared()) {
    return CuptiMux::Get().ActivityGetNumDroppedRecords(context, stream_id, dropped);
  }
  CUMEMTRACE_FORWARD(cuptiActivityGetNumDroppedRecords, context, stream_id, dropped);
}

CUMEMTRACE_EXPORT cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock) {
  if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivityRegisterTimestampCallback(clock);
  CUMEMTRACE_FORWARD(cuptiActivityRegisterTimestampCallback, clock);
}

// The process-wide switches (CuptiMux::Switch): turned off again when the client ends.
#define CUMEMTRACE_SWITCH(name, which)                                                    \
  CUMEMTRACE_EXPORT name(uint8_t enable) {                                                \
    if (CuptiMux::Get().Shared()) return CuptiMux::Get().ActivitySwitch(which, enable); \
    CUMEMTRACE_FORWARD(name, enable);                                                     \
  }

CUMEMTRACE_SWITCH(cuptiActivityEnableLatencyTimestamps, CuptiMux::kLatencyTimestamps)
CUMEMTRACE_SWITCH(cuptiActivityEnableLaunchAttributes, CuptiMux::kLaunchAttributes)
CUMEMTRACE_SWITCH(cuptiActivityEnableCudaEventDeviceTimestamps,
                  CuptiMux::kCudaEventDeviceTimestamps)
CUMEMTRACE_SWITCH(cuptiActivityEnableAllSyncRecords, CuptiMux::kAllSyncRecords)
CUMEMTRACE_SWITCH(cuptiActivityEnableDeviceGraph, CuptiMux::kDeviceGraph)
CUMEMTRACE_SWITCH(cuptiActivityEnableHWTrace, CuptiMux::kHWTrace)
CUMEMTRACE_SWITCH(cuptiActivityEnableAllocationSource, CuptiMux::kAllocationSource)
