#include "tracer/process/tracer_runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <new>
#include <unordered_set>

#include "tracer/recording/api_catalog.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/descriptors.h"
#include "tracer/recording/thread_buffers.h"
#include "tracer/sending/collector_connection.h"
#include "tracer/sending/correlation_table.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/record_translator.h"
#include "tracer/sources/cupti/caller_module.h"
#include "tracer/sources/cupti/cupti_session.h"
#include "tracer/sources/nvtx/nvtx_injection.h"
#include "tracer/sources/python/python_frames.h"
#include "tracer/sources/stacks/stack_capture.h"
#include "tracer/sources/torch_bridge/torch_bridge.h"

namespace cumemtrace::tracer {

namespace {

constexpr auto kDrainInterval = std::chrono::milliseconds(10);
// A drain that took this many records, or left bytes the socket would not take, makes the
// sender busy: it drains again after kBusyDrainInterval, and waits (kBusySendMs at most)
// for the collector to take the bytes instead of coming back 10 ms later. The socket's
// buffer (about 200 KiB) holds 10 to 20 thousand events: sent once per 10 ms, that capped
// the stream at about 1.2 million records a second (docs/benchmarks.md, "Bursts").
constexpr size_t kBusyRecords = 1024;
// Records taken from the ring per drain, encoded and sent before the next are taken: their
// space is freed as they go, and what the sender holds for them (HostRecords of 256 B, the
// batch, the outbox) stays in the caches. Taken all at once, a full ring's 280,000 records
// made 70 MB of HostRecords and a 4 MB outbox, at 0.5-1.4 us a record instead of 0.1.
constexpr size_t kMaxRecordsPerDrain = 8192;
constexpr auto kBusyDrainInterval = std::chrono::milliseconds(1);
constexpr int kBusySendMs = 10;
constexpr uint64_t kCuptiFlushIntervalNs = 100'000'000;  // at most 200 ms between flushes
// An encoded event takes 10 to 40 bytes: 32 per queued event lets the outbox hold about as
// many events as the queue, within [1 MiB, 32 MiB].
constexpr size_t kOutboxBytesPerQueuedEvent = 32;
constexpr size_t kMinOutboxBytes = 1u << 20;
constexpr size_t kMaxOutboxBytes = 32u << 20;
constexpr int kExitSendBudgetMs = 2000;
constexpr auto kExitWait = std::chrono::milliseconds(3000);

const char* kTracerVersion = "0.1.0";

// CUMEMTRACE_SHARED_RING=0: the ring stays in the tracer's private memory and records reach
// the collector through the socket only (what the tracer falls back to where memfd is not
// allowed): to measure what the shared ring costs, and to turn it off.
bool SharedRingFromEnv() {
  const char* value = getenv("CUMEMTRACE_SHARED_RING");
  return value == nullptr || strcmp(value, "0") != 0;
}

// CUMEMTRACE_WAIT_WHEN_FULL=1 (`run --wait-when-full`): a thread waits for room in a full
// ring instead of dropping its record (RecordQueue::set_wait_when_full).
bool WaitWhenFullFromEnv() {
  const char* value = getenv("CUMEMTRACE_WAIT_WHEN_FULL");
  return value != nullptr && strcmp(value, "1") == 0;
}

std::string DefaultSocketPath() {
  if (const char* runtime_dir = getenv("XDG_RUNTIME_DIR"); runtime_dir && *runtime_dir) {
    return std::string(runtime_dir) + "/cumemtrace/collector.sock";
  }
  return "/tmp/cumemtrace-" + std::to_string(getuid()) + "/collector.sock";
}

// The handshake must fit in MAX_HANDSHAKE_FRAME_BYTES (1 MiB), and a command line can be
// longer (ARG_MAX grows with the stack limit): keep its first 512 KiB and say what was left.
std::vector<std::string> ReadCommandLine() {
  constexpr size_t kMaxCommandLineBytes = 512 * 1024;
  std::vector<std::string> args;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  size_t kept = 0;
  size_t left_out = 0;
  while (std::getline(in, arg, '\0')) {
    if (left_out > 0 || kept + arg.size() > kMaxCommandLineBytes) {
      left_out += arg.size() + 1;
      continue;
    }
    kept += arg.size() + 1;
    args.push_back(arg);
  }
  if (left_out > 0) {
    args.push_back("[cumemtrace: " + std::to_string(left_out) + " more bytes left out]");
  }
  return args;
}

std::string ReadThreadName(uint32_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

class DriverErrorNamer : public ErrorNamer {
 public:
  std::string DriverErrorName(int code) const override {
    const DriverApi& driver = CuptiSession::Get().driver();
    const char* name = nullptr;
    if (driver.GetErrorName != nullptr &&
        driver.GetErrorName(static_cast<CUresult>(code), &name) == CUDA_SUCCESS && name) {
      return name;
    }
    return ErrorNamer::DriverErrorName(code);
  }
};

void FillDeviceInfo(uint32_t index, v1::DeviceInfo* info) {
  info->set_index(index);
  const DriverApi& driver = CuptiSession::Get().driver();
  CUdevice device = 0;
  if (driver.DeviceGet == nullptr || driver.DeviceGet(&device, static_cast<int>(index)) != 0) {
    return;
  }
  char name[256] = {};
  if (driver.DeviceGetName(name, sizeof(name) - 1, device) == CUDA_SUCCESS) info->set_name(name);
  CUuuid uuid;
  if (driver.DeviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned char byte : uuid.bytes) {
      hex.push_back(kHex[byte >> 4]);
      hex.push_back(kHex[byte & 15]);
    }
    info->set_uuid(hex);
  }
  size_t total = 0;
  if (driver.DeviceTotalMem(&total, device) == CUDA_SUCCESS) info->set_total_memory_bytes(total);
  int major = 0;
  int minor = 0;
  driver.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  driver.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  info->set_compute_capability_major(static_cast<uint32_t>(major));
  info->set_compute_capability_minor(static_cast<uint32_t>(minor));
}

// What only the sender thread touches (after Start, which fills it on the program's thread).
struct SenderState {
  CollectorConnection connection;
  // The ring's descriptor until it went to the collector with the handshake's bytes.
  int ring_fd = -1;
  dev_t ring_dev = 0;
  ino_t ring_ino = 0;
  // Encoded frames not yet handed to the kernel; outbox_consumed counts the bytes sent from
  // its front so far, and `frames` says up to which ring position each frame's end carries
  // records: once sent, their space in the ring is freed.
  std::string outbox;
  uint64_t outbox_consumed = 0;
  std::deque<std::pair<uint64_t, uint64_t>> frames;
  uint64_t ring_cursor = 0;
  std::vector<uint64_t> record_ends;
  // The per-thread buffers' read positions after the last drain, and for each frame end that
  // carries their units, the positions to free once it is sent.
  std::vector<ThreadBuffers::SlotPosition> slot_positions;
  std::deque<std::pair<uint64_t, std::vector<ThreadBuffers::SlotPosition>>> buffer_frames;
  // Ring drops taken from the ring and not yet in a DroppedRecords event; those reported.
  uint64_t ring_drops_taken = 0;
  uint64_t ring_drops_reported = 0;
  EventEncoder encoder;
  CorrelationTable correlations;
  DriverErrorNamer error_namer;
  RecordTranslator translator{&encoder, &correlations, &error_namer};
  std::vector<HostRecord> host_records;
  std::vector<CompletedBuffer> buffers;
  std::unordered_set<uint32_t> named_threads;
  std::unordered_set<uint32_t> described_devices;
  // Events lost to a full queue or thrown away because the outbox was full (the collector
  // is not reading), with their time span: reported as one DroppedRecords gap.
  uint64_t dropped_while_full = 0;
  uint64_t dropped_first_ns = 0;
  uint64_t dropped_last_ns = 0;
  uint64_t last_cupti_flush_ns = 0;
  bool ring_damage_noticed = false;
};

SenderState* g_sender = nullptr;

// Threads inside the tracer's initialization right now.
std::atomic<int> g_inits_in_progress{0};

// The NVTX header initializes each instance once: the first caller marks it "started", loads
// the injection, calls InitializeInjectionNvtx2, and marks it "complete"; other threads spin
// meanwhile. A fork between the two marks copies "started" into a child with no thread to
// finish it, and the child's first NVTX call spins forever (a race in the header, untraced
// too). The tracer must not widen that window, nor leave a child half its own init: fork
// waits until no thread is inside it.
void WaitForInitsBeforeFork() {
  bool waited = false;
  // Bounded (1 s): a thread blocked inside the init must never hang the program's fork.
  for (int i = 0; i < 20000 && g_inits_in_progress.load() > 0; ++i) {
    waited = true;
    usleep(50);
  }
  // The header marks the instance complete right after InitializeInjectionNvtx2 returns.
  if (waited) usleep(200);
}

}  // namespace

InitScope::InitScope() { g_inits_in_progress.fetch_add(1); }
InitScope::~InitScope() { g_inits_in_progress.fetch_sub(1); }

TracerRuntime& TracerRuntime::Get() {
  static TracerRuntime* runtime = new TracerRuntime();
  return *runtime;
}

TracerRuntime::TracerRuntime() : recorder_(Recorder::Get()), queue_(recorder_.queue()) {
  max_outbox_bytes_ =
      std::clamp(queue_.capacity() * kOutboxBytesPerQueuedEvent, kMinOutboxBytes, kMaxOutboxBytes);
  // What the sources call up for, installed before any of them can start.
  recorder_.set_start_at_first_event(
      [](uint64_t first_event_ns) { Get().StartPending(first_event_ns); });
  CuptiSessionHooks hooks;
  hooks.share_with_client = [] { return Get().ShareCuptiWithClient(); };
  hooks.handed_over = [] { Get().OnCuptiHandedOver(); };
  hooks.wake_sender = [] { Get().WakeSender(); };
  hooks.context_created = [](uint32_t device) { Get().OnContextCreated(device); };
  CuptiSession::Get().set_hooks(hooks);
}

void TracerRuntime::StartAtFirstEvent(v1::InjectionMode mode) {
  if (started_.load()) return;
  pending_mode_.store(mode);
  recorder_.set_start_pending(true);
  recorder_.set_recording(true);  // so the hooks record; the first record starts the tracer
}

void TracerRuntime::StartPending(uint64_t first_event_ns) {
  // The recorder clears its pending start once this returns.
  Start(static_cast<v1::InjectionMode>(pending_mode_.load()), first_event_ns);
}

namespace {
thread_local bool t_in_start = false;  // Start never recurses, but must not deadlock if it did
}  // namespace

void TracerRuntime::Start(v1::InjectionMode mode, uint64_t start_ns) {
  const InitScope init;
  if (started_.load() || t_in_start) return;
  // Before the lock: a fork while another thread holds it must find the handlers that wait
  // for Start and give the child a free lock (a forked child inherits the registration).
  if (!fork_handlers_registered_.exchange(true)) {
    pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
  }
  std::lock_guard<std::mutex> lock(start_mutex_);
  if (started_.load()) return;  // another thread started it while this one waited
  t_in_start = true;
  pid_ = getpid();
  mode_ = mode;
  const uint64_t now = MonotonicNs();
  start_ns_ = start_ns != 0 && start_ns < now ? start_ns : now;
  kernels_ = ParseKernelRecording(getenv("CUMEMTRACE_KERNELS"));
  // Off unless asked for: hooks then pay one relaxed load (stack_capture.h).
  g_stack_mode.store(ParseStackMode(getenv("CUMEMTRACE_STACKS")), std::memory_order_relaxed);
  const char* quiet = getenv("CUMEMTRACE_QUIET");
  recorder_.set_quiet(quiet != nullptr && quiet[0] == '1');
  const char* socket = getenv("CUMEMTRACE_SOCKET");
  socket_path_ = (socket != nullptr && *socket) ? socket : DefaultSocketPath();

  // A forked child inherits this registration: it must not add a second one.
  if (!exit_handler_registered_) {
    exit_handler_registered_ = true;
    // Registered now, it runs after the program's later-registered exit handlers: the last
    // word of the stream. It does not touch CUPTI (that handler is registered later).
    on_exit(OnExit, nullptr);
  }

  // Constructed here, before the sender thread exists: a fork while another thread is
  // inside a function-local static's first initialization leaves the child waiting on that
  // guard forever, and AtForkChild needs the session (seen: fork_probe children hung in
  // __cxa_guard_acquire under CuptiSession::Get).
  CuptiSession::Get();
  // The same for the bridge: the sender's first Poll constructed it, and a child forked
  // meanwhile hung in AtForkChild's TorchBridge::Get (seen in the fork test).
  TorchBridge::Get();
  // Leaked with the runtime (see the class comment).
  g_sender = new SenderState();
  SenderState& s = *g_sender;
  // The per-thread buffers (CUMEMTRACE_PER_THREAD=1) share the ring's memory file.
  const uint64_t buffer_bytes =
      recorder_.per_thread()
          ? ThreadBuffers::BytesFor(ThreadBuffers::kDefaultSlots, ThreadBuffers::kDefaultSlotUnits)
          : 0;
  const bool shared_ring = SharedRingFromEnv();
  errno = 0;
  s.ring_fd = queue_.Create(shared_ring, buffer_bytes);
  const int ring_errno = errno;  // memfd_create's (or its mapping's), when it failed
  if (queue_.extra() != nullptr) {
    recorder_.buffers().Init(queue_.extra(), ThreadBuffers::kDefaultSlots,
                             ThreadBuffers::kDefaultSlotUnits);
  }
  if (shared_ring && s.ring_fd < 0 && queue_.created()) {
    // A process at its descriptor limit (EMFILE): traced, but without the ring that keeps
    // its records when it dies.
    recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "no_shared_ring",
                     std::string("no shared ring for this process (") + strerror(ring_errno) +
                         "): its records go through the socket only, so what it has not "
                         "sent when it dies is lost");
  }
  if (s.ring_fd >= 0) {
    struct stat st {};
    fstat(s.ring_fd, &st);
    s.ring_dev = st.st_dev;
    s.ring_ino = st.st_ino;
  }
  if (queue_.created()) {
    v1::ring::Header* header = queue_.header();
    uint16_t count = 0;
    const ApiInfo* apis = ApiCatalog(&count);
    auto* table = reinterpret_cast<v1::ring::ApiEntry*>(reinterpret_cast<char*>(header) +
                                                        v1::ring::kApiTableOffset);
    header->api_count = std::min<uint32_t>(count, v1::ring::kMaxApis);
    for (uint32_t i = 0; i < header->api_count; ++i) {
      snprintf(table[i].name, sizeof(table[i].name), "%s", apis[i].name);
      table[i].kind = static_cast<uint8_t>(apis[i].kind);
      table[i].mapping = apis[i].mapping ? 1 : 0;
    }
  }
  AppendHandshake(&s.outbox, s.ring_fd >= 0 ? queue_.ring_bytes() : 0);
  // Connected here, on the program's thread, when the collector answers at once (never
  // waiting): a program that dies in its first milliseconds still leaves the collector its
  // stream and its ring. Otherwise the sender thread connects.
  std::string ignored;
  if (s.connection.Connect(socket_path_, &ignored, /*wait=*/false)) SendHandshake();
  queue_.set_wait_when_full(WaitWhenFullFromEnv());
  recorder_.set_recording(true);
  // The sender starts with every signal blocked so the program's signals never land on it.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  std::thread(&TracerRuntime::SenderMain, this).detach();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  // Last: a thread that finds it set goes on to use the ring made above.
  started_.store(true);
  t_in_start = false;
}

