// What each CUPTI mechanism costs the calling thread, measured in isolation: a stream-ordered
// allocation loop, a sync allocation loop and an empty-kernel launch loop, each run with one
// combination of CUPTI features. It links CUPTI directly and is never traced by cumemtrace;
// it exists to choose how the tracer gets memory records, their thread and their API.
//
//   cupti_cost_probe FEATURES      FEATURES: "none" or a comma list of
//     sub     subscribe (no-op callback), nothing enabled
//     mem     activity MEMORY2            pool   activity MEMORY_POOL
//     kern    activity CONCURRENT_KERNEL
//     cbrt    runtime-domain callbacks for the allocation, free and launch calls
//     cbdrv   driver-domain callbacks for the same calls
//     cbdrvmem driver-domain callbacks for the allocation and free calls only (the tracer's
//             default while PyTorch's tensors come from its allocator: no launch callback)
//     work    callbacks do what the tracer's do (clock, thread id, locked push)
//     actrt   runtime API activity records for those calls only (cuptiActivityEnableRuntimeApi)
//     actdrv  driver API activity records for those calls only
//     alt     alone: the tracer's default subscription switched on and off in one process
//             (AlternateDefaultSubscription; alt:cb and alt:pool switch one part of it)
//     corr    count kernel records whose correlation id a launch callback saw (needs cbrt
//             or cbdrv, and kern): which layer's id the kernel records carry
//
// Prints one JSON line: ns per async alloc+free pair, per sync cudaMalloc+cudaFree pair and per
// launch (median of 5 timed repetitions after a warm-up), the calling thread's own time per
// launch (launch_call_ns: batches of 64 launches, each followed by an untimed sync, so the
// queue never fills and the figure is the launch call's CPU cost, not the GPU's rate), the
// time of calls with no callback in any feature set (driver_call_ns: cuCtxGetCurrent;
// runtime_calls_ns: cudaGetDevice and cudaGetLastError, per pair), and the records CUPTI
// delivered.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace {

#define CHECK_CUDA(x)                                                             \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#define CHECK_CUPTI(x)                                                  \
  do {                                                                  \
    CUptiResult r = (x);                                                \
    if (r != CUPTI_SUCCESS) {                                           \
      const char* s = nullptr;                                          \
      cuptiGetResultString(r, &s);                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s);     \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

__global__ void Empty() {}

bool g_work = false;
std::atomic<uint64_t> g_records{0};
std::atomic<uint64_t> g_callbacks{0};

struct FakeRecord {
  uint64_t timestamp;
  uint32_t correlation;
  uint32_t thread;
  uint16_t api;
  char pad[46];
};
std::mutex g_mutex;
bool g_corr = false;
std::mutex g_corr_mutex;
std::vector<uint32_t> g_launch_ids;  // correlation ids seen by launch callbacks
uint64_t g_kernels = 0;
uint64_t g_kernels_matched = 0;
std::vector<FakeRecord> g_queue;

uint32_t Tid() {
  thread_local uint32_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tid;
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  if (g_corr && call->callbackSite == CUPTI_API_ENTER &&
      (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
       cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
       cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx)) {
    std::lock_guard<std::mutex> lock(g_corr_mutex);
    g_launch_ids.push_back(call->correlationId);
  }
  if (!g_work) return;
  if (call->callbackSite != CUPTI_API_ENTER) return;
  FakeRecord r{};
  r.timestamp = NowNs();
  r.correlation = call->correlationId;
  r.thread = Tid();
  r.api = static_cast<uint16_t>(cbid);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_queue.size() > (1u << 16)) g_queue.clear();
  g_queue.push_back(r);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  uint64_t n = 0;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    ++n;
    if (g_corr && record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const uint32_t id = reinterpret_cast<const CUpti_ActivityKernel10*>(record)->correlationId;
      std::lock_guard<std::mutex> lock(g_corr_mutex);
      ++g_kernels;
      if (std::binary_search(g_launch_ids.begin(), g_launch_ids.end(), id)) ++g_kernels_matched;
    }
  }
  g_records.fetch_add(n);
  free(buffer);
}

const CUpti_CallbackId kRuntimeIds[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000};
const CUpti_CallbackId kDriverIds[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx};

