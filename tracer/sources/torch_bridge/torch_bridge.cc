#include "tracer/sources/torch_bridge/torch_bridge.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/recorder.h"
#include "tracer/recording/tsc_clock.h"
#include "tracer/sources/cupti/cupti_session.h"
#include "tracer/sources/stacks/stack_capture.h"

namespace cumemtrace::tracer {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string BaseNameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Trim(const std::string& s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

// `__version__ = '2.11.0+cu130'` (or with double quotes) -> 2.11.0+cu130.
std::string VersionFromVersionPy(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.compare(0, 11, "__version__") != 0) continue;
    const size_t open = line.find_first_of("'\"");
    if (open == std::string::npos) continue;
    const size_t close = line.find(line[open], open + 1);
    if (close == std::string::npos) continue;
    return line.substr(open + 1, close - open - 1);
  }
  return {};
}

std::string OwnDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  return DirectoryOf(info.dli_fname);
}

// CUMEMTRACE_SELF_TIME=1, a diagnostic (docs/benchmarks.md): the bridge's hook times its
// parts with the TSC on the allocating threads and prints the totals at exit, since the GPU
// machine has no profiler. Off, it costs one relaxed load per event. Events written into a
// thread's own buffer are timed whole, from the hook's entry to the commit, in the
// program as it runs: the caches as the program leaves them, which no CPU benchmark has.
struct SelfTime {
  std::atomic<bool> on{false};
  std::atomic<uint64_t> events{0}, torch_times{0}, stacks{0}, python_frames{0};
  std::atomic<uint64_t> clock_ticks{0}, stack_ticks{0}, push_ticks{0};
  std::atomic<uint64_t> buffer_events{0}, buffer_ticks{0};
  uint64_t start_ticks = 0, start_ns = 0;
};
SelfTime g_self_time;

// The time of each event (tsc_clock.h): started at attach, refitted at each Poll.
TscClock g_event_clock;

// CUMEMTRACE_BENCH_ALTERNATE_MS=N, a benchmark (docs/benchmarks.md): the hook does its work
// on the program's tensors in the even windows of N ms of the clock only and returns at once
// in the odd ones, so that one process times itself with the bridge on and off at the same
// CPU speed (benchmarks/gpu/workloads.py). The trace of such a run is partial. 0: off. Not
// with CUMEMTRACE_SELF_TIME, which times every event.
uint64_t g_alternate_ns = 0;

// The TSC where there is one (a few ns, for parts that take tens); elsewhere the clock.
uint64_t Ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return MonotonicNs();
#endif
}

void PrintSelfTime() {
  SelfTime& t = g_self_time;
  const uint64_t ticks = Ticks() - t.start_ticks;
  const uint64_t ns = MonotonicNs() - t.start_ns;
  const double ns_per_tick = ticks > 0 ? double(ns) / double(ticks) : 0;
  const double events = std::max<double>(1, double(t.events.load()));
  const double stacks = std::max<double>(1, double(t.stacks.load()));
  const double buffered = std::max<double>(1, double(t.buffer_events.load()));
  fprintf(stderr,
          "cumemtrace self time: %llu bridge events into the threads' own buffers, %.0f ns "
          "each from the hook's entry to the commit; %llu into the ring, %.0f ns per event for "
          "its time (%llu from torch's TSC reads, the others the clock: %s), "
          "%.0f ns writing its record into the ring; %llu stacks of %.1f Python frames, "
          "%.0f ns each\n",
          static_cast<unsigned long long>(t.buffer_events.load()),
          double(t.buffer_ticks.load()) * ns_per_tick / buffered,
          static_cast<unsigned long long>(t.events.load()),
          double(t.clock_ticks.load()) * ns_per_tick / events,
          static_cast<unsigned long long>(t.torch_times.load()),
          g_event_clock.uses_tsc() ? "TSC" : "clock_gettime",
          double(t.push_ticks.load()) * ns_per_tick / events,
          static_cast<unsigned long long>(t.stacks.load()), double(t.python_frames.load()) / stacks,
          double(t.stack_ticks.load()) * ns_per_tick / stacks);
}