void TracerRuntime::StartCupti() {
  if (!started_.load() || getpid() != pid_ || stepped_aside_.load() ||
      cupti_started_.exchange(true)) {
    return;
  }
  PrepareCallerLookup();
  std::string code;
  std::string text;
  if (!CuptiSession::Get().Start(kernels_, &code, &text)) {
    recorder_.Notice(v1::NOTICE_LEVEL_WARNING, code, text);
  }
  WakeSender();
}

bool TracerRuntime::ShareCuptiWithClient() {
  if (!started_.load() || getpid() != pid_ || stepped_aside_.load()) return false;
  StartCupti();  // a client that comes before cuInit: the session starts now (that works)
  CuptiSession& session = CuptiSession::Get();
  if (!session.started()) return false;
  if (!session.InterpositionSafe()) {
    session.HandOver();
    return false;
  }
  return true;
}

void TracerRuntime::StepAsideForTool(const char* tool) {
  stepped_aside_.store(true);
  recorder_.Notice(
      v1::NOTICE_LEVEL_WARNING, "cupti_other_tool",
      std::string("another CUDA tool is injected (CUDA_INJECTION64_PATH=") + tool +
          "): it owns CUPTI, so cumemtrace records no GPU memory or kernels, only NVTX "
          "ranges and process lifetime");
}

