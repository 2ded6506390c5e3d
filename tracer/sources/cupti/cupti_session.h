// Everything the tracer does with CUPTI: dlopen it by soname (never by path: a second CUPTI
// in one process breaks both), subscribe to the few driver callbacks it needs, enable the
// pool and kernel activity kinds, and hand completed buffers to the sender thread.
//
// Memory comes from the driver callbacks of the allocation and release calls themselves, not
// from CUPTI's MEMORY2 activity records: those cost about 1.4 us per stream-ordered
// allocation+free pair in CUPTI itself (benchmarks/gpu/cupti_cost_probe.cu), several times
// the callbacks' cost, and the callbacks are needed anyway for the thread, the caller and
// failed calls. CUMEMTRACE_MEMORY_RECORDS=cupti switches back to MEMORY2 records, to check
// one source against the other.
#pragma once

#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tracer/recording/api_catalog.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"

namespace cumemtrace::tracer {

// CUPTI entry points, resolved with dlsym from the already-loaded (or soname-loaded) copy.
struct CuptiApi {
  decltype(&cuptiSubscribe) Subscribe = nullptr;
  decltype(&cuptiUnsubscribe) Unsubscribe = nullptr;
  decltype(&cuptiActivityDisable) ActivityDisable = nullptr;
  decltype(&cuptiEnableCallback) EnableCallback = nullptr;
  decltype(&cuptiEnableDomain) EnableDomain = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) ActivityRegisterCallbacks = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) ActivityRegisterTimestampCallback = nullptr;
  decltype(&cuptiActivityEnable) ActivityEnable = nullptr;
  decltype(&cuptiActivityFlushAll) ActivityFlushAll = nullptr;
  decltype(&cuptiActivityGetNextRecord) ActivityGetNextRecord = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) ActivityGetNumDroppedRecords = nullptr;
  decltype(&cuptiActivityGetAttribute) ActivityGetAttribute = nullptr;
  decltype(&cuptiGetResultString) GetResultString = nullptr;
  decltype(&cuptiGetDeviceId) GetDeviceId = nullptr;
  decltype(&cuptiGetStreamIdEx) GetStreamIdEx = nullptr;
  // Optional: only a client of the program's calls them through the mux (cupti_mux.h).
  decltype(&cuptiActivityEnableAndDump) ActivityEnableAndDump = nullptr;
  decltype(&cuptiActivityEnableContext) ActivityEnableContext = nullptr;
  decltype(&cuptiActivityDisableContext) ActivityDisableContext = nullptr;
  decltype(&cuptiActivityFlushPeriod) ActivityFlushPeriod = nullptr;
  // Process-wide switches a client may turn on (cupti_mux.h: CuptiMux::Switch), by index.
  using SwitchFunc = CUptiResult(CUPTIAPI*)(uint8_t);
  SwitchFunc Switches[7] = {};
};


// Driver entry points, resolved from the libcuda the program already loaded.
struct DriverApi {
  decltype(&cuDeviceGet) DeviceGet = nullptr;
  decltype(&cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&cuDeviceGetUuid_v2) DeviceGetUuid = nullptr;
  decltype(&cuDeviceTotalMem_v2) DeviceTotalMem = nullptr;
  decltype(&cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&cuMemGetInfo_v2) MemGetInfo = nullptr;
  decltype(&cuGetErrorName) GetErrorName = nullptr;
};

struct CompletedBuffer {
  uint8_t* data = nullptr;
  size_t valid_bytes = 0;
  // Completed after a client of the program's gave CUPTI its own clock: its timestamps are
  // on that clock (CuptiSession::ClockMapFor).
  bool client_clock = false;
};

// How kernels are recorded (CUMEMTRACE_KERNELS).
// Any per-launch callback costs 1-2 us per launch in a PyTorch program (CUPTI's dispatch
// alone about 0.5 us): 1.3x on a launch-bound training step. So by default no launch is
// watched, unless phase inference needs launches because tensors are not seen.
enum class KernelRecording : uint8_t {
  kNone,      // "0" (`run --no-kernels`): memory and NVTX only
  kAuto,      // the default: as kNone, but switches to kLaunches when PyTorch's caching
              // allocator turns out to be unwatched (no bridge): its tensors then give phase
              // inference no signal, and the autograd thread's launches do
  kLaunches,  // "launches" (`run --kernels=launches`): one event per launch from the driver
              // launch callback (thread, host time, name), without GPU times
  kRecords,   // "1" (`run --kernels`): CONCURRENT_KERNEL records too, for GPU times
};

// CUMEMTRACE_KERNELS: unset or "auto", "0", "launches", "1" or "records".
KernelRecording ParseKernelRecording(const char* value);

// What the CUPTI source asks of the process layer, which installs it when it is made
// (process/tracer_runtime.cc), before the session can start: an entry left null does
// nothing (and share_with_client answers false), as for a tracer that has not started.
struct CuptiSessionHooks {
  // The program made its first CUPTI call that reaches the tracer (cupti_mux.h): starts the
  // session if it has not started yet; whether the program's calls can share it, else hands
  // CUPTI over (CuptiSession::HandOver).
  bool (*share_with_client)() = nullptr;
  // The program's own CUPTI client took CUPTI over (HandOver): say so, wake the sender.
  void (*handed_over)() = nullptr;
  // A buffer completed (BufferCompleted, on CUPTI's thread).
  void (*wake_sender)() = nullptr;
  // A CUDA context was created on `device` (resource callback, program thread).
  void (*context_created)(uint32_t device) = nullptr;
};

