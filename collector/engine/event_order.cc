#include "collector/engine/event_order.h"

#include <numeric>

namespace cumemtrace::internal {

// Time order, then the tie rule of design.md, then arrival (a stable order). CUPTI delivers
// per-thread buffers, so input is sorted in runs but not overall. The events are not moved
// while sorting: 16-byte keys (time and tie rank packed in one word, arrival index) are
// sorted, then the events are permuted once. The keys are sorted by a stable LSD radix sort
// over the bits in which they differ: a few linear passes, where std::sort on these run
// patterns degenerated into its heapsort fallback (docs/benchmarks.md, profile).
void SortEvents(std::vector<Event>* events) {
  for (Event& e : *events) e.pad = static_cast<uint8_t>(TieRank(e.type));
  if (std::is_sorted(events->begin(), events->end(), Accountant::KeyBefore)) return;
  const size_t n = events->size();
  const auto [lo, hi] = std::minmax_element(
      events->begin(), events->end(),
      [](const Event& x, const Event& y) { return x.timestamp_ns < y.timestamp_ns; });
  const uint64_t min_ns = lo->timestamp_ns, max_ns = hi->timestamp_ns;
  struct Key {
    uint64_t order;  // (timestamp - min) << 2 | tie rank, when the span fits in 62 bits
    uint64_t index;  // arrival index
  };
  std::vector<Key> keys(n);
  constexpr uint64_t kMaxPackedSpan = (uint64_t{1} << 62) - 1;
  if (max_ns - min_ns > kMaxPackedSpan) {
    // Timestamps more than 146 years apart: only a corrupt trace. Sort it the slow way.
    for (size_t i = 0; i < n; ++i) keys[i] = Key{(*events)[i].timestamp_ns, i};
    std::stable_sort(keys.begin(), keys.end(), [&](const Key& x, const Key& y) {
      return Accountant::KeyBefore((*events)[x.index], (*events)[y.index]);
    });
  } else {
    uint64_t differing_bits = 0;
    for (size_t i = 0; i < n; ++i) {
      const Event& e = (*events)[i];
      keys[i] = Key{(e.timestamp_ns - min_ns) << 2 | e.pad, i};
      differing_bits |= keys[i].order ^ keys[0].order;
    }
    // LSD radix sort, 11 bits a pass; passes over digits in which all keys agree are skipped.
    constexpr int kDigitBits = 11;
    constexpr size_t kBuckets = size_t{1} << kDigitBits;
    std::vector<Key> scratch(n);
    std::vector<size_t> offsets(kBuckets);
    for (int shift = 0; shift < 64; shift += kDigitBits) {
      if (((differing_bits >> shift) & (kBuckets - 1)) == 0) continue;
      std::fill(offsets.begin(), offsets.end(), 0);
      for (const Key& k : keys) ++offsets[(k.order >> shift) & (kBuckets - 1)];
      std::exclusive_scan(offsets.begin(), offsets.end(), offsets.begin(), size_t{0});
      for (const Key& k : keys) scratch[offsets[(k.order >> shift) & (kBuckets - 1)]++] = k;
      keys.swap(scratch);
    }
  }
  std::vector<Event> sorted;
  sorted.reserve(n);
  for (const Key& k : keys) sorted.push_back((*events)[k.index]);
  events->swap(sorted);
}

}  // namespace cumemtrace::internal