void TracerRuntime::OnCuptiHandedOver() {
  char when[64];
  snprintf(when, sizeof(when), "%.3f s", static_cast<double>(MonotonicNs() - start_ns_) / 1e9);
  recorder_.Notice(
      v1::NOTICE_LEVEL_WARNING, "cupti_handed_over",
      std::string("the program started its own CUPTI client (a profiler) ") + when +
          " after tracing began, with a second CUPTI library in the process, so CUPTI "
          "cannot be shared with it: cumemtrace handed CUPTI over, and memory and kernel "
          "records end there; NVTX ranges and process lifetime go on");
  WakeSender();
}

void TracerRuntime::WakeSender() {
  std::lock_guard<std::mutex> lock(wake_mutex_);
  wake_requested_ = true;
  wake_.notify_one();
}

void TracerRuntime::OnContextCreated(uint32_t device) {
  CuptiSession::Get().LoadDriver();
  HostRecord record;
  record.type = HostRecord::Type::kDeviceSeen;
  record.timestamp_ns = MonotonicNs();
  record.device = device;
  recorder_.Record(std::move(record));
  // Registered at the first context, so it runs before the CUDA runtime's and the
  // framework's earlier exit handlers tear the context down (a constructor-time handler
  // that flushed CUPTI crashed Python at exit).
  if (!exit_flush_registered_.exchange(true)) on_exit(OnExitFlushCupti, nullptr);
}