// An ALLOC, or an autograd node (a forward op that allocated nothing, which its backward
// allocations name): the events that carry an attribution and a stack.
bool IsBirth(const cumemtrace_torch_event& event) {
  return event.action == CUMEMTRACE_TORCH_ALLOC || event.action == CUMEMTRACE_TORCH_ALLOC_ROUNDED ||
         event.action == CUMEMTRACE_TORCH_AUTOGRAD_NODE;
}

// An ALLOC's stack when stacks are on: on the allocating thread (the allocator reports under
// its lock, in the tensor's call). An autograd node's: on the op's thread as the op ends, the
// forward line its backward allocations name.
StackWords TensorStack(const cumemtrace_torch_event& event) {
  const uint8_t mode = CurrentStackMode();
  if (mode == kStacksOff || !IsBirth(event)) return {};
  return CaptureStack(mode);
}

// An ALLOC's (or autograd node's) module and operators (`run --modules`, `--ops`): false when
// none is wanted. Set once at attach; read by every allocating thread (relaxed: a tensor born
// while it is set may go without attribution).
std::atomic<bool> g_attributing{false};
bool AttributionOf(const Recorder& recorder, const cumemtrace_torch_event& event,
                   v1::ring::TorchAttribution* out) {
  if (!g_attributing.load(std::memory_order_relaxed) || !IsBirth(event)) return false;
  out->module = recorder.modules() ? Recorder::current_module() : 0;
  out->op = event.op;
  out->inner_op = event.inner_op;
  out->autograd_thread = event.autograd_thread;
  out->autograd_sequence = event.autograd_sequence;
  return true;
}

bool IsEmpty(const v1::ring::TorchAttribution& a) {
  return a.module == 0 && a.op == 0 && a.inner_op == 0 && a.autograd_sequence == 0;
}

// The shim's names of operators, defined in the ring before the first event that uses them.
void DefineName(uint32_t kind, uint32_t id, const char* name, void* /*context*/) {
  Recorder::Get().RecordAttributionName(kind, id, name != nullptr ? name : "");
}

// A stats probe comes from the sender thread, no program thread: thread 0.
uint32_t ThreadOf(const cumemtrace_torch_event& event) {
  return event.action == CUMEMTRACE_TORCH_STATS_PROBE ? 0 : CurrentThreadId();
}

