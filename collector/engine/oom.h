// Internal: the post-mortem of a failed allocation (docs/oom.md): PyTorch's cache rebuilt at
// that instant from the bridge's events, why the request did not fit, and what would have
// let it fit.
//
// The caching allocator's blocks tile each segment and free neighbours merge, so the free
// blocks at an instant are exactly the gaps between the live blocks inside each live segment.
// The segments come from the bridge's segment events (with their pool and stream), the live
// blocks from the sweep's live set (the tensors, TORCH_ALLOCATED).
#pragma once

#include <cstdint>
#include <vector>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/report.h"

namespace cumemtrace::internal {

// A device allocation live at the failure, as the sweep holds it.
struct HeldAllocation {
  uint64_t address = 0;
  uint64_t bytes = 0;
  int32_t phase = -1;
  uint32_t caller_id = 0;
  uint32_t stack_id = 0;
  uint8_t kind = 0;
  uint64_t birth_ns = 0;  // absolute
  // Its category byte (lifetimes.h) in the category pass; 0: no tensor, or another pass.
  uint8_t category = 0;
};

// The caching allocator's sizes (c10/cuda/CUDACachingAllocator.cpp).
constexpr uint64_t kTorchSmallSize = uint64_t{1} << 20;     // the small pool's largest block
constexpr uint64_t kTorchSmallBuffer = uint64_t{2} << 20;   // a small-pool segment
constexpr uint64_t kTorchLargeBuffer = uint64_t{20} << 20;  // a segment for 1 to 10 MiB
constexpr uint64_t kTorchMinLargeAlloc = uint64_t{10} << 20;
constexpr uint64_t kTorchRoundLarge = uint64_t{2} << 20;

// The driver allocation a new segment for a block of `bytes` needs (get_allocation_size).
uint64_t TorchSegmentSize(uint64_t bytes);

// Fills the cache figures, the reason and the verdicts of `failed` (a kFailedAllocation: the
// allocator's OOM, kind TORCH_ALLOCATED, or a failed driver call) on device `failed.device`,
// with `live` the device memory live then. Leaves the held groups to the caller.
void FillCachePostMortem(const DecodedStream& s, const Event& failed,
                         const std::vector<HeldAllocation>& live, OomPostMortem* out);

}  // namespace cumemtrace::internal
