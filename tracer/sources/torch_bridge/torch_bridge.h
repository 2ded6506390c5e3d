// The tracer's side of the PyTorch bridge: when PyTorch's caching allocator (libc10_cuda)
// first asks the driver for memory, find the torch version next to the loaded libc10_cuda,
// dlopen the shim built for that version (bridge_abi.h) and attach its trace tracker, so
// that tensors (the allocator's blocks) reach the same queue as the driver's segments. When
// there is no shim for that version, or it refuses, say so once and go on with segments.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace cumemtrace::tracer {

// A tensor's event in the ring's own layout (shared_ring.h's TorchRecord), built on the
// hook's stack and written as it is (RecordQueue::PushTorchRecord sets size, type, flags).
inline v1::ring::TorchRecord TorchRecordOf(const cumemtrace_torch_event& event, uint32_t thread_id,
                                           uint64_t timestamp_ns) {
  v1::ring::TorchRecord r{};
  r.action = static_cast<uint8_t>(event.action);
  r.thread_id = thread_id;
  r.device = event.device;
  r.timestamp_ns = timestamp_ns;
  r.address = event.address;
  r.requested_bytes = event.requested_bytes;
  r.stream = event.stream;
  r.sequence = event.sequence;
  r.allocated_total = event.allocated_bytes_total;
  r.allocated_current = event.allocated_bytes_current;
  r.reserved_current = event.reserved_bytes_current;
  r.pool_first = event.pool_id_first;
  r.pool_second = event.pool_id_second;
  return r;
}

// The torch version installed with a libc10_cuda: `__version__` of <dir>/../version.py (a
// wheel: torch/lib/libc10_cuda.so, torch/version.py) or the first line of
// <dir>/../build-version (a LibTorch archive). "" when neither can be read.
std::string TorchVersionNextTo(const std::string& c10_cuda_path);
// "2.11.0+cu130" -> "2.11.0": the trace entry's layout follows the release, not the CUDA
// variant of its build.
std::string TorchReleaseOf(const std::string& version);
// File name of the shim for a torch version: libcumemtrace-torch-bridge-<release>.so.
std::string TorchBridgeFileName(const std::string& torch_version);

// What looking for a shim found. `bridge` is null when none can be used; `reason` says why.
struct TorchBridgeLookup {
  std::string torch_version;
  std::string shim_path;
  std::string bridge_torch_version;  // what the shim says it was built for
  const cumemtrace_torch_bridge* bridge = nullptr;
  std::string reason;
};

// Finds, loads and checks the shim for the torch installed with `c10_cuda_path`, in
// `bridge_dir`. Never throws; a shim that does not match is unloaded again.
TorchBridgeLookup LoadTorchBridge(const std::string& c10_cuda_path,
                                  const std::string& bridge_dir);

// Path of the loaded libc10_cuda (dl_iterate_phdr), "" when none is loaded.
std::string LoadedC10CudaPath();

// True for the calling module of PyTorch's caching allocator ("libc10_cuda.so").
bool IsTorchAllocatorModule(const std::string& caller_module);

class TorchBridge {
 public:
  static TorchBridge& Get();

  // From the CUPTI exit callback of a successful synchronous allocation call, with the
  // module that made it. At the first one from libc10_cuda the allocator is initialized and
  // this thread holds the device's allocator lock (torch records the segment after the
  // call returns), so the tracker attached here sees that segment and every block after.
  // Other threads return at once while one attaches: they may hold other devices' locks,
  // which the attach takes.
  void OnAllocationCall(const std::string& caller_module) {
    if (state_.load(std::memory_order_acquire) != kUntried) return;
    if (!IsTorchAllocatorModule(caller_module)) return;
    AttachOnce();
  }
  // From the sender thread, each drain: settles the size of a trailing allocation.
  void Poll();
  // In a forked child: the parent's allocator state is not the child's.
  void StopInForkedChild();

 private:
  enum : int { kUntried = 0, kAttaching = 1, kDone = 2 };
  void AttachOnce();

  std::atomic<int> state_{kUntried};
  std::atomic<const cumemtrace_torch_bridge*> attached_{nullptr};
  std::atomic<bool> launches_wanted_{false};  // set by AttachOnce, acted on by Poll
};

}  // namespace cumemtrace::tracer
