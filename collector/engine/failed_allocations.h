// Internal: the failed allocations of one process, which the sweep meets in time order,
// split into the failures the program saw and the driver's own retries.
//
// A driver call can fail where the program never sees it: under cudaMallocAsync, one
// cuMemAllocAsync per new autograd thread fails with CUDA_ERROR_INVALID_CONTEXT and the
// runtime retries it at once; with expandable_segments, PyTorch probes cuMemCreate for a
// fabric handle, gets CUDA_ERROR_NOT_PERMITTED and asks again for a file descriptor handle.
// A failure is a driver retry when its error is not out-of-memory and the next memory event
// of the same thread is a successful allocation of at least the requested bytes on the same
// device (for cuMemCreate: the cuMemMap of the handle the retry made). An out-of-memory error
// is always a failure the program saw, even when its allocator recovers: it is the event
// the user looks for.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/oom.h"
#include "collector/engine/phases.h"

namespace cumemtrace::internal {

class FailedAllocationLog {
 public:
  // Every allocation, release and failed allocation, in time order, before OnFailed.
  void OnMemoryEvent(const Event& e);
  // A failed allocation, attributed to `at`, with `in_use` device memory on its slot and
  // `live` the device memory live there then: its post-mortem (oom.h) is made here.
  void OnFailed(const DecodedStream& s, const Event& e, uint32_t slot, const Attribution& at,
                uint64_t in_use, const std::vector<HeldAllocation>& live);
  // Counts the failures the program saw in their phases (slots as given to OnFailed, so
  // before any reordering), and lists them and the retries in the report, in time order.
  void Finish(const DecodedStream& s, uint64_t first, PhaseTracker* phases, ProcessReport* p);
  // In the category pass (whose sweep meets the same failures in the same order as Finish's
  // did): what held the memory at each failure by category, into the report Finish wrote.
  void FillCategories(ProcessReport* p) const;

 private:
  struct Failure {
    Event event;
    uint32_t slot;
    uint64_t in_use;
    Attribution at;
    bool retried = false;
    OomPostMortem post_mortem;  // held groups by name below, named at Finish
    std::map<int32_t, HeldGroup> by_phase;
    std::map<uint8_t, HeldGroup> by_kind;
    std::map<uint32_t, HeldGroup> by_library;
    std::map<uint32_t, HeldGroup> by_stack;
    std::map<uint8_t, HeldGroup> by_category;  // tensor allocations, by category value
    std::vector<HeldAllocation> largest;       // the largest live then, largest first
  };
  // The post-mortem's held groups, by name.
  static void NameHeld(const Failure& f, const DecodedStream& s, const PhaseTracker& phases,
                       uint64_t first, OomPostMortem* pm);
  static HeldBlock Holder(const HeldAllocation& a, const DecodedStream& s,
                          const PhaseTracker& phases, uint64_t first);

  std::vector<Failure> failures_;
  std::unordered_map<uint32_t, size_t> pending_;  // thread -> its undecided failure
};

}  // namespace cumemtrace::internal
