#include "tracer/sources/cupti/cupti_session.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>

#include <array>
#include <cstdlib>
#include <cstring>

#include "tracer/recording/api_catalog.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/recorder.h"
#include "tracer/sources/cupti/caller_module.h"
#include "tracer/sources/cupti/cupti_mux.h"
#include "tracer/sources/stacks/stack_capture.h"
#include "tracer/sources/torch_bridge/torch_bridge.h"

namespace cumemtrace::tracer {
namespace {

constexpr size_t kBufferBytes = 2u << 20;
// Completed buffers the sender has not processed yet; past this, records are dropped and
// counted rather than letting a stalled collector grow the program's memory without bound.
constexpr size_t kMaxUndeliveredBuffers = 32;
constexpr size_t kMaxCbid = 2048;

// Driver callback id -> catalog row; built once in Start, read-only afterwards.
std::array<int16_t, kMaxCbid> g_rows;

int RowFor(CUpti_CallbackId cbid) { return cbid < kMaxCbid ? g_rows[cbid] : -1; }

uint64_t CUPTIAPI MonotonicTimestamp() { return MonotonicNs(); }

template <typename T>
bool Resolve(void* handle, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(handle, name));
  return *out != nullptr;
}

}  // namespace

CuptiSession& CuptiSession::Get() {
  // Leaked on purpose: CUPTI may call back during exit, after static destructors.
  static CuptiSession* session = new CuptiSession();
  return *session;
}

bool CuptiSession::LoadCupti(std::string* error) {
  if (api_.Subscribe != nullptr) return true;
  // By soname only: if the program (PyTorch ships its own) already loaded a libcupti.so.13,
  // this returns that very copy. Loading a second one by path breaks both.
  void* handle = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    *error = std::string("cannot load libcupti.so.13 (") + (why ? why : "unknown") + ")";
    return false;
  }
  bool ok = Resolve(handle, "cuptiSubscribe", &api_.Subscribe) &&
            Resolve(handle, "cuptiEnableCallback", &api_.EnableCallback) &&
            Resolve(handle, "cuptiEnableDomain", &api_.EnableDomain) &&
            Resolve(handle, "cuptiActivityRegisterCallbacks", &api_.ActivityRegisterCallbacks) &&
            Resolve(handle, "cuptiActivityEnable", &api_.ActivityEnable) &&
            Resolve(handle, "cuptiActivityFlushAll", &api_.ActivityFlushAll) &&
            Resolve(handle, "cuptiActivityGetNextRecord", &api_.ActivityGetNextRecord) &&
            Resolve(handle, "cuptiActivityGetNumDroppedRecords",
                    &api_.ActivityGetNumDroppedRecords) &&
            Resolve(handle, "cuptiActivityGetAttribute", &api_.ActivityGetAttribute) &&
            Resolve(handle, "cuptiGetResultString", &api_.GetResultString) &&
            Resolve(handle, "cuptiGetDeviceId", &api_.GetDeviceId) &&
            Resolve(handle, "cuptiUnsubscribe", &api_.Unsubscribe) &&
            Resolve(handle, "cuptiActivityDisable", &api_.ActivityDisable);
  // Optional: without it, memory records of stream-ordered calls carry no stream id.
  Resolve(handle, "cuptiGetStreamIdEx", &api_.GetStreamIdEx);
  // Optional: older CUPTIs lack it; then timestamps are shifted from CLOCK_REALTIME.
  Resolve(handle, "cuptiActivityRegisterTimestampCallback",
          &api_.ActivityRegisterTimestampCallback);
  // Optional: only a client of the program's asks for these (through the mux).
  Resolve(handle, "cuptiActivityEnableAndDump", &api_.ActivityEnableAndDump);
  Resolve(handle, "cuptiActivityEnableContext", &api_.ActivityEnableContext);
  Resolve(handle, "cuptiActivityDisableContext", &api_.ActivityDisableContext);
  Resolve(handle, "cuptiActivityFlushPeriod", &api_.ActivityFlushPeriod);
  for (int i = 0; i < CuptiMux::kSwitches; ++i) {
    Resolve(handle, CuptiMux::SwitchName(static_cast<CuptiMux::Switch>(i)), &api_.Switches[i]);
  }
  if (!ok) *error = "libcupti.so.13 lacks an entry point the tracer needs";
  return ok;
}