class CuptiSession {
 public:
  void set_hooks(const CuptiSessionHooks& hooks) { hooks_ = hooks; }
  const CuptiSessionHooks& hooks() const { return hooks_; }

  // Loads and starts CUPTI. On failure returns false with a stable code and a one-line text.
  bool Start(KernelRecording kernels, std::string* code, std::string* text);
  bool started() const { return started_.load(std::memory_order_acquire); }

  // kAuto: start counting launches (the sender calls this outside any CUPTI callback).
  // Returns true if it switched; false in any other mode or when CUPTI is not running.
  bool CountLaunchesFromNow();

  // Whether the program's CUPTI calls that reach the tracer's exported cupti* names can be
  // served by the mux (cupti_mux.h): the CUPTI the tracer uses is the only one in the
  // process. A second copy (loaded by full path, or linked statically and exported) would
  // see calls the tracer cannot stand between.
  bool InterpositionSafe();
  // The fallback when it cannot: the tracer flushes what it has, unsubscribes and disables
  // its kinds, and says so once; the program's calls then go to CUPTI unchanged.
  void HandOver();
  bool handed_over() const { return handed_over_.load(); }

  // Asks CUPTI to deliver what it holds (forced: also buffers still being filled).
  // Never called with the tracer's own locks held: CUPTI calls back into BufferCompleted.
  void Flush(bool forced);
  void TakeCompletedBuffers(std::vector<CompletedBuffer>* out);
  // The records of the kinds the tracer enabled (a client's kinds share the buffers).
  template <typename F>
  void ForEachRecord(const CompletedBuffer& buffer, F&& f) {
    CUpti_Activity* record = nullptr;
    while (api_.ActivityGetNextRecord(buffer.data, buffer.valid_bytes, &record) ==
           CUPTI_SUCCESS) {
      if (OwnKind(record->kind)) f(record);
    }
  }
  void RecycleBuffer(uint8_t* data);
  // Records CUPTI (or the tracer's bound on undelivered buffers) dropped since the last call.
  uint64_t TakeDroppedRecords();
  void AddDroppedRecords(uint64_t count);
  // CUPTI timestamps -> CLOCK_MONOTONIC for the records of one buffer. Sender thread only:
  // once a client registered its own clock, this calls it to measure the map.
  const CuptiClockMap& ClockMapFor(const CompletedBuffer& buffer);
  // A client of the program's is about to give CUPTI its own clock (from the mux, no lock
  // held): what CUPTI holds is flushed first, on the old clock; buffers completed from now on
  // are read on the new one.
  void BeforeClientClock();
  void AfterClientClock();
  const CuptiApi& api() const { return api_; }
  // Device memory CUPTI reserves per context for its buffers (an estimate for the report).
  uint64_t device_buffer_bytes_per_context() const { return device_buffer_bytes_; }

  // In a forked child: CUPTI's state is the parent's, and CUDA cannot be used in a child of
  // a process that initialized it. Forget the session without calling CUPTI; the child's
  // sender then never touches CUPTI or the parent's buffers.
  void ForgetInChildAfterFork();

  const DriverApi& driver() const { return driver_; }
  bool LoadDriver();

  static CuptiSession& Get();

 private:
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                       size_t size, size_t valid_size);
  static void CUPTIAPI OnCallback(void* userdata, CUpti_CallbackDomain domain,
                                  CUpti_CallbackId cbid, const void* data);
  bool LoadCupti(std::string* error);
  // The driver callbacks of the catalog's launch calls, or of all its other calls.
  void EnableDriverCallbacks(bool launches);
  // The device of a callback's context, and CUPTI's id of a stream (as in kernel records).
  uint32_t ContextDevice(CUcontext context);
  uint32_t StreamId(CUcontext context, CUstream stream, bool per_thread);
  // A kernel launch, at the entry of its call (KernelRecording::kLaunches).
  HostRecord LaunchRecord(int row, const CUpti_CallbackData* call);
  // What an allocation (at its exit) or a release (at its entry) call did to memory.
  HostRecord MemoryRecord(const ApiInfo& api, int row, const CUpti_CallbackData* call,
                          const CallOperands& operands, bool release);
  std::string ResultString(CUptiResult result) const;
  bool OwnKind(uint32_t kind) const;

  CuptiSessionHooks hooks_;
  CuptiApi api_;
  DriverApi driver_;
  std::atomic<bool> started_{false};
  std::atomic<bool> handed_over_{false};
  std::mutex start_mutex_;  // Start and the hand-over never interleave
  CuptiClockMap clock_;              // the tracer's own clock (set in Start)
  CuptiClockMap client_clock_map_;   // sender thread
  std::atomic<bool> on_client_clock_{false};
  uint64_t clock_sample_cupti_ = 0;  // first sample of a client's clock (sender thread)
  uint64_t clock_sample_monotonic_ = 0;
  uint64_t device_buffer_bytes_ = 0;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool memory_from_cupti_ = false;  // CUMEMTRACE_MEMORY_RECORDS=cupti
  // Read on every launch callback; changes once at most (kAuto to kLaunches).
  std::atomic<KernelRecording> kernels_{KernelRecording::kAuto};

  // One flush at a time (the timer and the exit handler). A flag, not a lock: a flush calls
  // the completion callback, which may call a client's buffer callbacks.
  std::atomic<bool> flushing_{false};
  std::mutex buffers_mutex_;
  std::vector<uint8_t*> free_buffers_;
  std::vector<CompletedBuffer> completed_;
  uint64_t dropped_records_ = 0;
};

}  // namespace cumemtrace::tracer