bool Has(const std::string& features, const char* name) {
  std::string list = "," + features + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

// `n` launch calls in batches of 64, each followed by an untimed sync so that the queue never
// fills: the time in the calls themselves, not the GPU's rate.
std::chrono::steady_clock::duration LaunchCalls(cudaStream_t stream, int n) {
  std::chrono::steady_clock::duration in_calls{};
  for (int i = 0; i < n; i += 64) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < 64; ++j) Empty<<<1, 1, 0, stream>>>();
    in_calls += std::chrono::steady_clock::now() - t0;
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  return in_calls;
}

// Calls with no callback of their own in any feature set: a driver call, and the runtime pair
// PyTorch makes around each op.
void DriverCalls(int n) {
  CUcontext context = nullptr;
  for (int i = 0; i < n; ++i) cuCtxGetCurrent(&context);
}
void RuntimeCalls(int n) {
  int device = 0;
  for (int i = 0; i < n; ++i) {
    cudaGetDevice(&device);
    (void)cudaGetLastError();
  }
}

// A body that returns a duration has timed its own part; otherwise the whole body counts.
template <typename F>
double MedianNsPerOp(int ops, F&& body) {
  body(ops / 10);  // warm-up
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration timed = t0 - t0;
    if constexpr (std::is_void_v<decltype(body(ops))>) {
      body(ops);
      timed = std::chrono::steady_clock::now() - t0;
    } else {
      timed = body(ops);
    }
    reps.push_back(std::chrono::duration<double, std::nano>(timed).count() / ops);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

// "alt": the kinds of CUPTI state the tracer's default holds (driver callbacks on allocation
// and free calls, here the four of kDriverIds where the tracer has about sixteen; the
// resource callback for new contexts; MEMORY_POOL records) enabled and disabled every block
// of calls in one process, 20 blocks each, so that both states run at the same CPU speed.
// Prints the median ns per call of each state for a launch (as launch_call_ns), a driver
// call (cuCtxGetCurrent) and a runtime call (cudaGetDevice and cudaGetLastError, which
// PyTorch makes around each op): none of them has a callback of its own in either state.
void AlternateDefaultSubscription(cudaStream_t stream, const std::string& features) {
  // One subscription throughout (CUPTI refuses cuptiSubscribe once activity callbacks are
  // registered): "off" enables nothing in it (what that costs beside no subscription at
  // all: the processes "sub" and "none"). "alt:cb" and "alt:pool" switch only the callbacks
  // or only the records, the other part staying on.
  if (features != "alt" && features != "alt:cb" && features != "alt:pool") {
    fprintf(stderr, "unknown feature set %s (alt, alt:cb or alt:pool)\n", features.c_str());
    exit(2);
  }
  const bool switch_callbacks = features != "alt:pool";
  const bool switch_records = features != "alt:cb";
  CUpti_SubscriberHandle subscriber = nullptr;
  CHECK_CUPTI(cuptiSubscribe(&subscriber, OnCallback, nullptr));
  CHECK_CUPTI(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted));
  auto set = [&](bool on_now) {
    bool on = on_now || !switch_callbacks;
    for (CUpti_CallbackId id : kDriverIds) {
      if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
          id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) {
        continue;
      }
      CHECK_CUPTI(cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id));
    }
    CHECK_CUPTI(cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                    CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
    on = on_now || !switch_records;
    if (on) {
      CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL));
    } else {
      CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY_POOL));
    }
  };
  auto per_call = [](int calls, auto&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    body(calls);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           calls;
  };
  // The kernel's module loads at its first launch: not in a timed block.
  Empty<<<1, 1, 0, stream>>>();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> launch[2], driver[2], runtime[2];
  for (int block = 0; block < 40; ++block) {
    const bool on = (block % 4 == 1) || (block % 4 == 2);  // off on on off: neither goes first
    set(on);
    const auto in_calls = LaunchCalls(stream, 64 * 100);
    launch[on].push_back(std::chrono::duration<double, std::nano>(in_calls).count() / 6400);
    driver[on].push_back(per_call(200000, DriverCalls));
    runtime[on].push_back(per_call(200000, RuntimeCalls));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf(
      "{\"features\": \"%s\", \"launch_call_ns_off\": %.1f, \"launch_call_ns_on\": %.1f, "
      "\"driver_call_ns_off\": %.2f, \"driver_call_ns_on\": %.2f, "
      "\"runtime_calls_ns_off\": %.2f, \"runtime_calls_ns_on\": %.2f, \"callbacks\": %llu}\n",
      features.c_str(), median(launch[0]), median(launch[1]), median(driver[0]), median(driver[1]),
      median(runtime[0]), median(runtime[1]), static_cast<unsigned long long>(g_callbacks.load()));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string features = argc > 1 ? argv[1] : "none";
  g_work = Has(features, "work");
  g_corr = Has(features, "corr");
  const bool driver_memory = Has(features, "cbdrvmem");
  const bool callbacks = Has(features, "cbrt") || Has(features, "cbdrv") || driver_memory;
  const bool activity = Has(features, "mem") || Has(features, "pool") || Has(features, "kern") ||
                        Has(features, "actrt") || Has(features, "actdrv");
  if (Has(features, "sub") || callbacks || activity) {
    CUpti_SubscriberHandle subscriber;
    CHECK_CUPTI(cuptiSubscribe(&subscriber, OnCallback, nullptr));
    if (Has(features, "cbrt")) {
      for (CUpti_CallbackId id : kRuntimeIds) {
        CHECK_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id));
      }
    }
    if (Has(features, "cbdrv") || driver_memory) {
      for (CUpti_CallbackId id : kDriverIds) {
        const bool launch = id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
                            id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
        if (launch && driver_memory) continue;
        CHECK_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id));
      }
    }
  }
  if (activity) CHECK_CUPTI(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted));
  if (Has(features, "mem")) CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2));
  if (Has(features, "pool")) CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL));
  if (Has(features, "kern")) {
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  }
  if (Has(features, "actrt")) {
    for (CUpti_CallbackId id : kRuntimeIds) CHECK_CUPTI(cuptiActivityEnableRuntimeApi(id, 1));
  }
  if (Has(features, "actdrv")) {
    for (CUpti_CallbackId id : kDriverIds) CHECK_CUPTI(cuptiActivityEnableDriverApi(id, 1));
  }

  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t keep = UINT64_MAX;  // like PyTorch's async backend: the pool keeps freed memory
  CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));

  if (features.compare(0, 3, "alt") == 0) {
    AlternateDefaultSubscription(stream, features);
    return 0;
  }

  const double async_pair = MedianNsPerOp(100000, [&](int n) {
    for (int i = 0; i < n; ++i) {
      void* p = nullptr;
      CHECK_CUDA(cudaMallocAsync(&p, 4096, stream));
      CHECK_CUDA(cudaFreeAsync(p, stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
  });
  const double sync_pair = MedianNsPerOp(2000, [&](int n) {
    for (int i = 0; i < n; ++i) {
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, 2 << 20));
      CHECK_CUDA(cudaFree(p));
    }
  });
  const double launch = MedianNsPerOp(100000, [&](int n) {
    for (int i = 0; i < n; ++i) {
      Empty<<<1, 1, 0, stream>>>();
      if (i % 1000 == 999) CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
  });
  const double launch_call =
      MedianNsPerOp(64 * 1000, [&](int n) { return LaunchCalls(stream, n); });
  const double driver_call = MedianNsPerOp(1000000, DriverCalls);
  const double runtime_calls = MedianNsPerOp(1000000, RuntimeCalls);
  if (activity) CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  printf(
      "{\"features\": \"%s\", \"async_pair_ns\": %.1f, \"sync_pair_ns\": %.1f, "
      "\"launch_ns\": %.1f, \"launch_call_ns\": %.1f, \"driver_call_ns\": %.2f, "
      "\"runtime_calls_ns\": %.2f, \"records\": %llu, "
      "\"callbacks\": %llu, \"kernels\": %llu, \"kernels_matched\": %llu}\n",
      features.c_str(), async_pair, sync_pair, launch, launch_call, driver_call, runtime_calls,
      static_cast<unsigned long long>(g_records.load()),
      static_cast<unsigned long long>(g_callbacks.load()),
      static_cast<unsigned long long>(g_kernels),
      static_cast<unsigned long long>(g_kernels_matched));
  return 0;
}
