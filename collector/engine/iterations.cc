#include "collector/engine/iterations.h"

#include <algorithm>

namespace cumemtrace::internal {
namespace {

// A phase's occurrences (by start) are the iterations.
std::vector<IterationWindow> FromRange(const std::vector<const OccurrenceRecord*>& occurrences,
                                       const std::string& name, IterationReport* r) {
  r->source = "range";
  r->range = name;
  std::vector<IterationWindow> windows;
  for (const OccurrenceRecord* o : occurrences) windows.push_back({o->start_ns, o->end_ns});
  return windows;
}

// Sets r's source and range, or its note when none are found.
std::vector<IterationWindow> DetectIterations(const PhaseTracker& phases,
                                              const OccurrenceLists& by_phase,
                                              const std::string& requested, IterationReport* r) {
  const std::vector<PhaseName>& names = phases.names();
  const std::vector<OccurrenceRecord>& occurrences = phases.occurrences();
  // 1. A range the user named (by its phase or by one of its range names).
  if (!requested.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      const PhaseName& n = names[i];
      if ((n.name == requested || Contains(n.range_names, requested)) && !n.rollup)
        return FromRange(by_phase[i], requested, r);
    }
    r->note = "no range named '" + requested + "'";
    return {};
  }
  // 2. A range the rules mark as an iteration; the most frequent one if several.
  auto count = [](const PhaseName& n) { return n.iteration ? n.occurrences : 0; };
  const auto best = std::max_element(names.begin(), names.end(), [&](const auto& x, const auto& y) {
    return count(x) < count(y);
  });
  if (best != names.end() && count(*best) >= 2) {
    return FromRange(by_phase[static_cast<size_t>(best - names.begin())], best->name, r);
  }

  // 3. The top-level phase sequence repeats: [forward, backward, optimizer] x N.
  // Top level: not inside another occurrence on the same thread. Ranges of one thread nest
  // or are disjoint, so a sweep in start order (longest first) finds them in O(n log n).
  std::vector<const OccurrenceRecord*> all;
  for (const OccurrenceRecord& o : occurrences) all.push_back(&o);
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
      r->source = "repetition";
      for (size_t i = 0; i < period; ++i) {
        if (i > 0) r->range += " > ";
        r->range += names[static_cast<size_t>(top[offset + i]->phase)].name;
      }
      std::vector<IterationWindow> windows;
      for (size_t k = offset; k + period <= n; k += period) {
        uint64_t end = 0;
        for (size_t i = k; i < k + period; ++i) end = std::max(end, top[i]->end_ns);
        // An iteration runs to the start of the next one, so nothing falls between.
        if (k + 2 * period <= n) end = std::max(end, top[k + period]->start_ns);
        windows.push_back({top[k]->start_ns, end});
      }
      return windows;
    }
  }
  r->note = occurrences.empty() ? "no phases" : "no iteration range and no repeating phases";
  return {};
}

// The lower median is an observed value.
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

}  // namespace

int64_t IterationOf(const std::vector<IterationWindow>& windows, uint64_t ts) {
  auto it = std::upper_bound(windows.begin(), windows.end(), ts,
                             [](uint64_t t, const IterationWindow& w) { return t < w.start_ns; });
  if (it == windows.begin()) return -1;
  --it;
  return ts <= it->end_ns ? it - windows.begin() : -1;
}

std::vector<IterationWindow> AddIterations(const PhaseTracker& phases,
                                           const OccurrenceLists& by_phase,
                                           const std::vector<uint32_t>& slot_device,
                                           uint64_t first_ns, const AnalysisOptions& options,
                                           ProcessReport* p) {
  IterationReport* r = &p->iterations;
  std::vector<IterationWindow> windows =
      DetectIterations(phases, by_phase, options.iteration_range, r);
  r->count = windows.size();
  if (windows.empty()) return {};
  std::vector<int64_t> durations;
  for (const IterationWindow& w : windows) {
    r->windows_ns.emplace_back(Since(first_ns, w.start_ns), Since(first_ns, w.end_ns));
    durations.push_back(static_cast<int64_t>(w.end_ns - w.start_ns));
  }
  r->warmup_ns = durations[0];
  r->duration_ns = SpreadOf({durations.begin() + 1, durations.end()});

  const std::vector<PhaseName>& names = phases.names();
  const size_t slots = slot_device.size();
  // [phase][iteration] -> time, and per slot peak above entry / net change; flat, since a
  // long run has as many cells as phases times iterations. Cells without the phase stay 0.
  const size_t iterations = windows.size();
  std::vector<char> present(names.size() * iterations, 0);
  std::vector<int64_t> time(names.size() * iterations, 0);
  std::vector<int64_t> above_of(names.size() * iterations * slots, 0);
  std::vector<int64_t> net_of(names.size() * iterations * slots, 0);
  for (const OccurrenceRecord& o : phases.occurrences()) {
    const PhaseName& n = names[static_cast<size_t>(o.phase)];
    if (n.iteration) continue;
    const int64_t k = IterationOf(windows, o.start_ns);
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
    // values[(row + k) * stride + s] over the iterations after the first that had the phase.
    auto spread = [&](const std::vector<int64_t>& values, size_t stride, size_t s) {
      std::vector<int64_t> v;
      for (size_t k = 1; k < iterations; ++k) {
        if (present[row + k]) v.push_back(values[(row + k) * stride + s]);
      }
      return SpreadOf(std::move(v));
    };
    IterationPhaseStats stats;
    stats.iterations_with_phase = static_cast<uint64_t>(
        std::count(present.begin() + row, present.begin() + row + iterations, 1));
    if (stats.iterations_with_phase == 0) continue;
    stats.phase = names[phase].name;
    stats.inferred = names[phase].inferred;
    stats.in_warmup = present[row] != 0;
    stats.warmup_ns = time[row];
    stats.time_ns = spread(time, 1, 0);
    for (size_t s = 0; s < slots; ++s) {
      IterationPhaseDevice d;
      d.index = slot_device[s];
      d.warmup_peak_above_entry_bytes = above_of[row * slots + s];
      d.warmup_net_change_bytes = net_of[row * slots + s];
      d.peak_above_entry_bytes = spread(above_of, slots, s);
      d.net_change_bytes = spread(net_of, slots, s);
      stats.devices.push_back(d);
    }
    r->phases.push_back(std::move(stats));
  }
  return windows;
}

}  // namespace cumemtrace::internal
