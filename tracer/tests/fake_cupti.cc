// A stand-in for libcupti.so.13 (same soname, same exported names), for tests without a
// GPU: one subscriber at most, as CUPTI; callbacks and activity records are scripted by the
// test program through the fake_cupti_* calls. Buffers start with an 8-byte header that
// cuptiActivityGetNextRecord checks, so a consumer that builds buffers of its own must copy
// CUPTI's layout exactly.
#include <cupti.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

namespace {

constexpr char kHeader[8] = {'F', 'A', 'K', 'E', 'C', 'P', 'T', 'I'};
constexpr size_t kMaxKind = 128;

struct Subscriber {
  CUpti_CallbackFunc callback;
  void* userdata;
};

std::recursive_mutex g_mutex;
Subscriber* g_subscriber = nullptr;
int g_subscribe_calls = 0;
std::set<std::pair<int, uint32_t>> g_enabled;
bool g_kinds[kMaxKind] = {};
CUpti_BuffersCallbackRequestFunc g_requested = nullptr;
CUpti_BuffersCallbackCompleteFunc g_completed = nullptr;
CUpti_TimestampCallbackFunc g_clock = nullptr;
uint64_t g_fake_time = 1000;
uint8_t* g_buffer = nullptr;
size_t g_size = 0;
size_t g_used = 0;
size_t g_dropped = 0;
uint32_t g_flush_period = 0;
uint8_t g_latency = 0;
// LaunchAttributes, CudaEventDeviceTimestamps, AllSyncRecords, DeviceGraph, HWTrace,
// AllocationSource, in this order (fake_cupti_switches).
uint8_t g_switches[6] = {};
int g_unforced_flushes = 0;  // cuptiActivityFlushAll(0): the tracer's timer, nobody else

size_t RecordSize(uint32_t kind) {
  size_t size = 16;
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      size = sizeof(CUpti_ActivityKernel10);
      break;
    case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
      size = sizeof(CUpti_ActivityMemoryPool3);
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      size = sizeof(CUpti_ActivityMemcpy6);
      break;
    default:
      break;
  }
  return (size + 7) & ~size_t{7};
}

uint64_t Now() { return g_clock != nullptr ? g_clock() : (g_fake_time += 10); }

void CompleteCurrent() {
  if (g_buffer == nullptr) return;
  uint8_t* buffer = g_buffer;
  const size_t size = g_size;
  const size_t used = g_used;
  g_buffer = nullptr;
  g_used = 0;
  if (g_completed != nullptr) g_completed(nullptr, 0, buffer, size, used);
}

}  // namespace

extern "C" {

// --- scripting ----------------------------------------------------------------------------

// Calls the subscriber's callback for (domain, cbid) at the entry and the exit of a call,
// if enabled; `run` is the call itself, between the two.
void fake_cupti_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const char* name,
                     void* params, void* return_value, uint32_t correlation, CUcontext context,
                     const char* symbol, void (*run)(void*), void* run_arg) {
  Subscriber* subscriber = nullptr;
  bool enabled = false;
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    subscriber = g_subscriber;
    enabled = g_enabled.count({domain, cbid}) > 0;
  }
  CUpti_CallbackData data{};
  data.functionName = name;
  data.functionParams = params;
  data.functionReturnValue = return_value;
  data.correlationId = correlation;
  data.context = context;
  data.symbolName = symbol;
  uint64_t correlation_data = 0;
  data.correlationData = &correlation_data;
  if (enabled && subscriber != nullptr && subscriber->callback != nullptr) {
    data.callbackSite = CUPTI_API_ENTER;
    subscriber->callback(subscriber->userdata, domain, cbid, &data);
  }
  if (run != nullptr) run(run_arg);
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    subscriber = g_subscriber;
    enabled = g_enabled.count({domain, cbid}) > 0;
  }
  if (enabled && subscriber != nullptr && subscriber->callback != nullptr) {
    data.callbackSite = CUPTI_API_EXIT;
    subscriber->callback(subscriber->userdata, domain, cbid, &data);
  }
}

