#include "collector/engine/iterations.h"

#include <algorithm>
#include <map>

namespace cumemtrace::internal {
namespace {

std::vector<const OccurrenceRecord*> SortedByStart(const std::vector<OccurrenceRecord>& all,
                                                   int32_t phase) {
  std::vector<const OccurrenceRecord*> out;
  for (const OccurrenceRecord& o : all) {
    if (phase < 0 || o.phase == phase) out.push_back(&o);
  }
  std::stable_sort(out.begin(), out.end(), [](const OccurrenceRecord* x, const OccurrenceRecord* y) {
    return x->start_ns < y->start_ns;
  });
  return out;
}

IterationDetection FromRange(const std::vector<const OccurrenceRecord*>& occurrences,
                             const std::string& name) {
  IterationDetection d;
  d.source = "range";
  d.range = name;
  for (const OccurrenceRecord* o : occurrences) d.windows.push_back({o->start_ns, o->end_ns});
  return d;
}

}  // namespace

IterationDetection DetectIterations(const std::vector<PhaseName>& names,
                                    const std::vector<OccurrenceRecord>& occurrences,
                                    const std::string& requested) {
  // 1. A range the user named (by its phase or by one of its range names).
  if (!requested.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      const PhaseName& n = names[i];
      const bool named = n.name == requested || std::find(n.range_names.begin(),
                                                          n.range_names.end(),
                                                          requested) != n.range_names.end();
      if (named && !n.rollup) {
        return FromRange(SortedByStart(occurrences, static_cast<int32_t>(i)), requested);
      }
    }
    IterationDetection none;
    none.note = "no range named '" + requested + "'";
    return none;
  }
  // 2. A range the rules mark as an iteration; the most frequent one if several.
  int32_t best = -1;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].iteration && names[i].occurrences >= 2 &&
        (best < 0 || names[i].occurrences > names[static_cast<size_t>(best)].occurrences)) {
      best = static_cast<int32_t>(i);
    }
  }
  if (best >= 0) return FromRange(SortedByStart(occurrences, best), names[best].name);

  // 3. The top-level phase sequence repeats: [forward, backward, optimizer] x N.
  // Top level: not inside another occurrence on the same thread. Ranges of one thread nest
  // or are disjoint, so a sweep in start order (longest first) finds them in O(n log n).
  std::vector<const OccurrenceRecord*> all = SortedByStart(occurrences, -1);
  std::stable_sort(all.begin(), all.end(), [](const OccurrenceRecord* x, const OccurrenceRecord* y) {
    if (x->thread_id != y->thread_id) return x->thread_id < y->thread_id;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns;
    return x->end_ns > y->end_ns;
  });
  std::vector<const OccurrenceRecord*> top;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool new_thread = i == 0 || all[i]->thread_id != all[i - 1]->thread_id;
    if (new_thread || all[i]->start_ns >= top.back()->end_ns) top.push_back(all[i]);
  }
  std::stable_sort(top.begin(), top.end(), [](const OccurrenceRecord* x, const OccurrenceRecord* y) {
    return x->start_ns < y->start_ns;
  });
  const size_t n = top.size();
  // A short prefix (setup ranges) may come before the loop.
  for (size_t offset = 0; offset < std::min<size_t>(4, n); ++offset) {
    for (size_t period = 1; offset + 2 * period <= n; ++period) {
      bool repeats = true;
      for (size_t i = offset + period; i < n && repeats; ++i) {
        repeats = top[i]->phase == top[offset + (i - offset) % period]->phase;
      }
      if (!repeats) continue;
      IterationDetection d;
      d.source = "repetition";
      for (size_t i = 0; i < period; ++i) {
        if (i > 0) d.range += " > ";
        d.range += names[static_cast<size_t>(top[offset + i]->phase)].name;
      }
      for (size_t k = offset; k + period <= n; k += period) {
        uint64_t end = 0;
        for (size_t i = k; i < k + period; ++i) end = std::max(end, top[i]->end_ns);
        // An iteration runs to the start of the next one, so nothing falls between.
        if (k + 2 * period <= n) end = std::max(end, top[k + period]->start_ns);
        d.windows.push_back({top[k]->start_ns, end});
      }
      return d;
    }
  }
  IterationDetection none;
  none.note = occurrences.empty() ? "no phases" : "no iteration range and no repeating phases";
  return none;
}

Spread SpreadOf(std::vector<int64_t> values) {
  Spread s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.min = values.front();
  s.max = values.back();
  s.median = values[(values.size() - 1) / 2];
  return s;
}

int64_t IterationOf(const std::vector<IterationWindow>& windows, uint64_t ts) {
  auto it = std::upper_bound(windows.begin(), windows.end(), ts,
                             [](uint64_t t, const IterationWindow& w) { return t < w.start_ns; });
  if (it == windows.begin()) return -1;
  --it;
  return ts <= it->end_ns ? it - windows.begin() : -1;
}

}  // namespace cumemtrace::internal
