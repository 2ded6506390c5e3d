#include "collector/engine/training_analysis.h"

#include <algorithm>

#include "collector/engine/iterations.h"
#include "collector/engine/lifetimes.h"
#include "collector/engine/in_memory_sweep.h"

namespace cumemtrace::internal {
namespace {

cumemtrace::Spread ToReport(const internal::Spread& s) {
  return cumemtrace::Spread{s.count, s.median, s.min, s.max};
}

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
  r.duration_ns = ToReport(SpreadOf(durations));
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
    stats.time_ns = ToReport(SpreadOf(times));
    for (size_t s = 0; s < slots; ++s) {
      IterationPhaseDevice d;
      d.index = slot_device[s];
      if (stats.in_warmup) {
        d.warmup_peak_above_entry_bytes = above_of[row * slots + s];
        d.warmup_net_change_bytes = net_of[row * slots + s];
      }
      d.peak_above_entry_bytes = ToReport(SpreadOf(above[s]));
      d.net_change_bytes = ToReport(SpreadOf(net[s]));
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

void SetLifetimeAtPeak(const std::vector<uint32_t>& slot_device,
                       const std::vector<std::map<std::string, uint64_t>>& at_peak,
                       ProcessReport* p) {
  for (size_t slot = 0; slot < slot_device.size(); ++slot) {
    for (DeviceReport& d : p->devices) {
      if (d.index != slot_device[slot]) continue;
      d.lifetime_at_peak.bytes_by_class = at_peak[slot];
      auto persistent = at_peak[slot].find("persistent");
      const uint64_t held = persistent == at_peak[slot].end() ? 0 : persistent->second;
      d.lifetime_at_peak.activation_memory_bytes = d.peak.bytes - std::min(d.peak.bytes, held);
    }
  }
}

void AddTrainingAnalysis(const TrainingInputs& in, ProcessReport* p) {
  const IterationDetection detection =
      AddIterations(in.phases, in.slot_device, in.first_ns, in.options, p);

  const std::vector<PhaseName>& names = in.phases.names();
  const LifetimeClassifier classifier(names, in.phases.occurrences(), detection.windows);
  auto phase_name = [&names](int32_t phase) {
    return phase < 0 ? std::string() : names[static_cast<size_t>(phase)].name;
  };
  auto rel = [&in](uint64_t ts) { return ts >= in.first_ns ? ts - in.first_ns : 0; };
  std::vector<std::map<std::string, uint64_t>> at_peak(in.slot_device.size());
  const std::vector<Allocation>& table = in.timeline.allocations();
  for (const Allocation& a : table) {
    if (!IsDeviceMemory(a.kind)) continue;
    const bool freed = a.death_pos < in.events.size();
    const uint64_t death_ns = freed ? in.events[a.death_pos].timestamp_ns : in.end_ns;
    const LifetimeClass c = classifier.Classify(a.birth_ns, a.phase, death_ns,
                                                freed ? a.death_phase : -1, freed);
    const uint64_t peak_pos = in.timeline.device(a.slot).peak_pos;
    if (peak_pos != kNever && a.birth_pos <= peak_pos && a.death_pos > peak_pos) {
      at_peak[a.slot][LifetimeClassName(c)] += a.bytes;
    }
    if (!in.options.keep_lifetimes) continue;
    AllocationLifetime row;
    row.device = in.slot_device[a.slot];
    row.stream = a.stream;
    row.kind = MemoryKindName(a.kind);
    row.api = in.stream.Resolve(a.api_id);
    row.library = in.stream.Resolve(a.caller_id);
    row.address = a.address;
    row.bytes = a.bytes;
    row.birth_ns = rel(a.birth_ns);
    row.death_ns = freed ? static_cast<int64_t>(rel(death_ns)) : -1;
    row.birth_phase = phase_name(a.phase);
    row.death_phase = freed ? phase_name(a.death_phase) : std::string();
    row.birth_iteration = IterationOf(detection.windows, a.birth_ns);
    row.death_iteration = freed ? IterationOf(detection.windows, death_ns) : -1;
    row.lifetime_class = LifetimeClassName(c);
    p->lifetimes.push_back(std::move(row));
  }
  SetLifetimeAtPeak(in.slot_device, at_peak, p);
}

}  // namespace cumemtrace::internal