void fake_cupti_resource(CUpti_CallbackId cbid, CUcontext context) {
  Subscriber* subscriber = nullptr;
  bool enabled = false;
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    subscriber = g_subscriber;
    enabled = g_enabled.count({CUPTI_CB_DOMAIN_RESOURCE, cbid}) > 0;
  }
  CUpti_ResourceData data{};
  data.context = context;
  if (enabled && subscriber != nullptr && subscriber->callback != nullptr) {
    subscriber->callback(subscriber->userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &data);
  }
}

// Appends one record of `kind` if that kind is enabled; returns 1 if it was made.
int fake_cupti_emit(CUpti_ActivityKind kind, uint32_t correlation, const char* name) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (kind >= kMaxKind || !g_kinds[kind]) return 0;
  const size_t size = RecordSize(kind);
  alignas(8) uint8_t record[512] = {};
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
      k->kind = kind;
      k->correlationId = correlation;
      k->start = Now();
      k->end = Now();
      k->name = name;
      k->gridX = k->gridY = k->gridZ = 1;
      k->blockX = k->blockY = k->blockZ = 32;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
      m->kind = kind;
      m->correlationId = correlation;
      m->start = Now();
      m->end = Now();
      m->bytes = 64;
      break;
    }
    default: {
      auto* a = reinterpret_cast<CUpti_Activity*>(record);
      a->kind = kind;
      break;
    }
  }
  if (g_buffer != nullptr && g_used + size > g_size) CompleteCurrent();
  if (g_buffer == nullptr) {
    uint8_t* buffer = nullptr;
    size_t buffer_size = 0;
    size_t max_records = 0;
    if (g_requested != nullptr) g_requested(&buffer, &buffer_size, &max_records);
    if (buffer == nullptr || buffer_size < sizeof(kHeader) + size) {
      ++g_dropped;
      return 1;
    }
    g_buffer = buffer;
    g_size = buffer_size;
    memcpy(g_buffer, kHeader, sizeof(kHeader));
    g_used = sizeof(kHeader);
  }
  memcpy(g_buffer + g_used, record, size);
  g_used += size;
  return 1;
}

int fake_cupti_subscribe_calls() { return g_subscribe_calls; }
int fake_cupti_has_subscriber() { return g_subscriber != nullptr; }
int fake_cupti_callback_enabled(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_enabled.count({domain, cbid}) > 0;
}
int fake_cupti_domain_count(CUpti_CallbackDomain domain) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  int n = 0;
  for (const auto& e : g_enabled) n += e.first == domain;
  return n;
}
int fake_cupti_kind_enabled(CUpti_ActivityKind kind) { return kind < kMaxKind && g_kinds[kind]; }
uint32_t fake_cupti_flush_period() { return g_flush_period; }
int fake_cupti_latency() { return g_latency; }
// The switches above as a number, one decimal digit each (0 or 1), in their order.
int fake_cupti_switches() {
  int value = 0;
  for (uint8_t on : g_switches) value = value * 10 + (on ? 1 : 0);
  return value;
}
int fake_cupti_unforced_flushes() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_unforced_flushes;
}
int fake_cupti_has_clock(CUpti_TimestampCallbackFunc clock) { return g_clock == clock; }

