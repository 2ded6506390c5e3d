// A CUDA program and its own CUPTI client (as torch.profiler's Kineto is), run against the
// fake libcupti with the tracer preloaded. The program's driver calls and kernels are
// scripted through the fake; the client subscribes, enables, flushes, unsubscribes and
// subscribes again, and misbehaves on purpose. The client's checks are made here (what it
// must receive: exactly its own callbacks and records, in order); the test that runs this
// checks what reached the tracer's collector.
//
//   cupti_mux_probe shared            the multiplexed run (exit 0 when every check holds)
//   cupti_mux_probe fallback COPY     a second CUPTI (COPY, loaded by full path): hand-over
//   cupti_mux_probe other-tool        CUDA_INJECTION64_PATH names another tool: step aside
//   cupti_mux_probe torch-unwatched C10
//                                     PyTorch's allocator (C10, a stand-in libc10_cuda.so)
//                                     with no bridge: launches are counted from then on
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

extern "C" {
void fake_cupti_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const char* name,
                     void* params, void* return_value, uint32_t correlation, CUcontext context,
                     const char* symbol, void (*run)(void*), void* run_arg);
void fake_cupti_resource(CUpti_CallbackId cbid, CUcontext context);
int fake_cupti_emit(CUpti_ActivityKind kind, uint32_t correlation, const char* name);
int fake_cupti_subscribe_calls();
int fake_cupti_has_subscriber();
int fake_cupti_callback_enabled(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
int fake_cupti_domain_count(CUpti_CallbackDomain domain);
int fake_cupti_kind_enabled(CUpti_ActivityKind kind);
uint32_t fake_cupti_flush_period();
int fake_cupti_latency();
int fake_cupti_unforced_flushes();
int fake_cupti_switches();
}

namespace {

int g_failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      printf("FAIL line %d: %s\n", __LINE__, #cond);                  \
      ++g_failures;                                                   \
    }                                                                 \
  } while (0)

CUcontext const kContext = reinterpret_cast<CUcontext>(0x1000);
uint32_t g_correlation = 100;
std::vector<uint32_t> g_launches;
uint64_t g_next_address = 0x7000000;

// --- the program's CUDA work, as the driver would report it ---------------------------------

void RunAlloc(void* arg) {
  auto* params = static_cast<cuMemAlloc_v2_params*>(arg);
  *params->dptr = g_next_address;
  g_next_address += 0x10000;
}

uint64_t Alloc(size_t bytes) {
  CUdeviceptr address = 0;
  cuMemAlloc_v2_params params{&address, bytes};
  CUresult status = CUDA_SUCCESS;
  fake_cupti_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                  "cuMemAlloc_v2", &params, &status, ++g_correlation, kContext, nullptr, RunAlloc,
                  &params);
  return address;
}

void Free(uint64_t address) {
  cuMemFree_v2_params params{address};
  CUresult status = CUDA_SUCCESS;
  fake_cupti_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2",
                  &params, &status, ++g_correlation, kContext, nullptr, nullptr, nullptr);
}

// A launch and its kernel record; returns the correlation id.
uint32_t Launch() {
  cuLaunchKernel_params params{};
  CUresult status = CUDA_SUCCESS;
  const uint32_t correlation = ++g_correlation;
  fake_cupti_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                  "cuLaunchKernel", &params, &status, correlation, kContext, "probe_kernel",
                  nullptr, nullptr);
  fake_cupti_emit(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, correlation, "probe_kernel");
  g_launches.push_back(correlation);
  return correlation;
}

uint32_t Memcpy() {
  const uint32_t correlation = ++g_correlation;
  fake_cupti_emit(CUPTI_ACTIVITY_KIND_MEMCPY, correlation, nullptr);
  return correlation;
}

void RuntimeMalloc() {
  int status = 0;
  fake_cupti_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                  "cudaMalloc_v3020", nullptr, &status, ++g_correlation, kContext, nullptr,
                  nullptr, nullptr);
}

// --- the program's own CUPTI client ---------------------------------------------------------