bool CuptiSession::LoadDriver() {
  if (driver_.DeviceGet != nullptr) return true;
  // RTLD_NOLOAD: use the driver the program loaded; never load one ourselves.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  return Resolve(handle, "cuDeviceGet", &driver_.DeviceGet) &&
         Resolve(handle, "cuDeviceGetName", &driver_.DeviceGetName) &&
         Resolve(handle, "cuDeviceGetUuid_v2", &driver_.DeviceGetUuid) &&
         Resolve(handle, "cuDeviceTotalMem_v2", &driver_.DeviceTotalMem) &&
         Resolve(handle, "cuDeviceGetAttribute", &driver_.DeviceGetAttribute) &&
         Resolve(handle, "cuMemGetInfo_v2", &driver_.MemGetInfo) &&
         Resolve(handle, "cuGetErrorName", &driver_.GetErrorName);
}

std::string CuptiSession::ResultString(CUptiResult result) const {
  const char* text = nullptr;
  if (api_.GetResultString != nullptr) api_.GetResultString(result, &text);
  return text != nullptr ? text : ("CUPTI error " + std::to_string(static_cast<int>(result)));
}

bool CuptiSession::Start(KernelRecording kernels, std::string* code, std::string* text) {
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (handed_over_) {
    *code = "cupti_subscriber_taken";
    *text = "the program runs its own CUPTI client (a profiler); memory and kernel tracing "
            "off, recording NVTX ranges and process lifetime only";
    return false;
  }
  std::string error;
  if (!LoadCupti(&error)) {
    *code = "cupti_unavailable";
    *text = "CUPTI unavailable: " + error + "; recording NVTX ranges and process lifetime only";
    return false;
  }
  LoadDriver();

  g_rows.fill(-1);
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  for (uint16_t i = 0; i < count; ++i) {
    if (apis[i].cbid < kMaxCbid) g_rows[apis[i].cbid] = static_cast<int16_t>(i);
  }
  kernels_.store(kernels, std::memory_order_relaxed);
  const bool kernel_records = kernels == KernelRecording::kRecords;
  const char* memory_records = getenv("CUMEMTRACE_MEMORY_RECORDS");
  memory_from_cupti_ = memory_records != nullptr && strcmp(memory_records, "cupti") == 0;

  // The clock must be chosen before any activity kind is enabled.
  if (api_.ActivityRegisterTimestampCallback == nullptr ||
      api_.ActivityRegisterTimestampCallback(MonotonicTimestamp) != CUPTI_SUCCESS) {
    clock_.offset_ns = static_cast<int64_t>(MonotonicNs()) - static_cast<int64_t>(RealtimeNs());
  }

  CUptiResult result = api_.Subscribe(&subscriber_, OnCallback, nullptr);
  if (result != CUPTI_SUCCESS) {
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      *code = "cupti_subscriber_taken";
      *text = "another CUPTI client (a profiler?) is already attached; memory and kernel "
              "tracing off, recording NVTX ranges and process lifetime only";
    } else {
      *code = "cupti_failed";
      *text = "CUPTI cannot be used (" + ResultString(result) +
              "); recording NVTX ranges and process lifetime only";
    }
    return false;
  }

  // CUMEMTRACE_API_CALLBACKS=0 is a diagnostic: it measures what the per-call callbacks
  // cost (then memory is seen only with CUMEMTRACE_MEMORY_RECORDS=cupti, without its thread
  // and API, and failed allocations are not seen at all).
  const char* callbacks = getenv("CUMEMTRACE_API_CALLBACKS");
  const bool api_callbacks = !(callbacks != nullptr && callbacks[0] == '0');
  // From here on the subscription is the mux's: it holds what the tracer enables here and
  // what a client of the program's enables later.
  CuptiMux& mux = CuptiMux::Get();
  mux.Install(&api_, subscriber_);
  if (api_callbacks) {
    EnableDriverCallbacks(/*launches=*/false);
    if (kernels == KernelRecording::kLaunches || kernels == KernelRecording::kRecords) {
      EnableDriverCallbacks(/*launches=*/true);
    }
  }
  mux.EnableOwnCallback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED);

  result = api_.ActivityRegisterCallbacks(BufferRequested, BufferCompleted);
  if (result == CUPTI_SUCCESS && memory_from_cupti_) {
    result = mux.EnableOwnKind(CUPTI_ACTIVITY_KIND_MEMORY2);
  }
  if (result == CUPTI_SUCCESS) result = mux.EnableOwnKind(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
  if (result == CUPTI_SUCCESS && kernel_records) {
    // CONCURRENT_KERNEL, never KERNEL: the latter serializes kernels.
    result = mux.EnableOwnKind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
  if (result != CUPTI_SUCCESS) {
    *code = "cupti_failed";
    *text = "CUPTI activity tracing could not be enabled (" + ResultString(result) +
            "); recording NVTX ranges and process lifetime only";
    // Give the subscription back: holding it while tracing nothing would only lock out a
    // profiler the program starts.
    api_.Unsubscribe(subscriber_);
    subscriber_ = nullptr;
    return false;
  }

  if (kernel_records) {
    size_t value_size = sizeof(size_t);
    size_t buffer_size = 0;
    size_t preallocated = 0;
    api_.ActivityGetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &value_size, &buffer_size);
    value_size = sizeof(size_t);
    api_.ActivityGetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE, &value_size,
                              &preallocated);
    device_buffer_bytes_ = static_cast<uint64_t>(buffer_size) * preallocated;
  }
  started_ = true;
  return true;
}