// 0 only when the event was not written into the ring (bridge_abi.h): a probe is then sent
// again. An event not recorded on purpose (not recording, a benchmark's window) is no
// reason to retry. A refused probe counts as a dropped record, as any record the ring
// refuses; the collector reads sizes from sequence numbers, not from that count.
int EmitTorchEvent(const cumemtrace_torch_event* event, void* /*context*/) {
  const bool timed = g_self_time.on.load(std::memory_order_relaxed);
  const uint64_t entered = timed ? Ticks() : 0;
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording()) return 1;
  // A benchmark's odd window: nothing done but the mapping that finds the window, which both
  // windows pay. So on against off is all the bridge does past the shim (attribution,
  // stack, record), on whichever path the run takes: the default against a tracker that
  // returns at once, without torch's own part.
  if (g_alternate_ns != 0 && event->action != CUMEMTRACE_TORCH_STATS_PROBE) {
    bool from_torch = false;
    if ((g_event_clock.TimeOf(event->tsc, &from_torch) / g_alternate_ns) % 2 == 1) return 1;
  }
  v1::ring::TorchAttribution attribution{};
  const bool attributed = AttributionOf(recorder, *event, &attribution);
  const bool node = event->action == CUMEMTRACE_TORCH_AUTOGRAD_NODE;
  if (node && (!attributed || attribution.autograd_sequence == 0)) return 1;  // names nothing
  const v1::ring::TorchAttribution* attached =
      attributed && !IsEmpty(attribution) ? &attribution : nullptr;
  // The thread's own buffer (thread_buffers.h), where it is on: no lock, no clock mapping
  // here. A probe (the sender's), an autograd node (no allocator event: the buffers' units
  // are those, as their readers check) or a stack takes the ring's path.
  if (recorder.per_thread() && event->action != CUMEMTRACE_TORCH_STATS_PROBE && !node &&
      CurrentStackMode() == kStacksOff) {
    TensorEvent tensor = TensorEventOf(*event, g_event_clock);
    tensor.attributed = attributed;
    if (attributed) tensor.attribution = AttributionWords::Of(attribution);
    if (recorder.RecordTensor(tensor)) {
      if (__builtin_expect(timed, 0)) {
        g_self_time.buffer_events.fetch_add(1, std::memory_order_relaxed);
        g_self_time.buffer_ticks.fetch_add(Ticks() - entered, std::memory_order_relaxed);
      }
      return 1;
    }
  }
  if (!timed) {
    // torch's own TSC read where it made one (bridge_core.h's EntryTsc), else the clock's.
    bool from_torch = false;
    const uint64_t now = g_event_clock.TimeOf(event->tsc, &from_torch);
    const StackWords stack = TensorStack(*event);
    v1::ring::TorchRecord record = TorchRecordOf(*event, ThreadOf(*event), now);
    return recorder.RecordTorch(record, attached, stack.words, stack.count);
  }
  const uint64_t start = Ticks();
  bool from_torch = false;
  const uint64_t now = g_event_clock.TimeOf(event->tsc, &from_torch);
  const uint64_t clocked = Ticks();
  const StackWords stack = TensorStack(*event);
  const uint64_t stacked = Ticks();
  v1::ring::TorchRecord record = TorchRecordOf(*event, ThreadOf(*event), now);
  const bool recorded = recorder.RecordTorch(record, attached, stack.words, stack.count);
  const uint64_t pushed = Ticks();
  g_self_time.events.fetch_add(1, std::memory_order_relaxed);
  if (from_torch) g_self_time.torch_times.fetch_add(1, std::memory_order_relaxed);
  g_self_time.clock_ticks.fetch_add(clocked - start, std::memory_order_relaxed);
  g_self_time.push_ticks.fetch_add(pushed - stacked, std::memory_order_relaxed);
  if (stack.count > 0) {
    v1::ring::StackHeader header{};
    memcpy(&header, stack.words, sizeof(header));
    g_self_time.stacks.fetch_add(1, std::memory_order_relaxed);
    g_self_time.stack_ticks.fetch_add(stacked - clocked, std::memory_order_relaxed);
    g_self_time.python_frames.fetch_add(header.python_frames, std::memory_order_relaxed);
  }
  return recorded;
}

// `run --ops`, and `run --modules` for backward's link to the forward op's module: the
// bridge watches the operators; without them, modules come from the Python side alone.
void WatchOps(const cumemtrace_torch_bridge& bridge) {
  Recorder& recorder = Recorder::Get();
  g_attributing = true;
  char message[256];
  if (bridge.watch_ops(DefineName, nullptr, message, sizeof(message)) == 0) return;
  recorder.Notice(v1::NOTICE_LEVEL_WARNING, "operators_unavailable",
                  std::string("operators are not named") +
                      (recorder.modules() ? " and backward allocations have no module" : "") +
                      ": " + message);
  if (!recorder.modules()) g_attributing = false;
}

int CollectC10Cuda(dl_phdr_info* info, size_t /*size*/, void* data) {
  if (info->dlpi_name == nullptr) return 0;
  const std::string path = info->dlpi_name;
  if (IsTorchAllocatorModule(BaseNameOf(path))) {
    *static_cast<std::string*>(data) = path;
    return 1;
  }
  return 0;
}

}  // namespace

std::string TorchVersionNextTo(const std::string& c10_cuda_path) {
  const std::string prefix = DirectoryOf(DirectoryOf(c10_cuda_path));
  std::string version = VersionFromVersionPy(prefix + "/version.py");
  if (!version.empty()) return version;
  std::ifstream in(prefix + "/build-version");
  std::string line;
  if (std::getline(in, line)) return Trim(line);
  return {};
}

std::string TorchReleaseOf(const std::string& version) {
  return version.substr(0, version.find('+'));
}