struct Seen {
  int domain;
  uint32_t cbid;
  int site;
  uint32_t correlation;
  bool operator==(const Seen& o) const {
    return domain == o.domain && cbid == o.cbid && site == o.site && correlation == o.correlation;
  }
};
std::vector<Seen> g_client_calls;
std::vector<std::pair<uint32_t, uint32_t>> g_client_records;  // (kind, correlation)
size_t g_client_buffer_bytes = 1024;
int g_buffers_requested = 0;
int g_buffers_completed = 0;
bool g_reject_buffers = false;
CUpti_SubscriberHandle g_self_unsubscribe = nullptr;

void CUPTIAPI ClientCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    g_client_calls.push_back({domain, cbid, 0, 0});
    return;
  }
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  g_client_calls.push_back({domain, cbid, static_cast<int>(call->callbackSite), call->correlationId});
  if (g_self_unsubscribe != nullptr) {
    CUpti_SubscriberHandle handle = g_self_unsubscribe;
    g_self_unsubscribe = nullptr;
    CHECK(cuptiUnsubscribe(handle) == CUPTI_SUCCESS);  // from inside its own callback
  }
}

void CUPTIAPI ClientRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  ++g_buffers_requested;
  *max_records = 0;
  if (g_reject_buffers) {
    *buffer = static_cast<uint8_t*>(malloc(8));  // a buffer of size 0: a bug to contain
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, g_client_buffer_bytes));
  *size = g_client_buffer_bytes;
}

// The (kind, correlation) of each record in a buffer CUPTI completed.
void ReadRecords(uint8_t* buffer, size_t valid, std::vector<std::pair<uint32_t, uint32_t>>* out) {
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    uint32_t correlation = 0;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      correlation = reinterpret_cast<CUpti_ActivityKernel10*>(record)->correlationId;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      correlation = reinterpret_cast<CUpti_ActivityMemcpy6*>(record)->correlationId;
    }
    out->push_back({static_cast<uint32_t>(record->kind), correlation});
  }
}

void CUPTIAPI ClientCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t size, size_t valid) {
  ++g_buffers_completed;
  CHECK(size == g_client_buffer_bytes || size == 0);
  ReadRecords(buffer, valid, &g_client_records);
  free(buffer);
}

// A client that keeps its buffers as Kineto does (CuptiActivityApi.cpp): the ones CUPTI
// holds in `allocated`, the completed ones in `ready`; at the end of a profiling window it
// flushes CUPTI only if `allocated` is not empty, i.e. only if CUPTI ever asked it for a
// buffer, and takes what is ready. Its callbacks may run on the tracer's flush thread.
struct KinetoLike {
  std::mutex mutex;
  std::set<uint8_t*> allocated;
  std::vector<std::pair<uint8_t*, size_t>> ready;
  int requested = 0;
};
KinetoLike g_kineto;

void CUPTIAPI KinetoRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  std::lock_guard<std::mutex> lock(g_kineto.mutex);
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, 4096));
  *size = 4096;
  *max_records = 0;
  g_kineto.allocated.insert(*buffer);
  ++g_kineto.requested;
}

void CUPTIAPI KinetoCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_kineto.mutex);
  const bool known = g_kineto.allocated.erase(buffer) > 0;
  CHECK(known);  // Kineto logs "unknown buffer" and drops it
  if (known) g_kineto.ready.push_back({buffer, valid});
}

// Kineto's activityBuffers(): the records of the window.
std::vector<std::pair<uint32_t, uint32_t>> KinetoCollect() {
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(g_kineto.mutex);
    any = !g_kineto.allocated.empty();
  }
  if (any) CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS);
  std::vector<std::pair<uint32_t, uint32_t>> records;
  std::lock_guard<std::mutex> lock(g_kineto.mutex);
  for (const auto& [buffer, valid] : g_kineto.ready) {
    ReadRecords(buffer, valid, &records);
    free(buffer);
  }
  g_kineto.ready.clear();
  return records;
}

uint64_t CUPTIAPI ClientClock() {
  // A clock of its own, in ticks of 4 ns since a made-up origin (as Kineto's TSC).
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec)) / 4 +
         5000000000000ull;
}