// --- CUPTI's names ------------------------------------------------------------------------

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  ++g_subscribe_calls;
  if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  if (g_subscriber != nullptr) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscriber = new Subscriber{callback, userdata};
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(g_subscriber);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                       CUpti_CallbackFunc callback, void* userdata,
                                       CUpti_SubscriberParams*) {
  return cuptiSubscribe(subscriber, callback, userdata);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (subscriber == nullptr || reinterpret_cast<Subscriber*>(subscriber) != g_subscriber) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  g_subscriber = nullptr;  // leaked: a stale handle stays a different address
  g_enabled.clear();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (subscriber == nullptr || reinterpret_cast<Subscriber*>(subscriber) != g_subscriber) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  if (enable) {
    g_enabled.insert({domain, cbid});
  } else {
    g_enabled.erase({domain, cbid});
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (subscriber == nullptr || reinterpret_cast<Subscriber*>(subscriber) != g_subscriber) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  uint32_t size = 0;
  switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API: size = CUPTI_DRIVER_TRACE_CBID_SIZE; break;
    case CUPTI_CB_DOMAIN_RUNTIME_API: size = CUPTI_RUNTIME_TRACE_CBID_SIZE; break;
    case CUPTI_CB_DOMAIN_RESOURCE: size = CUPTI_CBID_RESOURCE_SIZE; break;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE: size = CUPTI_CBID_SYNCHRONIZE_SIZE; break;
    case CUPTI_CB_DOMAIN_NVTX: size = CUPTI_CBID_NVTX_SIZE; break;
    case CUPTI_CB_DOMAIN_STATE: size = CUPTI_CBID_STATE_SIZE; break;
    default: return CUPTI_ERROR_INVALID_PARAMETER;
  }
  for (uint32_t id = 0; id < size; ++id) {
    if (enable) {
      g_enabled.insert({domain, id});
    } else {
      g_enabled.erase({domain, id});
    }
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
  for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    const CUptiResult r = cuptiEnableDomain(enable, subscriber, static_cast<CUpti_CallbackDomain>(d));
    if (r != CUPTI_SUCCESS) return r;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                           CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (enable == nullptr || reinterpret_cast<Subscriber*>(subscriber) != g_subscriber) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  *enable = g_enabled.count({domain, cbid}) > 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiFinalize(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_subscriber = nullptr;
  g_enabled.clear();
  for (bool& k : g_kinds) k = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                    CUpti_BuffersCallbackCompleteFunc completed) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  g_requested = requested;
  g_completed = completed;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind <= 0 || kind >= kMaxKind) return CUPTI_ERROR_INVALID_KIND;
  g_kinds[kind] = true;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableAndDump(CUpti_ActivityKind kind) {
  return cuptiActivityEnable(kind);
}
CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind <= 0 || kind >= kMaxKind) return CUPTI_ERROR_INVALID_KIND;
  g_kinds[kind] = false;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableContext(CUcontext, CUpti_ActivityKind kind) {
  return cuptiActivityEnable(kind);
}
CUptiResult CUPTIAPI cuptiActivityDisableContext(CUcontext, CUpti_ActivityKind kind) {
  return cuptiActivityDisable(kind);
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if ((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == 0) ++g_unforced_flushes;
  if (g_buffer != nullptr && (g_used > sizeof(kHeader) || (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED))) {
    CompleteCurrent();
  }
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityFlush(CUcontext, uint32_t, uint32_t flag) {
  return cuptiActivityFlushAll(flag);
}
CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time) {
  g_flush_period = time;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr || valid < sizeof(kHeader) ||
      memcmp(buffer, kHeader, sizeof(kHeader)) != 0) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  uint8_t* at = *record == nullptr
                    ? buffer + sizeof(kHeader)
                    : reinterpret_cast<uint8_t*>(*record) + RecordSize((*record)->kind);
  if (at + sizeof(CUpti_Activity) > buffer + valid) {
    *record = nullptr;
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  *record = reinterpret_cast<CUpti_Activity*>(at);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = g_dropped;
  g_dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetAttribute(CUpti_ActivityAttribute, size_t* size, void* value) {
  if (size == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  memset(value, 0, *size);
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute, size_t*, void*) {
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc clock) {
  g_clock = clock;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = Now();
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable) {
  g_latency = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableLaunchAttributes(uint8_t enable) {
  g_switches[0] = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable) {
  g_switches[1] = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableAllSyncRecords(uint8_t enable) {
  g_switches[2] = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableDeviceGraph(uint8_t enable) {
  g_switches[3] = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableHWTrace(uint8_t enable) {
  g_switches[4] = enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableAllocationSource(uint8_t enable) {
  g_switches[5] = enable;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** text) {
  if (text == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *text = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext, uint32_t* device) {
  if (device == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *device = 0;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext, CUstream, uint8_t, uint32_t* id) {
  if (id == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *id = 7;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

}  // extern "C"
