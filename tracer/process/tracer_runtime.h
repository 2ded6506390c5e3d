// The tracer's process-wide state: started once whichever injection path comes first,
// leaked at exit on purpose (heaptrack does the same: static destructors of a traced
// program run in no reliable order, and CUPTI can still call us during them).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/recorder.h"
#include "tracer/sources/cupti/cupti_session.h"

namespace cumemtrace::tracer {

// Marks a thread as inside the tracer's initialization (Start, InitializeInjectionNvtx2)
// for its lifetime; fork waits for such threads (see WaitForInitsBeforeFork).
class InitScope {
 public:
  InitScope();
  ~InitScope();
  InitScope(const InitScope&) = delete;
  InitScope& operator=(const InitScope&) = delete;
};

class TracerRuntime {
 public:
  static TracerRuntime& Get();

  // Connects to the collector and starts the sender thread, once per process. Safe to call
  // from every entry point and from several threads at once: a caller returns when the
  // tracer has started. start_ns, when not 0, is the earliest time the trace covers.
  void Start(v1::InjectionMode mode, uint64_t start_ns = 0);
  // NVTX's init callback: Start is left to the first recorded event (unless the tracer has
  // started already), so that the NVTX header's init, and with it its fork race, stays
  // short. Hooks record meanwhile; the first record starts the tracer before it is queued.
  void StartAtFirstEvent(v1::InjectionMode mode);
  // Starts CUPTI (once). From the driver's InitializeInjection, or from the constructor when
  // CUDA_INJECTION64_PATH already names another library.
  void StartCupti();

  // CUDA_INJECTION64_PATH names another tool (Nsight, compute-sanitizer): it owns CUPTI, and
  // the tracer never subscribes (said once).
  void StepAsideForTool(const char* tool);
  void WakeSender();

  // What the sources ask of the process (CuptiSessionHooks, Recorder's first event).
  // The program made its first CUPTI call that reaches the tracer (cupti_mux.h). Starts the
  // tracer's CUPTI session if it has not started yet; returns whether the program's calls
  // can share it, else hands CUPTI over (CuptiSession::HandOver).
  bool ShareCuptiWithClient();
  // The program's own CUPTI client took CUPTI over (CuptiSession::HandOver).
  void OnCuptiHandedOver();
  // A CUDA context was created on `device` (resource callback, program thread).
  void OnContextCreated(uint32_t device);

 private:
  TracerRuntime();
  void SenderMain();
  // The first frame, with the ring's description when ring_capacity > 0.
  void AppendHandshake(std::string* out, uint64_t ring_capacity);
  // Sends the handshake's first bytes with the ring's descriptor attached.
  void SendHandshake();
  // Moves queued records and CUPTI buffers into *outbox as framed batches. Past the outbox
  // bound, batches are dropped and counted, except in the final drain at exit.
  bool DrainOnce(std::string* outbox, bool final);
  void EmitDeviceInfo(uint32_t device, std::vector<HostRecord>* unused);
  static void OnExit(int status, void* arg);
  static void OnExitFlushCupti(int status, void* arg);
  static void AtForkPrepare();
  static void AtForkParent();
  static void AtForkChild();
  void StartPending(uint64_t first_event_ns);

  std::atomic<bool> started_{false};
  std::atomic<bool> cupti_started_{false};
  std::atomic<bool> stepped_aside_{false};
  std::atomic<bool> exit_flush_registered_{false};
  // The mode the first event starts the tracer in (Recorder::start_pending).
  std::atomic<int> pending_mode_{v1::INJECTION_MODE_UNSPECIFIED};
  // Held for the whole of Start: a second caller waits until the tracer has started (its
  // ring exists), so no thread's first event is pushed into a ring not yet made.
  std::mutex start_mutex_;
  bool exit_handler_registered_ = false;  // inherited by forked children
  std::atomic<bool> fork_handlers_registered_{false};  // inherited by forked children
  pid_t pid_ = 0;
  v1::InjectionMode mode_ = v1::INJECTION_MODE_UNSPECIFIED;
  KernelRecording kernels_ = KernelRecording::kAuto;
  std::string socket_path_;
  uint64_t start_ns_ = 0;
  // Encoded bytes held for a collector that does not read; derived from the queue bound so
  // that CUMEMTRACE_QUEUE_EVENTS bounds the tracer's memory as a whole.
  size_t max_outbox_bytes_ = 0;

  Recorder& recorder_;
  RecordQueue& queue_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool wake_requested_ = false;
  bool stop_requested_ = false;
  bool sender_done_ = false;
};

}  // namespace cumemtrace::tracer