namespace {

int CountCuptiModule(dl_phdr_info* info, size_t, void* arg) {
  auto* bases = static_cast<std::vector<void*>*>(arg);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;  // the program
  void* handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  // dlsym on a library's handle looks in the library first, then in its dependencies.
  void* symbol = dlsym(handle, "cuptiActivityGetNextRecord");
  Dl_info where{};
  if (symbol != nullptr && dladdr(symbol, &where) != 0 && where.dli_fbase != nullptr &&
      std::find(bases->begin(), bases->end(), where.dli_fbase) == bases->end()) {
    bases->push_back(where.dli_fbase);
  }
  dlclose(handle);
  return 0;
}

}  // namespace

bool CuptiSession::InterpositionSafe() {
  if (api_.ActivityGetNextRecord == nullptr) return false;
  // Every module that defines CUPTI's entry points (the tracer exports a few of them, but
  // not this one) must be the copy the tracer uses.
  std::vector<void*> bases;
  dl_iterate_phdr(CountCuptiModule, &bases);
  Dl_info ours{};
  if (dladdr(reinterpret_cast<void*>(api_.ActivityGetNextRecord), &ours) == 0) return false;
  return bases.size() == 1 && bases[0] == ours.dli_fbase;
}

void CuptiSession::HandOver() {
  // Everything the tracer has goes out first; then CUPTI is the program's alone.
  Flush(/*forced=*/true);
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (handed_over_.exchange(true)) return;
  if (started_.exchange(false)) {
    for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_MEMORY2, CUPTI_ACTIVITY_KIND_MEMORY_POOL,
                                    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL}) {
      if (OwnKind(kind)) api_.ActivityDisable(kind);
    }
    api_.Unsubscribe(subscriber_);
    subscriber_ = nullptr;
    if (hooks_.handed_over != nullptr) hooks_.handed_over();
  } else if (subscriber_ != nullptr) {
    api_.Unsubscribe(subscriber_);  // subscribed but not tracing: nothing to hand over
    subscriber_ = nullptr;
  }
}

KernelRecording ParseKernelRecording(const char* value) {
  if (value == nullptr || *value == '\0' || strcmp(value, "auto") == 0) {
    return KernelRecording::kAuto;
  }
  if (value[0] == '0') return KernelRecording::kNone;
  if (strcmp(value, "launches") == 0) return KernelRecording::kLaunches;
  if (value[0] == '1' || strcmp(value, "records") == 0) return KernelRecording::kRecords;
  return KernelRecording::kAuto;
}

