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

namespace {

void AddIterationStats(const PhaseTracker& phases, const std::vector<uint32_t>& slot_device,
                       uint64_t first_ns, const IterationDetection& detection, ProcessReport* p) {
  IterationReport& r = p->iterations;
  r.source = detection.source;
  r.range = detection.range;
  r.note = detection.note;
  r.count = detection.windows.size();
  auto rel = [first_ns](uint64_t ts) { return ts >= first_ns ? ts - first_ns : 0; };
  std::vector<int64_t> durations;
  for (size_t k = 0; k < detection.windows.size(); ++k) {
    const IterationWindow& w = detection.windows[k];
    r.windows_ns.emplace_back(rel(w.start_ns), rel(w.end_ns));
    const int64_t d = static_cast<int64_t>(w.end_ns - w.start_ns);
    if (k == 0) {
      r.warmup_ns = d;
    } else {
      durations.push_back(d);
    }
  }
  r.duration_ns = SpreadOf(durations);
  if (detection.windows.empty()) return;

  const std::vector<PhaseName>& names = phases.names();
  const size_t slots = slot_device.size();
  // [phase][iteration] -> time, and per slot peak above entry / net change; flat, since a
  // long run has as many cells as phases times iterations.
  const size_t iterations = detection.windows.size();
  std::vector<char> present(names.size() * iterations, 0);
  std::vector<int64_t> time(names.size() * iterations, 0);
  std::vector<int64_t> above_of(names.size() * iterations * slots, 0);
  std::vector<int64_t> net_of(names.size() * iterations * slots, 0);
  for (const OccurrenceRecord& o : phases.occurrences()) {
    const PhaseName& n = names[static_cast<size_t>(o.phase)];
    if (n.iteration) continue;
    const int64_t k = IterationOf(detection.windows, o.start_ns);
    if (k < 0) continue;
    const size_t cell = static_cast<size_t>(o.phase) * iterations + static_cast<size_t>(k);
    present[cell] = 1;
    time[cell] += static_cast<int64_t>(o.end_ns - o.start_ns);
    for (size_t s = 0; s < slots; ++s) {
      int64_t& above = above_of[cell * slots + s];
      above = std::max(above, static_cast<int64_t>(o.peak(s) - o.entry(s)));
      net_of[cell * slots + s] += static_cast<int64_t>(o.exit(s)) - static_cast<int64_t>(o.entry(s));
    }
  }
  for (size_t phase = 0; phase < names.size(); ++phase) {
    const size_t row = phase * iterations;
    IterationPhaseStats stats;
    stats.phase = names[phase].name;
    stats.inferred = names[phase].inferred;
    std::vector<int64_t> times;
    std::vector<std::vector<int64_t>> above(slots), net(slots);
    for (size_t k = 0; k < iterations; ++k) {
      if (!present[row + k]) continue;
      ++stats.iterations_with_phase;
      if (k == 0) {
        stats.in_warmup = true;
        stats.warmup_ns = time[row + k];
        continue;
      }
      times.push_back(time[row + k]);
      for (size_t s = 0; s < slots; ++s) {
        above[s].push_back(above_of[(row + k) * slots + s]);
        net[s].push_back(net_of[(row + k) * slots + s]);
      }
    }
    if (stats.iterations_with_phase == 0) continue;
    stats.time_ns = SpreadOf(times);
    for (size_t s = 0; s < slots; ++s) {
      IterationPhaseDevice d;
      d.index = slot_device[s];
      if (stats.in_warmup) {
        d.warmup_peak_above_entry_bytes = above_of[row * slots + s];
        d.warmup_net_change_bytes = net_of[row * slots + s];
      }
      d.peak_above_entry_bytes = SpreadOf(above[s]);
      d.net_change_bytes = SpreadOf(net[s]);
      stats.devices.push_back(d);
    }
    r.phases.push_back(std::move(stats));
  }
}

}  // namespace

IterationDetection AddIterations(const PhaseTracker& phases,
                                 const std::vector<uint32_t>& slot_device, uint64_t first_ns,
                                 const AnalysisOptions& options, ProcessReport* p) {
  IterationDetection detection =
      DetectIterations(phases.names(), phases.occurrences(), options.iteration_range);
  AddIterationStats(phases, slot_device, first_ns, detection, p);
  return detection;
}

}  // namespace cumemtrace::internal
