// Test helper: a fake PyTorch caching allocator that sends the bridge's events with the
// counters the real one would show (so block sizes settle as in a real trace), the driver's
// records of its segments, NVTX "forward" around everything, and failed driver calls.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "collector/engine/tests/trace_builder.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::testing {

inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr uint32_t kCuMemAlloc = 1, kC10Cuda = 2, kForward = 3, kCudaMalloc = 4,
                          kOomError = 5;
inline constexpr uint32_t kThread = 500;
inline constexpr uint64_t kTotal = 80 * 1024 * kMiB;

// The events a caching allocator sends through the bridge, with its counters.
class FakeAllocator {
 public:
  explicit FakeAllocator(bool attached = true) : s_(1, 4242) {
    // Native mode, its timestamps put on the wall clock (as a real run's are).
    s_.handshake().set_allocator_mode("native");
    s_.handshake().mutable_clock_pair()->set_monotonic_ns(1);
    s_.handshake().mutable_clock_pair()->set_realtime_ns(1'700'000'000'000'000'000);
    s_.String(kCuMemAlloc, "cuMemAlloc_v2").String(kC10Cuda, "/venv/torch/lib/libc10_cuda.so");
    s_.String(kForward, "forward").String(kCudaMalloc, "cudaMalloc");
    s_.String(kOomError, "cudaErrorMemoryAllocation");
    s_.Device(0, "NVIDIA H100 80GB HBM3", kTotal).Flush();
    v1::Event state;
    state.set_timestamp_ns(5);
    state.mutable_torch_bridge()->set_attached(attached);
    state.mutable_torch_bridge()->set_torch_version("2.11.0+cu130");
    s_.Raw(state);
    s_.Push(6, kThread, kForward);
  }

  // A segment from the driver (the driver's record, then the allocator's event).
  FakeAllocator& Segment(uint64_t address, uint64_t bytes, uint64_t stream = 0) {
    s_.Alloc(++ts_, 0, address, bytes, kDevice, kThread, kCuMemAlloc, kC10Cuda);
    Event(v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC, address, bytes, stream, true);
    return *this;
  }
  FakeAllocator& SegmentFree(uint64_t address, uint64_t bytes) {
    Event(v1::TORCH_ALLOCATOR_ACTION_SEGMENT_FREE, address, bytes, 0, true);
    s_.Free(++ts_, 0, address, bytes);
    return *this;
  }
  // Expandable segments: pages mapped (no driver allocation of its own in this test).
  FakeAllocator& Map(uint64_t address, uint64_t bytes, uint64_t stream = 0) {
    Event(v1::TORCH_ALLOCATOR_ACTION_SEGMENT_MAP, address, bytes, stream, true);
    return *this;
  }
  FakeAllocator& Unmap(uint64_t address, uint64_t bytes, uint64_t stream = 0) {
    Event(v1::TORCH_ALLOCATOR_ACTION_SEGMENT_UNMAP, address, bytes, stream, true);
    return *this;
  }
  // A tensor's block of `block` bytes (what the counters grow by).
  FakeAllocator& Alloc(uint64_t address, uint64_t block, uint64_t stream = 0) {
    Event(v1::TORCH_ALLOCATOR_ACTION_ALLOC, address, block - 100, stream, true);
    total_ += block;
    current_ += block;
    blocks_[address] = block;
    return *this;
  }
  FakeAllocator& Free(uint64_t address) {
    Event(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, address, blocks_.at(address), 0, false);
    current_ -= blocks_.at(address);
    blocks_.erase(address);
    return *this;
  }
  // PyTorch's OOM: the request as it rounds it, the device's free bytes in `address`.
  FakeAllocator& Oom(uint64_t request, uint64_t device_free, uint64_t stream = 0) {
    Event(v1::TORCH_ALLOCATOR_ACTION_OOM, device_free, request, stream, true);
    return *this;
  }
  // A failed cudaMalloc of another library (no caller: not libc10_cuda).
  FakeAllocator& DriverFailure(uint64_t request, uint64_t device_free) {
    s_.Failed(++ts_, 0, 900, request, 2, kCudaMalloc, kOomError, device_free, kTotal);
    return *this;
  }
  // The program's objects name the tensor at `address` (the Python side's TensorCategory).
  FakeAllocator& Tag(uint64_t address, v1::Category category) {
    v1::Event e;
    e.set_timestamp_ns(++ts_);
    v1::TensorCategory* t = e.mutable_tensor_category();
    t->set_address(address);
    t->set_bytes(blocks_.count(address) != 0 ? blocks_.at(address) : 0);
    t->set_category(category);
    s_.Raw(e);
    return *this;
  }
  // Device memory another library takes for itself (no tensor): a cudaMalloc of its own.
  FakeAllocator& Library(uint64_t address, uint64_t bytes) {
    s_.Alloc(++ts_, 0, address, bytes, kDevice, kThread, kCudaMalloc);
    return *this;
  }
  FakeAllocator& Raw(const v1::Event& event) {
    s_.Raw(event);
    return *this;
  }
  std::vector<v1::TraceChunk> Chunks() {
    s_.Pop(++ts_, kThread);
    s_.Exit(++ts_, 1).Flush();
    return s_.Chunks();
  }