bool CuptiSession::CountLaunchesFromNow() {
  std::lock_guard<std::mutex> lock(start_mutex_);
  KernelRecording expected = KernelRecording::kAuto;
  if (!started_.load() || handed_over_.load() ||
      !kernels_.compare_exchange_strong(expected, KernelRecording::kLaunches)) {
    return false;
  }
  EnableDriverCallbacks(/*launches=*/true);
  return true;
}

void CuptiSession::EnableDriverCallbacks(bool launches) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  for (uint16_t i = 0; i < count; ++i) {
    if ((apis[i].role == ApiRole::kLaunch) == launches) {
      CuptiMux::Get().EnableOwnCallback(CUPTI_CB_DOMAIN_DRIVER_API, apis[i].cbid);
    }
  }
}

bool CuptiSession::OwnKind(uint32_t kind) const { return CuptiMux::Get().OwnKind(kind); }

void CuptiSession::AddDroppedRecords(uint64_t count) {
  if (count == 0) return;
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  dropped_records_ += count;
}

void CuptiSession::BeforeClientClock() { Flush(/*forced=*/true); }

void CuptiSession::AfterClientClock() { on_client_clock_.store(true, std::memory_order_release); }

const CuptiClockMap& CuptiSession::ClockMapFor(const CompletedBuffer& buffer) {
  const CUpti_TimestampCallbackFunc client_clock = CuptiMux::Get().client_clock();
  if (!buffer.client_clock || client_clock == nullptr) return clock_;
  CuptiClockMap& map = client_clock_map_;
  // Sampled as a pair: the monotonic reading in the middle of two of the client's.
  auto sample = [client_clock](uint64_t* cupti, uint64_t* monotonic) {
    const uint64_t before = client_clock();
    *monotonic = MonotonicNs();
    const uint64_t after = client_clock();
    *cupti = before + (after - before) / 2;
  };
  uint64_t cupti = 0;
  uint64_t monotonic = 0;
  sample(&cupti, &monotonic);
  if (clock_sample_cupti_ == 0) {
    // The first time: a rough rate from 2 ms apart, refined at every later drain.
    clock_sample_cupti_ = cupti;
    clock_sample_monotonic_ = monotonic;
    map.linear = true;
    usleep(2000);
    sample(&cupti, &monotonic);
  }
  if (cupti > clock_sample_cupti_ && monotonic > clock_sample_monotonic_) {
    // The rate from the first sample, ever more precise; the origin at the latest one.
    map.ns_per_tick = static_cast<double>(monotonic - clock_sample_monotonic_) /
                         static_cast<double>(cupti - clock_sample_cupti_);
  }
  map.cupti_origin = cupti;
  map.monotonic_origin = monotonic;
  return map;
}

void CuptiSession::Flush(bool forced) {
  if (!started()) return;
  // The timer's flush skips a turn while another runs; the exit's waits for it (bounded).
  for (int waited_ms = 0; flushing_.exchange(true, std::memory_order_acquire); ++waited_ms) {
    if (!forced || waited_ms >= 1000) return;
    usleep(1000);
  }
  api_.ActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  flushing_.store(false, std::memory_order_release);
}

void CuptiSession::ForgetInChildAfterFork() {
  started_.store(false);
  flushing_.store(false);
  CuptiMux::Get().ForgetInChildAfterFork();
  // Another parent thread (a CUPTI buffer callback) may have held these at fork: rebuild
  // them, and leak the vectors it may have been changing (heaptrack, memray: leak, never
  // destroy, state inherited across fork).
  new (&buffers_mutex_) std::mutex();
  new (&free_buffers_) std::vector<uint8_t*>();
  new (&completed_) std::vector<CompletedBuffer>();
  dropped_records_ = 0;
}

void CuptiSession::TakeCompletedBuffers(std::vector<CompletedBuffer>* out) {
  out->clear();
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  out->swap(completed_);
}

void CuptiSession::RecycleBuffer(uint8_t* data) {
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  free_buffers_.push_back(data);
}

uint64_t CuptiSession::TakeDroppedRecords() {
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  const uint64_t n = dropped_records_;
  dropped_records_ = 0;
  return n;
}