void TracerRuntime::OnExitFlushCupti(int status, void* arg) {
  TracerRuntime& self = Get();
  if (getpid() != self.pid_ || !self.recorder_.recording()) return;
  CuptiSession::Get().Flush(/*forced=*/true);
}

// True when the library is loaded in this process (never loads it).
static bool Loaded(const char* soname) {
  void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

void TracerRuntime::OnExit(int status, void* arg) {
  TracerRuntime& self = Get();
  if (getpid() != self.pid_ || !self.recorder_.recording()) return;
  // The driver starts CUPTI through the injection hook; without a driver that never
  // happens, so say it once here when the program did load the CUDA runtime.
  if (!self.cupti_started_.load() && !Loaded("libcuda.so.1") &&
      (Loaded("libcudart.so.13") || Loaded("libcudart.so.12") || Loaded("libc10_cuda.so"))) {
    self.recorder_.Notice(
        v1::NOTICE_LEVEL_WARNING, "no_cuda_driver",
        "the program loaded the CUDA runtime but no CUDA driver was found: no GPU "
        "memory was recorded, only NVTX ranges and process lifetime");
  }
  HostRecord record;
  record.type = HostRecord::Type::kProcessExit;
  record.timestamp_ns = MonotonicNs();
  record.error_code = status;
  // Threads that just stopped pushing may have left the queue full: the exit still goes.
  self.queue_.PushPastCapacity(std::move(record));
  std::unique_lock<std::mutex> lock(self.wake_mutex_);
  self.stop_requested_ = true;
  self.wake_.notify_one();
  // Bounded: a stopped or dead collector never holds the program's exit hostage.
  self.wake_.wait_for(lock, kExitWait, [&] { return self.sender_done_; });
  self.queue_.set_wait_when_full(false);  // a sender still stuck makes no more room
  self.recorder_.set_recording(false);
}

void TracerRuntime::AtForkPrepare() {
  WaitForInitsBeforeFork();
  LockNvtxBeforeFork();
  Get().queue_.LockBeforeFork();
}

void TracerRuntime::AtForkParent() {
  Get().queue_.UnlockInParentAfterFork();
  UnlockNvtxInParentAfterFork();
}

void TracerRuntime::AtForkChild() {
  // The sender thread does not exist in the child and the parent's stream is not ours.
  // A child that execs loads the tracer afresh and opens its own stream. A child that goes
  // on without exec (DataLoader workers, multiprocessing) is traced as its own process from
  // its first event: NVTX and process lifetime only, since CUDA cannot be used in a child
  // of a process that initialized it. Nothing here may block or call CUPTI.
  TracerRuntime& self = Get();
  ++g_tid_generation;
  const bool parent_was_recording = self.recorder_.recording();
  const bool parent_start_pending = self.recorder_.start_pending();
  self.recorder_.set_recording(false);
  new (&self.start_mutex_) std::mutex();
  // Before the ring's memory (which holds the buffers) is let go of.
  self.recorder_.buffers().ResetInChildAfterFork();
  self.queue_.ResetInChildAfterFork();
  ResetNvtxInChildAfterFork();
  ResetPythonFramesInChildAfterFork();
  g_inits_in_progress.store(0);
  // Rebuilt, never destroyed: another parent thread may have held them, and the parent's
  // sender was waiting on the condition variable (a copied waiter can block notify).
  new (&self.wake_mutex_) std::mutex();
  new (&self.wake_) std::condition_variable();
  self.recorder_.ResetNoticesInChildAfterFork();
  self.wake_requested_ = false;
  self.stop_requested_ = false;
  self.sender_done_ = false;
  if (g_sender != nullptr) {
    g_sender->connection.AbandonAfterFork();
    if (g_sender->ring_fd >= 0 &&
        SameDescriptor(g_sender->ring_fd, g_sender->ring_dev, g_sender->ring_ino)) {
      close(g_sender->ring_fd);  // the child's copy; the parent still sends its own
    }
  }
  g_sender = nullptr;  // the parent's, leaked
  const bool child_traced = (self.started_.load() && parent_was_recording) ||
                            (!self.started_.load() && parent_start_pending);
  if (child_traced) CollectorConnection::PrepareSocketAfterFork();
  CuptiSession::Get().ForgetInChildAfterFork();
  TorchBridge::Get().StopInForkedChild();
  if (self.started_.load() && parent_was_recording) {
    self.started_.store(false);
    self.cupti_started_.store(true);  // never CUPTI in this child
    self.pending_mode_.store(self.mode_);
    self.recorder_.set_start_pending(true);
    self.recorder_.set_recording(true);  // hooks queue events; the first one starts the stream
  } else if (!self.started_.load() && parent_start_pending) {
    self.recorder_.set_recording(true);  // the parent had not started yet: neither has the child
  }
}

void TracerRuntime::AppendHandshake(std::string* frame, uint64_t ring_capacity) {
  v1::StreamMessage hello;
  v1::Handshake* handshake = hello.mutable_handshake();
  handshake->set_magic(v1::HANDSHAKE_MAGIC);
  handshake->set_protocol_version(v1::PROTOCOL_VERSION);
  handshake->set_pid(static_cast<uint32_t>(pid_));
  handshake->set_ppid(static_cast<uint32_t>(getppid()));
  for (std::string& arg : ReadCommandLine()) handshake->add_command_line(std::move(arg));
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  handshake->set_hostname(hostname);
  handshake->mutable_clock_pair()->set_realtime_ns(RealtimeNs());
  handshake->mutable_clock_pair()->set_monotonic_ns(MonotonicNs());
  handshake->set_timestamp_clock(v1::TIMESTAMP_CLOCK_MONOTONIC);
  handshake->set_tracer_version(kTracerVersion);
  // Environment values are bounded too (4 KiB each) to keep the handshake small.
  auto env_text = [](const char* value) { return std::string(value).substr(0, 4096); };
  if (const char* conf = getenv("PYTORCH_CUDA_ALLOC_CONF")) {
    handshake->set_pytorch_alloc_conf(env_text(conf));
  }
  if (const char* mode = getenv("CUMEMTRACE_ALLOCATOR_MODE")) {
    handshake->set_allocator_mode(env_text(mode));
  }
  handshake->set_injection_mode(mode_);
  handshake->set_kernels_enabled(kernels_ == KernelRecording::kRecords);
  handshake->set_kernel_launches_enabled(kernels_ == KernelRecording::kLaunches);
  handshake->set_trace_start_ns(start_ns_);
  handshake->set_stacks(StackModeName(CurrentStackMode()));
  // torchrun and SLURM name each process's place in the job in its environment.
  auto env_int = [](const char* first, const char* second, int32_t* out) {
    for (const char* name : {first, second}) {
      const char* value = getenv(name);
      if (value == nullptr || *value == '\0') continue;
      char* end = nullptr;
      const long n = strtol(value, &end, 10);
      if (end != nullptr && *end == '\0') {
        *out = static_cast<int32_t>(n);
        return true;
      }
    }
    return false;
  };
  int32_t value = 0;
  if (env_int("RANK", "SLURM_PROCID", &value)) handshake->set_rank(value);
  if (env_int("LOCAL_RANK", "SLURM_LOCALID", &value)) handshake->set_local_rank(value);
  if (env_int("WORLD_SIZE", "SLURM_NTASKS", &value)) handshake->set_world_size(value);
  if (ring_capacity > 0) {
    handshake->mutable_shared_ring()->set_layout_version(v1::ring::kLayoutVersion);
    handshake->mutable_shared_ring()->set_capacity(ring_capacity);
    handshake->mutable_shared_ring()->set_thread_buffer_bytes(queue_.extra_bytes());
  }
  AppendFramedMessage(hello, frame);
}

void TracerRuntime::SendHandshake() {
  SenderState& s = *g_sender;
  // The ring's descriptor rides on the handshake's first bytes; then it is the collector's
  // to keep and ours to close.
  if (s.ring_fd >= 0 && s.connection.SendWithDescriptor(&s.outbox, s.ring_fd)) {
    if (SameDescriptor(s.ring_fd, s.ring_dev, s.ring_ino)) close(s.ring_fd);
    s.ring_fd = -1;
  }
  // What is left of the handshake goes with the first drain.
}

void TracerRuntime::SenderMain() {
  pthread_setname_np(pthread_self(), "cumemtrace-tx");
  RecordQueue::MarkSenderThread();  // a record it makes never waits for itself
  SenderState& s = *g_sender;
  std::string& outbox = s.outbox;

  std::string error;
  if (!s.connection.connected()) s.connection.Connect(socket_path_, &error);
  if (s.connection.connected() && s.ring_fd >= 0) SendHandshake();
  if (!s.connection.connected()) {
    // The notice before recording stops: OnExit waits for this thread only while recording
    // is on, and a program exiting meanwhile would lose the one line that says why.
    recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "no_collector",
           "not tracing: " + error +
               " (start `cumemtrace daemon`, or run the program with `cumemtrace run`)");
    queue_.set_wait_when_full(false);  // nothing will make room
    recorder_.set_recording(false);
    std::lock_guard<std::mutex> lock(wake_mutex_);
    sender_done_ = true;
    wake_.notify_all();
    return;
  }

  bool busy = false;
  for (;;) {
    queue_.SenderBeat();
    queue_.PopulateAhead();
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      // Records left in the ring by the last drain are taken at once.
      const auto interval = queue_.HasUntaken() && busy ? std::chrono::milliseconds(0)
                            : busy                      ? kBusyDrainInterval
                                                        : kDrainInterval;
      wake_.wait_for(lock, interval, [&] { return wake_requested_ || stop_requested_; });
      wake_requested_ = false;
      stopping = stop_requested_;
    }
    CuptiSession& cupti = CuptiSession::Get();
    const uint64_t now = MonotonicNs();
    if (cupti.started() && !stopping && now - s.last_cupti_flush_ns >= kCuptiFlushIntervalNs) {
      cupti.Flush(/*forced=*/false);
      s.last_cupti_flush_ns = now;
    }
    if (std::string text; TakePythonFramesNotice(&text)) {
      recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "python_stacks_without_gil", text);
    }
    // The last drain keeps everything: the exit record and the count of what was dropped
    // while the collector did not read must not be the next thing thrown away.
    const bool alive = DrainOnce(&outbox, /*final=*/stopping);
    const bool drained_many = s.host_records.size() >= kBusyRecords;
    if (alive && !outbox.empty()) {
      const size_t before = outbox.size();
      const CollectorConnection::SendResult sent = s.connection.Send(
          &outbox, stopping ? kExitSendBudgetMs : (busy || drained_many ? kBusySendMs : 0));
      s.outbox_consumed += before - outbox.size();
      if (sent == CollectorConnection::SendResult::kClosed) {
        recorder_.set_recording(false);
        recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "collector_lost",
               "the collector went away; tracing stopped, the program continues");
      } else if (sent == CollectorConnection::SendResult::kTaken) {
        recorder_.set_recording(false);
        recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "connection_taken",
               "the program closed the tracer's connection and reused its descriptor; "
               "tracing stopped, the program continues");
      }
    }
    busy = drained_many || !outbox.empty();
    // Records whose frames are in the kernel's hands now may be overwritten.
    while (!s.frames.empty() && s.frames.front().first <= s.outbox_consumed) {
      queue_.Free(s.frames.front().second);
      s.frames.pop_front();
    }
    while (!s.buffer_frames.empty() && s.buffer_frames.front().first <= s.outbox_consumed) {
      for (const ThreadBuffers::SlotPosition& p : s.buffer_frames.front().second) {
        recorder_.buffers().Free(p);
      }
      s.buffer_frames.pop_front();
    }
    if (stopping || !s.connection.connected()) {
      // Threads still pushing must not wait for nobody (at exit, or the collector lost).
      queue_.set_wait_when_full(false);
      s.connection.Close();
      std::lock_guard<std::mutex> lock(wake_mutex_);
      sender_done_ = true;
      wake_.notify_all();
      return;
    }
  }
}