 private:
  void Event(v1::TorchAllocatorAction action, uint64_t address, uint64_t bytes, uint64_t stream,
             bool counters) {
    v1::Event e;
    e.set_timestamp_ns(++ts_);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(action);
    t->set_sequence(++sequence_);
    t->set_address(address);
    t->set_requested_bytes(bytes);
    t->set_stream(stream);
    t->set_thread_id(kThread);
    if (counters) {
      t->set_allocated_bytes_total(total_);
      t->set_allocated_bytes_current(current_);
    }
    s_.Raw(e);
  }

  StreamBuilder s_;
  uint64_t ts_ = 10;
  uint64_t sequence_ = 0;
  uint64_t total_ = 0;
  uint64_t current_ = 0;
  std::map<uint64_t, uint64_t> blocks_;
};

// The example of docs/oom.md and README.md ("What held the memory"): a 512 MiB segment split
// into eight 64 MiB tensors, every other one freed (the program's objects named a parameter,
// optimizer state and an activation among those kept, and a parameter among those freed),
// a 512-byte tensor in a small segment, another library's 10 MiB, then a request of 128 MiB
// with 40 MiB free on the device; after the OOM, the parameter and the optimizer state are
// freed and a larger parameter comes. `live`: the tensors live at the OOM, by address.
inline constexpr uint64_t kExampleSegment = 0x100000000ull;
inline constexpr uint64_t kExampleSmallSegment = 0x200000000ull;
inline constexpr uint64_t kExampleLibrary = 0x300000000ull;
inline FakeAllocator OomWithCategories(std::map<uint64_t, uint64_t>* live) {
  constexpr uint64_t kSeg = kExampleSegment, kBlock = 64 * kMiB;
  FakeAllocator a;
  a.Segment(kSeg, 512 * kMiB);
  for (uint64_t i = 0; i < 8; ++i) {
    a.Alloc(kSeg + i * kBlock, kBlock);
    (*live)[kSeg + i * kBlock] = kBlock;
  }
  a.Tag(kSeg, v1::CATEGORY_PARAMETER)
      .Tag(kSeg + 2 * kBlock, v1::CATEGORY_OPTIMIZER_STATE)
      .Tag(kSeg + 4 * kBlock, v1::CATEGORY_ACTIVATION)
      .Tag(kSeg + 1 * kBlock, v1::CATEGORY_PARAMETER);  // freed before the OOM
  for (uint64_t i = 1; i < 8; i += 2) {
    a.Free(kSeg + i * kBlock);
    live->erase(kSeg + i * kBlock);
  }
  a.Segment(kExampleSmallSegment, 2 * kMiB).Alloc(kExampleSmallSegment, 512);
  (*live)[kExampleSmallSegment] = 512;
  a.Library(kExampleLibrary, 10 * kMiB);  // not a tensor
  a.Oom(128 * kMiB, 40 * kMiB);
  a.Free(kSeg).Free(kSeg + 2 * kBlock).Alloc(kSeg + 1 * kBlock, 2 * kBlock);
  a.Tag(kSeg + 1 * kBlock, v1::CATEGORY_PARAMETER);
  return a;
}

}  // namespace cumemtrace::testing