void CUPTIAPI CuptiSession::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiSession& self = Get();
  uint8_t* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(self.buffers_mutex_);
    if (!self.free_buffers_.empty()) {
      data = self.free_buffers_.back();
      self.free_buffers_.pop_back();
    }
  }
  if (data == nullptr) data = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *buffer = data;
  *size = data != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI CuptiSession::BufferCompleted(CUcontext context, uint32_t stream_id,
                                            uint8_t* buffer, size_t size, size_t valid_size) {
  CuptiSession& self = Get();
  size_t cupti_dropped = 0;
  self.api_.ActivityGetNumDroppedRecords(context, stream_id, &cupti_dropped);
  if (CuptiMux::ClientRecordsOn()) {
    // The client's records go to its own buffers now, before this buffer can be recycled.
    // No lock of the tracer's is held: this may call the client's buffer callbacks.
    CuptiMux& mux = CuptiMux::Get();
    mux.AddCuptiDropped(cupti_dropped);
    mux.CopyClientRecords(buffer, valid_size);
  }
  std::lock_guard<std::mutex> lock(self.buffers_mutex_);
  self.dropped_records_ += cupti_dropped;
  if (buffer == nullptr) return;
  if (valid_size == 0 || self.completed_.size() >= kMaxUndeliveredBuffers) {
    if (valid_size > 0) {
      CUpti_Activity* record = nullptr;
      while (self.api_.ActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
        ++self.dropped_records_;
      }
    }
    self.free_buffers_.push_back(buffer);
    return;
  }
  self.completed_.push_back(CompletedBuffer{
      buffer, valid_size, self.on_client_clock_.load(std::memory_order_acquire)});
  if (self.hooks_.wake_sender != nullptr) self.hooks_.wake_sender();
}

namespace {

// Whether this thread sends a kernel name for the first time (a small direct-mapped cache of
// name pointers per thread): the name is copied then, and only its pointer afterwards.
bool FirstLaunchOfName(const char* name) {
  thread_local const char* seen[64] = {};
  const char** slot = &seen[(reinterpret_cast<uintptr_t>(name) >> 4) & 63];
  if (*slot == name) return false;
  *slot = name;
  return true;
}

// What a record of an API call starts with: its type, time, thread, correlation id and row.
HostRecord CallRecord(HostRecord::Type type, int row, const CUpti_CallbackData* call) {
  HostRecord record;
  record.type = type;
  record.timestamp_ns = MonotonicNs();
  record.thread_id = CurrentThreadId();
  record.correlation_id = call->correlationId;
  record.api = static_cast<uint16_t>(row);
  return record;
}

}  // namespace

HostRecord CuptiSession::LaunchRecord(int row, const CUpti_CallbackData* call) {
  HostRecord record = CallRecord(HostRecord::Type::kLaunch, row, call);
  record.device = ContextDevice(call->context);
  record.symbol = call->symbolName;
  if (record.symbol != nullptr && FirstLaunchOfName(record.symbol)) record.text = record.symbol;
  return record;
}

uint32_t CuptiSession::ContextDevice(CUcontext context) {
  // A thread works in one context almost always: remember the last answer.
  thread_local CUcontext last_context = nullptr;
  thread_local uint32_t last_device = 0;
  if (context != last_context) {
    uint32_t device = 0;
    if (api_.GetDeviceId(context, &device) != CUPTI_SUCCESS) device = 0;
    last_context = context;
    last_device = device;
  }
  return last_device;
}

uint32_t CuptiSession::StreamId(CUcontext context, CUstream stream, bool per_thread) {
  uint32_t id = 0;
  if (api_.GetStreamIdEx == nullptr ||
      api_.GetStreamIdEx(context, stream, per_thread ? 1 : 0, &id) != CUPTI_SUCCESS) {
    return 0;
  }
  return id;
}