bool TracerRuntime::DrainOnce(std::string* outbox, bool final) {
  SenderState& s = *g_sender;
  CuptiSession& cupti = CuptiSession::Get();
  // Buffers first, host records second: every record in a taken buffer was produced after
  // its call's entry callback queued the correlation, so the table is complete for them.
  cupti.TakeCompletedBuffers(&s.buffers);
  // Settles the size of a tensor allocated last (bridge_core.h). Not at exit: torch's
  // allocator may be gone by then.
  if (!final) TorchBridge::Get().Poll();
  // At exit the outbox may exceed its bound by what the ring held (itself bounded).
  const size_t outbox_bound = final ? SIZE_MAX : max_outbox_bytes_;
  // Past the bound the collector is not reading: the records wait in the ring (where the
  // collector finds them if the process dies) and the ring, once full, counts drops.
  DropWindow queue_drops;
  if (outbox->size() <= outbox_bound) {
    uint64_t dropped_total = 0;
    queue_drops = queue_.TakeAll(&s.host_records, &s.record_ends, &dropped_total,
                                 final ? SIZE_MAX : kMaxRecordsPerDrain);
    s.ring_drops_taken = dropped_total;
    // The per-thread buffers' events after the ring's: the ring cursor does not move for them.
    ThreadBuffers& thread_buffers = recorder_.buffers();
    if (thread_buffers.active()) {
      thread_buffers.TakeAll(TorchBridge::EventClock(), &s.host_records, &s.slot_positions);
      s.record_ends.resize(s.host_records.size(),
                           s.record_ends.empty() ? s.ring_cursor : s.record_ends.back());
      if (thread_buffers.TakeFallbacks() > 0) {
        recorder_.Notice(v1::NOTICE_LEVEL_INFO, "thread_buffers_fallback",
                         "more threads recorded tensors than there are per-thread buffers "
                         "(or one was full): their events go through the shared ring");
      }
    }
  } else {
    s.host_records.clear();
    s.record_ends.clear();
  }

  // The collector is not reading and the outbox is at its bound: drop the batch, remember
  // how many events and which time span, so the report shows the gap.
  auto note_dropped = [&](uint64_t count, uint64_t first, uint64_t last) {
    s.dropped_while_full += count;
    if (first != 0 && (s.dropped_first_ns == 0 || first < s.dropped_first_ns)) {
      s.dropped_first_ns = first;
    }
    s.dropped_last_ns = std::max(s.dropped_last_ns, last);
  };
  auto discard_batch = [&] {
    uint64_t first = 0;
    uint64_t last = 0;
    const size_t count = s.encoder.DiscardBatch(&first, &last);
    note_dropped(count, first, last);
  };
  auto flush = [&] {
    if (s.encoder.FlushBatch(outbox) > 0) {
      s.frames.emplace_back(s.outbox_consumed + outbox->size(), s.ring_cursor);
    }
  };
  // Batches of ring records always go out: the ring bounds them, and a record taken from the
  // ring must reach the collector or stay in the ring.
  auto flush_if_full = [&](bool from_ring) {
    if (!s.encoder.batch_full()) return;
    if (!from_ring && outbox->size() > outbox_bound) {
      discard_batch();
    } else {
      flush();
    }
  };

  for (const HostRecord& record : s.host_records) {
    // A name given through NVTX wins over the kernel's: mark the thread named either way.
    if (record.type == HostRecord::Type::kThreadName) {
      s.named_threads.insert(record.thread_id);
    } else if (record.thread_id != 0 && s.named_threads.insert(record.thread_id).second) {
      const std::string name = ReadThreadName(record.thread_id);
      if (!name.empty()) {
        v1::ThreadName* thread = s.encoder.AddEvent(record.timestamp_ns)->mutable_thread_name();
        thread->set_thread_id(record.thread_id);
        thread->set_name(name);
      }
    }
    if (record.type == HostRecord::Type::kDeviceSeen &&
        s.described_devices.insert(record.device).second) {
      FillDeviceInfo(record.device, s.encoder.AddEvent(record.timestamp_ns)->mutable_device());
      if (cupti.device_buffer_bytes_per_context() > 0) {
        v1::TracerMemory* memory = s.encoder.AddEvent(record.timestamp_ns)->mutable_tracer_memory();
        memory->set_device(record.device);
        memory->set_bytes(cupti.device_buffer_bytes_per_context());
        memory->set_description(
            "CUPTI device buffers for kernel records (buffer size x pre-allocated count)");
      }
    }
    s.translator.AddHostRecord(record);
    s.ring_cursor = s.record_ends[static_cast<size_t>(&record - s.host_records.data())];
    s.encoder.set_ring_cursor(s.ring_cursor, s.ring_drops_reported);
    flush_if_full(/*from_ring=*/true);
  }
  // Padding and damage after the last record taken hold no event: the cursor passes them,
  // so that their space is freed too.
  if (queue_.taken_position() > s.ring_cursor) {
    s.ring_cursor = queue_.taken_position();
    s.encoder.set_ring_cursor(s.ring_cursor, s.ring_drops_reported);
  }
  if (!s.ring_damage_noticed && (queue_.damaged_bytes() > 0 || queue_.damaged_records() > 0)) {
    s.ring_damage_noticed = true;
    recorder_.Notice(v1::NOTICE_LEVEL_WARNING, "ring_damaged",
                     "something in the program wrote over the tracer's shared ring: what "
                     "could not be read as records was left out (" +
                         std::to_string(queue_.damaged_bytes()) + " bytes, " +
                         std::to_string(queue_.damaged_records()) + " records at first)");
  }
  // The CUPTI records below may be discarded with their batch: flush the ring's first, with
  // how far the per-thread buffers' units reach (they are all in it or before it).
  if (!s.slot_positions.empty()) s.encoder.AddThreadBufferPositions(s.slot_positions);
  flush();
  if (!s.slot_positions.empty()) {
    s.buffer_frames.emplace_back(s.outbox_consumed + outbox->size(), std::move(s.slot_positions));
    s.slot_positions.clear();
  }
  for (const CompletedBuffer& buffer : s.buffers) {
    s.translator.set_cupti_clock(cupti.ClockMapFor(buffer));
    cupti.ForEachRecord(buffer, [&](const CUpti_Activity* record) {
      s.translator.AddActivity(record);
      flush_if_full(/*from_ring=*/false);
    });
    cupti.RecycleBuffer(buffer.data);
  }

  const uint64_t now = MonotonicNs();
  // Queue drops join the outbox drops: one DroppedRecords event, sent only when it can
  // really go out (added to a batch that is then discarded, its count would be lost).
  if (queue_drops.count > 0) {
    note_dropped(queue_drops.count, queue_drops.first_ns, queue_drops.last_ns);
  }
  if (s.dropped_while_full > 0 && outbox->size() <= outbox_bound) {
    v1::DroppedRecords* dropped = s.encoder.AddEvent(now)->mutable_dropped();
    dropped->set_source(v1::DROP_SOURCE_TRACER_QUEUE);
    dropped->set_count(s.dropped_while_full);
    dropped->set_first_ns(s.dropped_first_ns);
    dropped->set_last_ns(s.dropped_last_ns);
    s.dropped_while_full = 0;
    s.dropped_first_ns = 0;
    s.dropped_last_ns = 0;
    s.ring_drops_reported = s.ring_drops_taken;
    s.encoder.set_ring_cursor(s.ring_cursor, s.ring_drops_reported);
  }
  if (const uint64_t cupti_drops = cupti.TakeDroppedRecords(); cupti_drops > 0) {
    v1::DroppedRecords* dropped = s.encoder.AddEvent(now)->mutable_dropped();
    dropped->set_source(v1::DROP_SOURCE_CUPTI);
    dropped->set_count(cupti_drops);
  }
  recorder_.TakeNotices([&](PendingNotice& pending) {
    v1::TracerNotice* notice = s.encoder.AddEvent(now)->mutable_notice();
    notice->set_level(pending.level);
    notice->set_code(std::move(pending.code));
    notice->set_text(std::move(pending.text));
  });
  if (outbox->size() > outbox_bound) {
    discard_batch();
  } else {
    flush();
  }
  // Records that made no event (correlations) are freed with the frames before them.
  if (s.frames.empty() || s.frames.back().second < s.ring_cursor) {
    s.frames.emplace_back(s.outbox_consumed + outbox->size(), s.ring_cursor);
  }
  return s.connection.connected();
}

}  // namespace cumemtrace::tracer