std::string TorchBridgeFileName(const std::string& torch_version) {
  return "libcumemtrace-torch-bridge-" + TorchReleaseOf(torch_version) + ".so";
}

bool IsTorchAllocatorModule(const std::string& caller_module) {
  return caller_module.compare(0, 11, "libc10_cuda") == 0;
}

std::string LoadedC10CudaPath() {
  std::string path;
  dl_iterate_phdr(CollectC10Cuda, &path);
  return path;
}

TorchBridgeLookup LoadTorchBridge(const std::string& c10_cuda_path,
                                  const std::string& bridge_dir) {
  TorchBridgeLookup lookup;
  lookup.torch_version = TorchVersionNextTo(c10_cuda_path);
  if (lookup.torch_version.empty()) {
    lookup.reason = "the torch version of " + c10_cuda_path +
                    " is unknown (no ../version.py or ../build-version beside it)";
    return lookup;
  }
  lookup.shim_path = bridge_dir + "/" + TorchBridgeFileName(lookup.torch_version);
  // RTLD_NODELETE: torch keeps the tracker (code of the shim) until the process ends.
  void* handle = dlopen(lookup.shim_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* error = dlerror();
    lookup.reason = "no bridge for torch " + lookup.torch_version + " (" +
                    (error != nullptr ? error : lookup.shim_path) + ")";
    return lookup;
  }
  auto entry =
      reinterpret_cast<cumemtrace_torch_bridge_entry_fn>(dlsym(handle, CUMEMTRACE_TORCH_BRIDGE_ENTRY));
  const cumemtrace_torch_bridge* bridge = entry != nullptr ? entry() : nullptr;
  // An older shim of the same structs is loaded too: it never sends what it does not know.
  if (bridge == nullptr || bridge->abi_version < CUMEMTRACE_TORCH_BRIDGE_OLDEST_ABI_VERSION ||
      bridge->abi_version > CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION ||
      bridge->torch_version == nullptr || bridge->attach == nullptr || bridge->probe == nullptr ||
      bridge->stop == nullptr || bridge->watch_ops == nullptr) {
    lookup.reason = lookup.shim_path + " is not a bridge of this cumemtrace (interface " +
                    std::to_string(bridge != nullptr ? bridge->abi_version : 0) + ", expected " +
                    std::to_string(CUMEMTRACE_TORCH_BRIDGE_OLDEST_ABI_VERSION) + " to " +
                    std::to_string(CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION) + ")";
    return lookup;  // RTLD_NODELETE keeps it mapped; nothing of it is called
  }
  lookup.bridge_torch_version = bridge->torch_version;
  if (TorchReleaseOf(lookup.bridge_torch_version) != TorchReleaseOf(lookup.torch_version)) {
    lookup.reason = lookup.shim_path + " was built for torch " + lookup.bridge_torch_version +
                    ", the program runs torch " + lookup.torch_version;
    return lookup;
  }
  lookup.bridge = bridge;
  return lookup;
}

TorchBridge& TorchBridge::Get() {
  static TorchBridge* bridge = new TorchBridge();  // leaked with the runtime
  return *bridge;
}

