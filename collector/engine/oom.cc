#include "collector/engine/oom.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <tuple>

#include "collector/engine/accountant.h"

namespace cumemtrace::internal {
namespace {

struct Segment {
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint64_t pool_first = 0;
  uint64_t pool_second = 0;
  bool expandable = false;
};
using Segments = std::map<uint64_t, Segment>;  // by start address

bool SamePool(const Segment& a, const Segment& b) {
  return a.expandable == b.expandable && a.stream == b.stream && a.pool_first == b.pool_first &&
         a.pool_second == b.pool_second;
}

// Expandable segments: pages mapped next to a mapping of the same pool and stream extend it.
void Map(Segments& segs, uint64_t address, const Segment& g) {
  uint64_t start = address, end = address + g.bytes;
  auto next = segs.lower_bound(address);
  if (next != segs.begin()) {
    auto prev = std::prev(next);
    if (SamePool(prev->second, g) && prev->first + prev->second.bytes == address) {
      start = prev->first;
      segs.erase(prev);
    }
  }
  next = segs.find(end);
  if (next != segs.end() && SamePool(next->second, g)) {
    end += next->second.bytes;
    segs.erase(next);
  }
  Segment merged = g;
  merged.bytes = end - start;
  segs[start] = merged;
}

// Unmapped pages leave the mapping around them in pieces.
void Unmap(Segments& segs, uint64_t address, uint64_t bytes) {
  auto it = segs.upper_bound(address);
  if (it == segs.begin()) return;
  --it;
  const uint64_t start = it->first, end = start + it->second.bytes;
  if (address >= end) return;
  const Segment g = it->second;
  segs.erase(it);
  if (address > start) {
    Segment left = g;
    left.bytes = address - start;
    segs[start] = left;
  }
  const uint64_t cut_end = std::min(end, address + bytes);
  if (cut_end < end) {
    Segment right = g;
    right.bytes = end - cut_end;
    segs[cut_end] = right;
  }
}

void Apply(Segments& segs, const TorchSegmentEvent& e) {
  Segment g;
  g.bytes = e.bytes;
  g.stream = e.stream;
  g.pool_first = e.pool_first;
  g.pool_second = e.pool_second;
  switch (e.action) {
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC:
      segs[e.address] = g;
      break;
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_FREE:
      segs.erase(e.address);
      break;
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_MAP:
      g.expandable = true;
      Map(segs, e.address, g);
      break;
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_UNMAP:
      Unmap(segs, e.address, e.bytes);
      break;
    default:
      break;
  }
}

// The bytes of whole pages of `page` bytes (counted from the segment's start) in a gap.
uint64_t WholePages(uint64_t segment, uint64_t gap_start, uint64_t gap_end, uint64_t page) {
  const uint64_t first = segment + (gap_start - segment + page - 1) / page * page;
  const uint64_t last = segment + (gap_end - segment) / page * page;
  return last > first ? last - first : 0;
}

uint64_t RoundUp(uint64_t bytes, uint64_t unit) { return (bytes + unit - 1) / unit * unit; }

// A segment's pool: PyTorch's small-pool segments are 2 MiB and large-pool ones at least
// 10 MiB; a mapping (expandable) is small when its blocks all are (at most 1 MiB).
struct SegmentFigures {
  const Segment* segment = nullptr;
  uint64_t start = 0;
  bool small = false;
  uint64_t allocated = 0;
  uint64_t blocks = 0;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // [start, end)
};

WouldFit Verdict(uint64_t available, uint64_t needed) {
  WouldFit w;
  w.available_bytes = available;
  w.needed_bytes = needed;
  w.fits = available >= needed;
  w.short_by_bytes = w.fits ? 0 : needed - available;
  return w;
}

// 1234567 -> "1,234,567 B": exact, as the figures it explains.
std::string Bytes(uint64_t b) {
  std::string out = std::to_string(b);
  for (int i = static_cast<int>(out.size()) - 3; i > 0; i -= 3) out.insert(i, ",");
  return out + " B";
}

}  // namespace

uint64_t TorchSegmentSize(uint64_t bytes) {
  if (bytes <= kTorchSmallSize) return kTorchSmallBuffer;
  if (bytes < kTorchMinLargeAlloc) return kTorchLargeBuffer;
  return RoundUp(bytes, kTorchRoundLarge);
}

void FillCachePostMortem(const DecodedStream& s, const Event& failed,
                         const std::vector<HeldAllocation>& live, OomPostMortem* out) {
  OomPostMortem& pm = *out;
  const bool torch_oom = failed.kind == kTorchAllocatedKind && failed.c < s.torch.ooms.size();
  pm.request_bytes = failed.a;
  pm.device_free_bytes = failed.b;
  pm.cache_known = s.torch.report.attached;
  if (!pm.cache_known) {
    pm.reason = "device_full";
    pm.smaller_request = Verdict(pm.device_free_bytes, pm.request_bytes);
    pm.largest_request_that_fits_bytes = pm.device_free_bytes;
    pm.explanation =
        "the device had " + Bytes(pm.device_free_bytes) + " free for a request of " +
        Bytes(pm.request_bytes) +
        (s.torch.report.seen ? " (PyTorch's cache is not known without the bridge)" : "");
    return;
  }

  // The segments then: the allocator's own order up to its OOM, or by time for a driver call.
  Segments segs;
  const TorchOomRecord* oom = torch_oom ? &s.torch.ooms[failed.c] : nullptr;
  const size_t end = oom != nullptr ? oom->segment_events : s.torch.segment_log.size();
  for (size_t i = 0; i < end; ++i) {
    const TorchSegmentEvent& e = s.torch.segment_log[i];
    if (e.device != failed.device) continue;
    if (oom == nullptr && ToRealtime(s.realtime_offset_ns, e.timestamp_ns) > failed.timestamp_ns) {
      continue;
    }
    Apply(segs, e);
  }

  // The tensors' blocks, by address, each in the segment that holds it.
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (const HeldAllocation& a : live) {
    if (a.kind == kTorchAllocatedKind) blocks.emplace_back(a.address, a.bytes);
  }
  std::sort(blocks.begin(), blocks.end());
  std::vector<SegmentFigures> figures;
  size_t next = 0;
  for (const auto& [start, g] : segs) {
    SegmentFigures f;
    f.segment = &g;
    f.start = start;
    const uint64_t seg_end = start + g.bytes;
    while (next < blocks.size() && blocks[next].first < start) ++next;
    uint64_t cursor = start;
    bool all_small = true;
    for (; next < blocks.size() && blocks[next].first < seg_end; ++next) {
      const auto [address, bytes] = blocks[next];
      if (address > cursor) f.gaps.emplace_back(cursor, address);
      cursor = std::max(cursor, std::min(seg_end, address + bytes));
      f.allocated += bytes;
      ++f.blocks;
      all_small = all_small && bytes <= kTorchSmallSize;
    }
    if (cursor < seg_end) f.gaps.emplace_back(cursor, seg_end);
    f.small = g.expandable ? f.blocks > 0 && all_small : g.bytes <= kTorchSmallBuffer;
    pm.expandable_segments_on = pm.expandable_segments_on || g.expandable;
    figures.push_back(std::move(f));
  }

  // The request's pool: the allocator's OOM names its stream and pool; its size says which.
  const bool request_small = pm.request_bytes <= kTorchSmallSize;
  if (oom != nullptr) {
    pm.pool = request_small ? "small" : "large";
    pm.stream = oom->stream;
    pm.released_before_bytes = oom->released_before_bytes;
  }
  using PoolKey = std::tuple<bool, uint64_t, uint64_t, uint64_t, bool>;
  std::map<PoolKey, CachePoolState> pools;
  uint64_t expandable_pages = 0;  // free whole pages the allocator could unmap
  for (const SegmentFigures& f : figures) {
    const Segment& g = *f.segment;
    CachePoolState& p =
        pools[PoolKey{!f.small, g.stream, g.pool_first, g.pool_second, g.expandable}];
    p.pool = f.small ? "small" : "large";
    p.stream = g.stream;
    p.pool_id_first = g.pool_first;
    p.pool_id_second = g.pool_second;
    p.expandable = g.expandable;
    ++p.segments;
    p.segment_bytes += g.bytes;
    p.allocated_bytes += f.allocated;
    const bool default_pool = g.pool_first == 0 && g.pool_second == 0;
    const uint64_t page = f.small ? kTorchSmallBuffer : kTorchLargeBuffer;
    uint64_t free_here = 0;
    for (const auto& [from, to] : f.gaps) {
      const uint64_t gap = to - from;
      free_here += gap;
      ++p.free_blocks;
      p.largest_free_block_bytes = std::max(p.largest_free_block_bytes, gap);
      if (default_pool) expandable_pages += WholePages(f.start, from, to, page);
    }
    p.free_bytes += free_here;
    pm.cache_free_bytes += free_here;
    if (f.blocks == 0 && !g.expandable) {
      p.wholly_free_segment_bytes += g.bytes;
      if (default_pool) pm.wholly_free_segment_bytes += g.bytes;
    }
    const bool request_pool = oom != nullptr && f.small == request_small &&
                              g.stream == oom->stream && g.pool_first == oom->pool_first &&
                              g.pool_second == oom->pool_second;
    if (request_pool) {
      pm.pool_free_bytes += free_here;
      for (const auto& [from, to] : f.gaps) {
        pm.largest_free_block_bytes = std::max(pm.largest_free_block_bytes, to - from);
      }
    }
  }
  for (auto& [key, p] : pools) pm.pools.push_back(std::move(p));
  std::stable_sort(
      pm.pools.begin(), pm.pools.end(),
      [](const CachePoolState& x, const CachePoolState& y) { return x.free_bytes > y.free_bytes; });

  const uint64_t free = pm.device_free_bytes;
  const uint64_t request = pm.request_bytes;
  const uint64_t page = request_small ? kTorchSmallBuffer : kTorchLargeBuffer;
  if (oom != nullptr) {
    // A new segment needs its whole driver allocation; a smaller request fits in the largest
    // free block or in a segment the device's free bytes can hold.
    const uint64_t whole = free / kTorchRoundLarge * kTorchRoundLarge;
    const uint64_t new_segment = whole >= kTorchMinLargeAlloc ? whole
                                 : free >= kTorchSmallBuffer  ? kTorchSmallSize
                                                              : 0;
    pm.largest_request_that_fits_bytes = std::max(pm.largest_free_block_bytes, new_segment);
    pm.expandable_segments = Verdict(free + expandable_pages, RoundUp(request, page));
    pm.empty_cache =
        Verdict(free + pm.wholly_free_segment_bytes,
                pm.expandable_segments_on ? RoundUp(request, page) : TorchSegmentSize(request));
  } else {
    pm.largest_request_that_fits_bytes = free;
    // Another caller's driver allocation: only memory given back to the driver helps it.
    pm.expandable_segments = Verdict(free + expandable_pages, request);
    pm.empty_cache = Verdict(free + pm.wholly_free_segment_bytes, request);
  }
  pm.smaller_request = Verdict(pm.largest_request_that_fits_bytes, request);

  const std::string in_pool = pm.pool + " pool of stream " + std::to_string(pm.stream);
  if (oom != nullptr && pm.pool_free_bytes >= request && pm.largest_free_block_bytes < request) {
    pm.reason = "fragmentation";
    uint64_t pieces = 0;
    for (const CachePoolState& p : pm.pools) {
      if (p.pool == pm.pool && p.stream == pm.stream) pieces += p.free_blocks;
    }
    pm.explanation = "fragmentation: PyTorch's cache held " + Bytes(pm.pool_free_bytes) +
                     " free in the " + in_pool + ", enough for the request of " + Bytes(request) +
                     ", but in " + std::to_string(pieces) + " blocks, the largest " +
                     Bytes(pm.largest_free_block_bytes) + "; the device had " + Bytes(free) +
                     " free";
  } else if (oom != nullptr && free + pm.cache_free_bytes >= request) {
    pm.reason = "split";
    pm.explanation = "the device's " + Bytes(free) + " free and the " + Bytes(pm.cache_free_bytes) +
                     " free in PyTorch's cache add up to the " + "request of " + Bytes(request) +
                     ", but no one place held it: " + Bytes(pm.pool_free_bytes) + " free in the " +
                     in_pool + ", its largest block " + Bytes(pm.largest_free_block_bytes);
  } else if (oom == nullptr && pm.empty_cache.fits && pm.wholly_free_segment_bytes > 0) {
    pm.reason = "cached_segments";
    pm.explanation = "PyTorch's cache held " + Bytes(pm.wholly_free_segment_bytes) +
                     " in wholly free segments, which an empty_cache() gives back to the " +
                     "driver; the device had " + Bytes(free) + " free for a request of " +
                     Bytes(request);
  } else {
    pm.reason = "too_large";
    pm.explanation = "the request of " + Bytes(request) + " is more than the device's " +
                     Bytes(free) + " free and the " + Bytes(pm.cache_free_bytes) +
                     " free in PyTorch's cache together";
  }
}

}  // namespace cumemtrace::internal