void InitDriver() {
  // What the driver does at cuInit with CUDA_INJECTION64_PATH.
  const char* injection = getenv("CUDA_INJECTION64_PATH");
  if (injection == nullptr) return;
  void* handle = dlopen(injection, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return;
  auto init = reinterpret_cast<int (*)()>(dlsym(handle, "InitializeInjection"));
  if (init != nullptr) init();
}

int Shared() {
  // CUMEMTRACE_KERNELS=1: the tracer wants kernel records too (shared with the client);
  // "launches": it counts kernels at their launch, and CONCURRENT_KERNEL is the client's
  // alone; unset: it does not watch launches at all.
  const char* kernels = getenv("CUMEMTRACE_KERNELS");
  const bool tracer_kernel_records = kernels != nullptr && kernels[0] == '1';
  const bool tracer_launches =
      tracer_kernel_records || (kernels != nullptr && strcmp(kernels, "launches") == 0);
  InitDriver();
  fake_cupti_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, kContext);
  CHECK(fake_cupti_has_subscriber());  // the tracer's subscription

  // Before any client: the tracer alone.
  const uint64_t a1 = Alloc(4096);
  Launch();
  Free(a1);

  // The client subscribes (it reaches the tracer's cuptiSubscribe) and enables what it
  // wants, some shared with the tracer, some not.
  CUpti_SubscriberHandle client = nullptr;
  CHECK(cuptiSubscribe(&client, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CUpti_SubscriberHandle second = nullptr;
  CHECK(cuptiSubscribe(&second, ClientCallback, nullptr) ==
        CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == CUPTI_SUCCESS);
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) == CUPTI_SUCCESS);
  CHECK(cuptiEnableDomain(1, client, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS);
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_RESOURCE,
                            CUPTI_CBID_RESOURCE_CONTEXT_CREATED) == CUPTI_SUCCESS);
  uint32_t state = 0;
  CHECK(cuptiGetCallbackState(&state, client, CUPTI_CB_DOMAIN_DRIVER_API,
                              CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2) == CUPTI_SUCCESS);
  CHECK(state == 0);  // the tracer has it on; the client did not ask
  CHECK(cuptiActivityRegisterCallbacks(nullptr, nullptr) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cuptiActivityRegisterCallbacks(ClientRequested, ClientCompleted) == CUPTI_SUCCESS);
  CHECK(cuptiActivityRegisterTimestampCallback(ClientClock) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  CHECK(cuptiActivityFlushPeriod(50) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableLatencyTimestamps(1) == CUPTI_SUCCESS);
  // The other process-wide switches (Kineto turns CudaEventDeviceTimestamps on for its
  // CUDA_SYNC activity): reach CUPTI, and are off again after the client.
  CHECK(cuptiActivityEnableLaunchAttributes(1) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableCudaEventDeviceTimestamps(1) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableAllSyncRecords(1) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableDeviceGraph(1) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableHWTrace(1) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnableAllocationSource(1) == CUPTI_SUCCESS);
  CHECK(fake_cupti_switches() == 111111);

  std::vector<Seen> expected_calls;
  std::vector<std::pair<uint32_t, uint32_t>> expected_records;
  fake_cupti_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, kContext);
  expected_calls.push_back({CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, 0, 0});
  const uint64_t a2 = Alloc(8192);
  expected_calls.push_back({CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                            CUPTI_API_ENTER, g_correlation});
  expected_calls.push_back({CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                            CUPTI_API_EXIT, g_correlation});
  for (int i = 0; i < 12; ++i) {  // enough records for several of the client's 1 KiB buffers
    const uint32_t k = Launch();
    expected_calls.push_back({CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                              CUPTI_API_ENTER, k});
    expected_calls.push_back({CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                              CUPTI_API_EXIT, k});
    expected_records.push_back({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, k});
    if (i % 3 == 0) expected_records.push_back({CUPTI_ACTIVITY_KIND_MEMCPY, Memcpy()});
  }
  RuntimeMalloc();
  expected_calls.push_back({CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                            CUPTI_API_ENTER, g_correlation});
  expected_calls.push_back({CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                            CUPTI_API_EXIT, g_correlation});
  Free(a2);  // the tracer's alone: the client does not see it

  // Kineto's stop: disable, then a forced flush.
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  CHECK(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == tracer_kernel_records);
  CHECK(!fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMCPY));
  CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS);
  CHECK(g_client_calls == expected_calls);
  CHECK(g_client_records == expected_records);
  CHECK(g_buffers_completed >= 2);
  printf("client: %zu callbacks, %zu records in %d buffers\n", g_client_calls.size(),
         g_client_records.size(), g_buffers_completed);
  size_t dropped = 99;
  CHECK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS);
  CHECK(dropped == 0);

  // After the kinds are off: kernels go on for the tracer, not for the client.
  const size_t records_before = g_client_records.size();
  Launch();
  CHECK(cuptiActivityFlushAll(0) == CUPTI_SUCCESS);
  CHECK(g_client_records.size() == records_before);

  // Unsubscribe: callbacks stop, and what only the client wanted is off in CUPTI again.
  CHECK(cuptiUnsubscribe(client) == CUPTI_SUCCESS);
  CHECK(cuptiUnsubscribe(client) == CUPTI_ERROR_INVALID_PARAMETER);  // twice: contained
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) ==
        CUPTI_ERROR_INVALID_PARAMETER);  // a stale handle
  CHECK(fake_cupti_domain_count(CUPTI_CB_DOMAIN_RUNTIME_API) == 0);
  CHECK(fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
                                    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2));  // the tracer's
  CHECK(fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
                                    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == tracer_launches);
  CHECK(fake_cupti_flush_period() == 0);
  CHECK(fake_cupti_latency() == 0);
  CHECK(fake_cupti_switches() == 0);
  const size_t calls_before = g_client_calls.size();
  Launch();
  const uint64_t a3 = Alloc(16384);
  CHECK(g_client_calls.size() == calls_before);

  // Subscribe again: a new handle, its own callbacks only; a client that rejects buffers
  // loses its records (counted), the tracer does not.
  CUpti_SubscriberHandle again = nullptr;
  CHECK(cuptiSubscribe(&again, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CHECK(again != client);
  CHECK(cuptiEnableCallback(1, again, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == CUPTI_SUCCESS);
  g_reject_buffers = true;
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  const uint32_t k = Launch();
  CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS);
  CHECK(g_client_calls.size() == calls_before + 2);
  CHECK(g_client_calls.back().correlation == k);
  CHECK(g_client_records.size() == records_before);
  CHECK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS);
  CHECK(dropped == 1);
  g_reject_buffers = false;
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  CHECK(cuptiUnsubscribe(again) == CUPTI_SUCCESS);

  // A null callback is never called; an unsubscribe from inside the client's own callback
  // neither deadlocks nor waits for itself.
  CUpti_SubscriberHandle null_callback = nullptr;
  CHECK(cuptiSubscribe(&null_callback, nullptr, nullptr) == CUPTI_SUCCESS);
  CHECK(cuptiEnableDomain(1, null_callback, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS);
  Launch();
  CHECK(cuptiUnsubscribe(null_callback) == CUPTI_SUCCESS);
  CHECK(fake_cupti_domain_count(CUPTI_CB_DOMAIN_DRIVER_API) <
        static_cast<int>(CUPTI_DRIVER_TRACE_CBID_SIZE) / 2);
  CUpti_SubscriberHandle self = nullptr;
  CHECK(cuptiSubscribe(&self, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CHECK(cuptiEnableCallback(1, self, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == CUPTI_SUCCESS);
  g_self_unsubscribe = self;
  const size_t calls_self = g_client_calls.size();
  Launch();
  CHECK(g_client_calls.size() == calls_self + 1);  // the entry; unsubscribed before the exit
  Launch();
  CHECK(g_client_calls.size() == calls_self + 1);

  // Profiling windows of a Kineto-like client, short enough to end before the tracer's next
  // flush: CUPTI would have asked the client for a buffer as soon as records came, so the
  // client, which flushes only if it holds one, gets the window's records at its flush. The
  // windows alternate the client's order of registering its buffer callbacks and enabling.
  // A window the tracer's timer flushed into is checked too, but only windows it did not
  // touch show that the client's own flush delivers the records: three of those are needed.
  CUpti_SubscriberHandle kineto = nullptr;
  CHECK(cuptiSubscribe(&kineto, ClientCallback, nullptr) == CUPTI_SUCCESS);
  int untouched = 0;
  for (int window = 0; window < 50 && untouched < 3; ++window) {
    const int timer_flushes = fake_cupti_unforced_flushes();
    if (window % 2 == 0) {
      CHECK(cuptiActivityRegisterCallbacks(KinetoRequested, KinetoCompleted) == CUPTI_SUCCESS);
    }
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
    if (window % 2 == 1) {
      CHECK(cuptiActivityRegisterCallbacks(KinetoRequested, KinetoCompleted) == CUPTI_SUCCESS);
    }
    std::vector<std::pair<uint32_t, uint32_t>> expected;
    for (int i = 0; i < 3; ++i) expected.push_back({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, Launch()});
    expected.push_back({CUPTI_ACTIVITY_KIND_MEMCPY, Memcpy()});
    CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
    CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
    const bool touched = fake_cupti_unforced_flushes() != timer_flushes;
    const auto got = KinetoCollect();
    if (got != expected) {
      printf("kineto-like window %d%s: %zu of %zu records\n", window,
             touched ? " (the tracer flushed during it)" : "", got.size(), expected.size());
    }
    CHECK(got == expected);
    untouched += touched ? 0 : 1;
  }
  CHECK(untouched == 3);
  // A client that collects while its kinds stay on (Kineto's continuous tracing): after
  // its flush handed its buffer back, CUPTI would ask for another with the next record, so
  // its next collection finds one to flush.
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  untouched = 0;
  for (int round = 0; round < 50 && untouched < 3; ++round) {
    const int timer_flushes = fake_cupti_unforced_flushes();
    const uint32_t launched = Launch();
    const bool touched = fake_cupti_unforced_flushes() != timer_flushes;
    const auto got = KinetoCollect();
    const std::vector<std::pair<uint32_t, uint32_t>> expected{
        {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, launched}};
    if (got != expected) {
      printf("kineto-like collection %d with the kind on%s: %zu records\n", round,
             touched ? " (the tracer flushed meanwhile)" : "", got.size());
    }
    CHECK(got == expected);
    untouched += touched ? 0 : 1;
  }
  CHECK(untouched == 3);
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  CHECK(KinetoCollect().empty());
  {
    // One buffer at a time, not one more per window.
    std::lock_guard<std::mutex> lock(g_kineto.mutex);
    CHECK(g_kineto.allocated.size() <= 1);
    printf("kineto-like client: %d buffers requested\n", g_kineto.requested);
  }
  CHECK(cuptiUnsubscribe(kineto) == CUPTI_SUCCESS);
  CHECK(KinetoCollect().empty());

  // Kineto's teardown: cuptiFinalize. CUPTI stays up for the tracer.
  CUpti_SubscriberHandle last = nullptr;
  CHECK(cuptiSubscribe(&last, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  CHECK(cuptiFinalize() == CUPTI_SUCCESS);
  CHECK(!fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_MEMCPY));
  CHECK(fake_cupti_kind_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == tracer_kernel_records);
  CHECK(fake_cupti_has_subscriber());
  CHECK(cuptiUnsubscribe(last) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(fake_cupti_subscribe_calls() == 1);  // only ever the tracer's

  Free(a3);
  printf("launched:");
  for (uint32_t id : g_launches) printf(" %u", id);
  printf("\nprobe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int Fallback(const char* copy) {
  InitDriver();
  CHECK(fake_cupti_has_subscriber());
  const uint64_t a1 = Alloc(4096);
  // A second CUPTI in the process, loaded by full path.
  void* second = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
  CHECK(second != nullptr);
  CUpti_SubscriberHandle client = nullptr;
  CHECK(cuptiSubscribe(&client, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CHECK(fake_cupti_subscribe_calls() == 2);  // the tracer's, then the client's own
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2) == CUPTI_SUCCESS);
  Free(a1);
  CHECK(g_client_calls.size() == 2);
  CHECK(cuptiUnsubscribe(client) == CUPTI_SUCCESS);
  printf("probe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

// The stand-in libc10_cuda's call that makes a segment (fake_c10_cuda_segment.cc), or null.
uint64_t (*FakeSegmentCall(const char* c10_cuda))(size_t, uint32_t) {
  void* c10 = dlopen(c10_cuda, RTLD_NOW | RTLD_LOCAL);
  return c10 != nullptr ? reinterpret_cast<uint64_t (*)(size_t, uint32_t)>(
                              dlsym(c10, "fake_c10_cuda_segment"))
                        : nullptr;
}

int TorchUnwatched(const char* c10_cuda) {
  const auto segment = FakeSegmentCall(c10_cuda);
  CHECK(segment != nullptr);
  if (segment == nullptr) return 1;
  InitDriver();
  fake_cupti_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, kContext);
  Launch();  // before PyTorch's allocator: not watched
  CHECK(!fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
  CHECK(segment(2 << 20, ++g_correlation) != 0);
  // The tracer's sender turns the launch callbacks on at its next drain (every 10 ms).
  for (int i = 0; i < 300 && !fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
                                                           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
       ++i) {
    const timespec pause{0, 10 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  CHECK(fake_cupti_callback_enabled(CUPTI_CB_DOMAIN_DRIVER_API,
                                    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
  printf("counted:");
  for (int i = 0; i < 3; ++i) printf(" %u", Launch());
  printf("\nprobe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

// PyTorch's allocator with a bridge for its version (fake_torch_bridge.cc): its first
// segment attaches the bridge, whose threads then emit tensor events into the tracer
// (fake_torch_bridge_emit's threads, events, work_kib and pace_ns).
int TorchBridge(const char* c10_cuda, const char* bridge, int threads, int events, int work_kib,
                int pace_ns) {
  const auto segment = FakeSegmentCall(c10_cuda);
  CHECK(segment != nullptr);
  if (segment == nullptr) return 1;
  InitDriver();
  fake_cupti_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, kContext);
  CHECK(segment(2 << 20, ++g_correlation) != 0);
  // Loaded by the tracer at that segment: found, not loaded again.
  void* shim = dlopen(bridge, RTLD_NOW | RTLD_NOLOAD);
  auto emit =
      shim != nullptr
          ? reinterpret_cast<int (*)(int, int, int, int)>(dlsym(shim, "fake_torch_bridge_emit"))
          : nullptr;
  CHECK(emit != nullptr);
  if (emit == nullptr) return 1;
  printf("refused: %d\n", emit(threads, events, work_kib, pace_ns));
  printf("probe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int OtherTool() {
  InitDriver();  // the other tool's library: no InitializeInjection of the tracer's runs
  CHECK(!fake_cupti_has_subscriber());
  CUpti_SubscriberHandle client = nullptr;
  CHECK(cuptiSubscribe(&client, ClientCallback, nullptr) == CUPTI_SUCCESS);
  CHECK(cuptiEnableCallback(1, client, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) == CUPTI_SUCCESS);
  Alloc(4096);
  CHECK(g_client_calls.size() == 2);
  CHECK(fake_cupti_subscribe_calls() == 1);
  printf("probe: %d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "shared";
  if (mode == "shared") return Shared();
  if (mode == "fallback" && argc > 2) return Fallback(argv[2]);
  if (mode == "other-tool") return OtherTool();
  if (mode == "torch-unwatched" && argc > 2) return TorchUnwatched(argv[2]);
  if (mode == "torch-bridge" && argc > 3) {
    // Optional: THREADS EVENTS WORK_KIB PACE_NS (the tests' 3 threads of 3,000 events as
    // fast as they go).
    return TorchBridge(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 3,
                       argc > 5 ? atoi(argv[5]) : 3000, argc > 6 ? atoi(argv[6]) : 0,
                       argc > 7 ? atoi(argv[7]) : 0);
  }
  return 2;
}