HostRecord CuptiSession::MemoryRecord(const ApiInfo& api, int row, const CUpti_CallbackData* call,
                                      const CallOperands& operands, bool release) {
  HostRecord record = CallRecord(HostRecord::Type::kMemory, row, call);
  record.release = release;
  record.address = operands.address;
  record.bytes = operands.bytes;
  if (!release) record.memory_kind = static_cast<uint8_t>(api.kind);
  record.device = ContextDevice(call->context);
  record.is_async = api.stream_ordered;
  if (api.stream_ordered) {
    record.stream_id = StreamId(call->context, operands.stream, api.per_thread_stream);
  } else if (!release) {
    // Synchronous allocations are rare and large: worth naming the library that asked.
    record.caller = CallerModule();
    // PyTorch's caching allocator taking its first segment: attach the bridge (tensors).
    TorchBridge::Get().OnAllocationCall(record.caller);
  }
  if (const uint8_t mode = CurrentStackMode(); mode != kStacksOff && !release) {
    const StackWords stack = CaptureStack(mode);
    record.stack = stack.words;
    record.stack_words = stack.count;
  }
  return record;
}

void CUPTIAPI CuptiSession::OnCallback(void* userdata, CUpti_CallbackDomain domain,
                                       CUpti_CallbackId cbid, const void* data) {
  // The one load the shared subscription adds to every callback: with a client, CUPTI calls
  // here for what either side enabled; the client's part is handed on first.
  if (CuptiMux::ClientCallbacksOn() && !CuptiMux::Get().Dispatch(domain, cbid, data)) return;
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording()) return;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
      const auto* resource = static_cast<const CUpti_ResourceData*>(data);
      uint32_t device = 0;
      if (Get().api_.GetDeviceId(resource->context, &device) == CUPTI_SUCCESS) {
        if (const auto created = Get().hooks_.context_created) created(device);
      }
    }
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const int row = RowFor(cbid);
  if (row < 0) return;
  uint16_t count = 0;
  const ApiInfo& api = ApiCatalog(&count)[row];
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  CuptiSession& self = Get();

  if (call->callbackSite == CUPTI_API_ENTER) {
    if (api.role == ApiRole::kLaunch &&
        self.kernels_.load(std::memory_order_relaxed) == KernelRecording::kLaunches) {
      recorder.Record(self.LaunchRecord(row, call));
      return;
    }
    if (api.role == ApiRole::kLaunch || self.memory_from_cupti_) {
      // Kernel (and MEMORY2) records come later with this correlation id but no thread:
      // recorded at the entry, as the record may be delivered before the call returns.
      HostRecord record;
      record.type = HostRecord::Type::kCorrelation;
      record.thread_id = CurrentThreadId();
      record.correlation_id = call->correlationId;
      record.api = static_cast<uint16_t>(row);
      if (api.role == ApiRole::kAllocate && !api.stream_ordered) record.caller = CallerModule();
      recorder.Record(std::move(record));
      return;
    }
    if (api.role != ApiRole::kRelease) return;
    // At the entry: once the call runs, another thread may be handed the same address, and
    // its allocation must come after this release in the queue.
    CallOperands operands;
    api.read(call->functionParams, &operands);
    if (operands.address == 0) return;  // cudaFree(nullptr): nothing given back
    recorder.Record(self.MemoryRecord(api, row, call, operands, /*release=*/true));
    return;
  }

  if (api.role != ApiRole::kAllocate) return;
  const int status = static_cast<int>(*static_cast<const CUresult*>(call->functionReturnValue));
  if (status == CUDA_SUCCESS) {
    if (self.memory_from_cupti_ || !api.makes_memory) return;
    CallOperands operands;
    api.read(call->functionParams, &operands);
    if (operands.address == 0) return;
    recorder.Record(self.MemoryRecord(api, row, call, operands, /*release=*/false));
    return;
  }

  CallOperands operands;
  api.read(call->functionParams, &operands);
  HostRecord record = CallRecord(HostRecord::Type::kFailedAllocation, row, call);
  record.caller = CallerModule();
  record.error_code = status;
  record.bytes = operands.bytes;
  record.device = self.ContextDevice(call->context);
  const DriverApi& driver = self.driver_;
  if (driver.MemGetInfo != nullptr) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (driver.MemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
      record.device_free_bytes = free_bytes;
      record.device_total_bytes = total_bytes;
    }
  }
  recorder.Record(std::move(record));
}

}  // namespace cumemtrace::tracer
