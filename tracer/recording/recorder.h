// The one entry every hook records through (NVTX, CUPTI, the PyTorch bridge), on the
// program's threads: whether events are wanted, the ring they go into, and the tracer's
// notices. The process layer (process/tracer_runtime.cc) starts and stops it and installs
// what the first event does when the tracer's start was left to it; nothing here calls up.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/record_queue.h"
#include "tracer/recording/thread_buffers.h"

namespace cumemtrace::tracer {

// A notice not yet sent (the sender makes it a TracerNotice event).
struct PendingNotice {
  v1::NoticeLevel level;
  std::string code;
  std::string text;
};

class Recorder {
 public:
  // Leaked at exit on purpose, as the process state (tracer_runtime.h).
  static Recorder& Get();

  // True while events are wanted: hooks test this first and return at once otherwise.
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  void Record(HostRecord&& record) {
    // The first event starts the tracer when NVTX loaded it, and a forked child's first
    // event starts the child's own stream (tracer_runtime.cc's AtForkChild).
    if (start_pending_.load(std::memory_order_acquire)) StartPending(record.timestamp_ns);
    queue_.Push(record);
    // The ring holds a copy of the bridge's state (sent once per process).
    delete record.torch_bridge_state;
  }
  // The PyTorch bridge's events (RecordQueue::PushTorchRecord), from its hook, built by the
  // bridge in the ring's own layout: false when the ring had no room.
  bool RecordTorch(v1::ring::TorchRecord& record, const v1::ring::TorchAttribution* attribution,
                   const uint64_t* stack, uint32_t stack_words) {
    if (start_pending_.load(std::memory_order_acquire)) StartPending(record.timestamp_ns);
    return queue_.PushTorchRecord(record, attribution, stack, stack_words);
  }
  // A tensor's event into the thread's own buffer (thread_buffers.h) when they are on (unless
  // CUMEMTRACE_PER_THREAD=0) and made: false when the caller must write it into the ring.
  bool RecordTensor(const TensorEvent& event) {
    if (start_pending_.load(std::memory_order_acquire)) return false;  // the ring's path starts
    return buffers_.Write(event);
  }
  bool per_thread() const { return per_thread_; }
  // Names a module path or operator id (a kAttributionName record; `kind` a
  // v1::AttributionKind) on the calling thread, before the first event that uses it.
  void RecordAttributionName(uint32_t kind, uint32_t id, std::string name);
  // `run --modules` (CUMEMTRACE_MODULES=1): tensors carry the module the Python side says
  // their thread is in; `run --ops` (CUMEMTRACE_OPS=1): the operators the bridge watches.
  bool modules() const { return modules_; }
  bool ops() const { return ops_; }
  // The module path id this thread is in (the Python side's module hooks set it), 0: none.
  static uint32_t current_module() { return t_module; }
  static void set_current_module(uint32_t id) { t_module = id; }
  // Prints a one-line notice on stderr (unless quiet) and keeps it for the sender, once per
  // code and process. Allocates and locks: for rare events, never a hook's every call.
  void Notice(v1::NoticeLevel level, const std::string& code, const std::string& text);

  // The process layer's side.
  RecordQueue& queue() { return queue_; }
  ThreadBuffers& buffers() { return buffers_; }
  void set_recording(bool on) { recording_.store(on); }
  bool start_pending() const { return start_pending_.load(); }
  // What the first event does while a start is pending (installed before the first such
  // start): it starts the tracer, stamped with that event's time.
  void set_start_at_first_event(void (*start)(uint64_t first_event_ns)) { start_ = start; }
  void set_start_pending(bool pending) { start_pending_.store(pending); }
  void set_quiet(bool quiet) { quiet_ = quiet; }
  // The sender's: each notice not yet sent, handed to `take` once.
  template <typename Take>
  void TakeNotices(Take&& take) {
    std::lock_guard<std::mutex> lock(notices_mutex_);
    for (PendingNotice& notice : notices_) take(notice);
    notices_.clear();
  }
  // In a forked child: another parent thread may have held the notices' lock.
  void ResetNoticesInChildAfterFork();

 private:
  Recorder();
  void StartPending(uint64_t first_event_ns);

  std::atomic<bool> recording_{false};
  // Set until the first event starts the tracer: after NVTX's init callback when NVTX loaded
  // the tracer, and in a forked child of a recording process.
  std::atomic<bool> start_pending_{false};
  void (*start_)(uint64_t first_event_ns) = nullptr;
  RecordQueue queue_;
  ThreadBuffers buffers_;
  const bool per_thread_;  // unless CUMEMTRACE_PER_THREAD=0
  const bool modules_;
  const bool ops_;
  // Read only with `run --modules`. Not initial-exec: NVTX and the CUDA driver may dlopen the
  // library, and its thread-locals do not fit the static TLS block those loads can use.
  static thread_local uint32_t t_module;
  bool quiet_ = false;
  std::mutex notices_mutex_;
  std::vector<PendingNotice> notices_;
  std::vector<std::string> printed_codes_;
};

}  // namespace cumemtrace::tracer