void TorchBridge::AttachOnce() {
  int expected = kUntried;
  if (!state_.compare_exchange_strong(expected, kAttaching)) return;
  Recorder& recorder = Recorder::Get();
  auto* state = new v1::TorchBridgeState();  // the translator deletes it once sent
  const std::string c10_cuda = LoadedC10CudaPath();
  state->set_library(c10_cuda);
  const char* enabled = getenv("CUMEMTRACE_TORCH_BRIDGE");
  bool notice = true;
  bool async_backend = false;  // the driver sees every tensor: nothing is missing
  if (enabled != nullptr && enabled[0] == '0') {
    state->set_reason("turned off (CUMEMTRACE_TORCH_BRIDGE=0)");
    notice = false;
  } else if (c10_cuda.empty()) {
    state->set_reason("libc10_cuda made the call but is not found among the loaded libraries");
  } else {
    const char* dir = getenv("CUMEMTRACE_TORCH_BRIDGE_DIR");
    const TorchBridgeLookup lookup =
        LoadTorchBridge(c10_cuda, dir != nullptr && *dir ? std::string(dir) : OwnDirectory());
    state->set_torch_version(lookup.torch_version);
    state->set_bridge_torch_version(lookup.bridge_torch_version);
    if (lookup.bridge == nullptr) {
      state->set_reason(lookup.reason);
    } else {
      g_event_clock.Start();
      if (const char* self_time = getenv("CUMEMTRACE_SELF_TIME");
          self_time != nullptr && strcmp(self_time, "1") == 0) {
        g_self_time.start_ticks = Ticks();
        g_self_time.start_ns = MonotonicNs();
        g_self_time.on.store(true);
        atexit(PrintSelfTime);
      }
      if (const char* alternate = getenv("CUMEMTRACE_BENCH_ALTERNATE_MS");
          alternate != nullptr && atoi(alternate) > 0 && !g_self_time.on.load()) {
        g_alternate_ns = uint64_t(atoi(alternate)) * 1'000'000;
        // In the trace too: its tensors' lost events and estimated sizes come from this.
        recorder.Notice(v1::NOTICE_LEVEL_WARNING, "bench_alternate",
                       std::string("CUMEMTRACE_BENCH_ALTERNATE_MS=") + alternate +
                           ": tensors are recorded in every other " + alternate +
                           " ms only (a benchmark; the trace is partial)");
      }
      char allocator[64];
      char message[512];
      const int result = lookup.bridge->attach(c10_cuda.c_str(), EmitTorchEvent, nullptr,
                                               allocator, sizeof(allocator), message,
                                               sizeof(message));
      state->set_allocator(allocator);
      if (result == CUMEMTRACE_TORCH_ATTACHED) {
        state->set_attached(true);
        if (recorder.ops() || recorder.modules()) WatchOps(*lookup.bridge);
        attached_.store(lookup.bridge, std::memory_order_release);
      } else {
        state->set_reason(message);
        async_backend = result == CUMEMTRACE_TORCH_NOT_NATIVE;
        notice = !async_backend;
      }
    }
  }
  const bool attached = state->attached();
  const std::string reason = state->reason();
  HostRecord record;
  record.type = HostRecord::Type::kTorchBridgeState;
  record.timestamp_ns = MonotonicNs();
  record.torch_bridge_state = state;
  recorder.Record(std::move(record));
  if (!attached && notice) {
    recorder.Notice(v1::NOTICE_LEVEL_WARNING, "torch_bridge_unavailable",
                   "PyTorch's tensors are not seen, only its allocator's segments: " + reason +
                       " (cumemtrace run --allocator=async sees every tensor)");
  }
  // Unseen tensors give phase inference nothing on the autograd thread; its launches do.
  if (!attached && !async_backend) launches_wanted_.store(true, std::memory_order_release);
  state_.store(kDone, std::memory_order_release);
}

void TorchBridge::Poll() {
  const cumemtrace_torch_bridge* bridge = attached_.load(std::memory_order_acquire);
  if (bridge != nullptr) {
    g_event_clock.Refit();
    bridge->probe();
  }
  // Here, on the sender thread, not in the allocation callback that found the bridge
  // missing: CUPTI's callbacks are enabled outside CUPTI's own calls.
  if (launches_wanted_.load(std::memory_order_acquire) && launches_wanted_.exchange(false) &&
      CuptiSession::Get().CountLaunchesFromNow()) {
    Recorder::Get().Notice(
        v1::NOTICE_LEVEL_INFO, "kernel_launches_counted",
        "kernels are counted at their launch from here on: without PyTorch's tensors, phase "
        "inference reads the autograd thread's launches (1-2 us per launch; "
        "`cumemtrace run --no-kernels` leaves them out)");
  }
}

const TscClock& TorchBridge::EventClock() { return g_event_clock; }

void TorchBridge::StopInForkedChild() {
  const cumemtrace_torch_bridge* bridge = attached_.load(std::memory_order_acquire);
  if (bridge != nullptr) bridge->stop();
  attached_.store(nullptr);
}

}  // namespace cumemtrace::tracer
