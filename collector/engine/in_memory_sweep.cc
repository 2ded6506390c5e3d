#include "collector/engine/in_memory_sweep.h"

#include "collector/engine/failed_allocations.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "collector/engine/phase_inference.h"
#include "collector/engine/phases.h"
#include "collector/engine/training_analysis.h"
#include "collector/engine/timeline_capture.h"
#include "collector/engine/accounting.h"

namespace cumemtrace::internal {
namespace {

// Dense slots for device ordinals; ordinals are small, so a table beats a hash in the loop.
class DeviceSlots {
 public:
  explicit DeviceSlots(const std::set<uint32_t>& indices) : indices_(indices.begin(), indices.end()) {
    for (uint32_t s = 0; s < indices_.size(); ++s) {
      if (indices_[s] < kDirect) {
        if (direct_.size() <= indices_[s]) direct_.resize(indices_[s] + 1, 0);
        direct_[indices_[s]] = s;
      } else {
        far_[indices_[s]] = s;
      }
    }
  }
  uint32_t operator()(uint32_t device) const {
    return device < kDirect ? direct_[device] : far_.at(device);
  }
  size_t size() const { return indices_.size(); }
  uint32_t index(uint32_t slot) const { return indices_[slot]; }

 private:
  static constexpr uint32_t kDirect = 4096;
  std::vector<uint32_t> indices_;
  std::vector<uint32_t> direct_;
  std::unordered_map<uint32_t, uint32_t> far_;
};

bool HasDevice(EventType type) {
  return type == EventType::kAllocate || type == EventType::kRelease ||
         type == EventType::kFailedAllocation || type == EventType::kKernel;
}

const char* ClockName(int clock) {
  switch (clock) {
    case v1::TIMESTAMP_CLOCK_MONOTONIC: return "monotonic";
    case v1::TIMESTAMP_CLOCK_REALTIME: return "realtime";
    default: return "unspecified";
  }
}

const char* InjectionName(int mode) {
  switch (mode) {
    case v1::INJECTION_MODE_LD_PRELOAD: return "ld_preload";
    case v1::INJECTION_MODE_CUDA_INJECTION: return "cuda_injection";
    case v1::INJECTION_MODE_NVTX_INJECTION: return "nvtx_injection";
    default: return "unspecified";
  }
}

const char* DropSourceName(int source) {
  switch (source) {
    case v1::DROP_SOURCE_CUPTI: return "cupti";
    case v1::DROP_SOURCE_TRACER_QUEUE: return "tracer_queue";
    default: return "unspecified";
  }
}

}  // namespace

void FillStreamFacts(const DecodedStream& s, ProcessReport* p) {
  p->stream_id = s.stream_id;
  p->has_handshake = s.has_handshake;
  p->pid = s.has_handshake ? s.pid : s.peer_pid;
  p->ppid = s.ppid;
  p->command_line = s.command_line;
  p->hostname = s.hostname;
  p->tracer_version = s.tracer_version;
  p->timestamp_clock = ClockName(s.timestamp_clock);
  p->allocator_mode = s.allocator_mode;
  p->pytorch_alloc_conf = s.pytorch_alloc_conf;
  p->injection_mode = InjectionName(s.injection_mode);
  p->kernels_enabled = s.kernels_enabled;
  p->rank = s.rank;
  p->local_rank = s.local_rank;
  p->world_size = s.world_size;
  p->notices = s.notices;
  p->thread_names = s.thread_names;
  p->sequence_gaps = s.gaps;
  for (const SequenceGap& g : s.gaps) p->lost_batches += g.missing;
  p->batches = s.batches;
  p->events = s.events.size();
  p->damage = s.damage;
  p->damaged = !s.damage.empty();

  // The launcher saw the real end (signals included); the tracer's record is second best.
  if (s.launcher_exit) {
    p->exit = *s.launcher_exit;
  } else if (s.process_exit_code) {
    p->exit.source = ExitStatus::Source::kTracer;
    p->exit.code = *s.process_exit_code;
  }
  p->complete = s.launcher_exit.has_value() || s.process_exit_code.has_value();
  if (!p->complete) p->incomplete_reasons.push_back("ended without an exit record");
  if (s.closed) {
    switch (s.close_reason) {
      case v1::CLOSE_REASON_PROTOCOL_ERROR:
        p->complete = false;
        p->incomplete_reasons.push_back("the collector closed the stream after a protocol error" +
                                        (s.close_error.empty() ? "" : ": " + s.close_error));
        break;
      case v1::CLOSE_REASON_IO_ERROR:
        p->complete = false;
        p->incomplete_reasons.push_back("the stream ended with a read error" +
                                        (s.close_error.empty() ? "" : ": " + s.close_error));
        break;
      case v1::CLOSE_REASON_COLLECTOR_SHUTDOWN:
        if (!p->complete) {
          p->incomplete_reasons.push_back("the collector stopped while the process was connected");
        }
        break;
      default:
        break;
    }
  }
  if (!s.has_handshake) p->incomplete_reasons.push_back("no handshake was received");
}

namespace {

// Time order, then the tie rule of design.md, then arrival (a stable order). CUPTI delivers
// per-thread buffers, so input is sorted in runs but not overall. The events are not moved
// while sorting: 16-byte keys (time and tie rank packed in one word, arrival index) are
// sorted, then the events are permuted once. The keys are sorted by a stable LSD radix sort
// over the bits in which they differ: a few linear passes, where std::sort on these run
// patterns degenerated into its heapsort fallback (docs/benchmarks.md, profile).
// Puts every timestamp of the stream on CLOCK_REALTIME (the handshake's clock pair gives the
// offset), so that the processes of a job on several hosts line up; relative figures are
// unchanged.
void ShiftToRealtime(DecodedStream* s) {
  const int64_t offset = s->realtime_offset_ns;
  if (offset == 0) return;
  for (Event& e : s->events) ShiftEventToRealtime(offset, &e);
  ShiftRecordsToRealtime(s);
}

}  // namespace

void ShiftRecordsToRealtime(DecodedStream* s) {
  const int64_t offset = s->realtime_offset_ns;
  if (offset == 0) return;
  auto shift = [offset](uint64_t t) {
    return t == 0 ? t : static_cast<uint64_t>(static_cast<int64_t>(t) + offset);
  };
  for (DropRecord& d : s->drops) {
    d.first_ns = shift(d.first_ns);
    d.last_ns = shift(d.last_ns);
  }
  s->process_exit_ns = shift(s->process_exit_ns);
  s->trace_start_ns = shift(s->trace_start_ns);
  s->realtime_offset_ns = 0;  // done: a second analysis of the same stream must not shift again
}

namespace {

void SortEvents(std::vector<Event>* events) {
  auto before = [](const Event& x, const Event& y) {
    if (x.timestamp_ns != y.timestamp_ns) return x.timestamp_ns < y.timestamp_ns;
    return TieRank(x.type) < TieRank(y.type);
  };
  if (std::is_sorted(events->begin(), events->end(), before)) return;
  const size_t n = events->size();
  uint64_t min_ns = ~uint64_t{0}, max_ns = 0;
  for (const Event& e : *events) {
    min_ns = std::min(min_ns, e.timestamp_ns);
    max_ns = std::max(max_ns, e.timestamp_ns);
  }
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
      return before((*events)[x.index], (*events)[y.index]);
    });
  } else {
    uint64_t differing_bits = 0;
    for (size_t i = 0; i < n; ++i) {
      const Event& e = (*events)[i];
      keys[i] = Key{(e.timestamp_ns - min_ns) << 2 | static_cast<uint64_t>(TieRank(e.type)), i};
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
      size_t sum = 0;
      for (size_t& o : offsets) {
        const size_t count = o;
        o = sum;
        sum += count;
      }
      for (const Key& k : keys) scratch[offsets[(k.order >> shift) & (kBuckets - 1)]++] = k;
      keys.swap(scratch);
    }
  }
  std::vector<Event> sorted;
  sorted.reserve(n);
  for (const Key& k : keys) sorted.push_back((*events)[k.index]);
  events->swap(sorted);
}

// Device memory grouped by one origin field of the allocation table (API or calling
// module): counts, each group's own peak (a sweep over births and deaths in event order),
// its share of the device peak, and what it still held at the end.
void GroupByOrigin(const MemoryTimeline& timeline, uint64_t end_pos,
                   uint32_t Allocation::*origin, const char* unknown_name,
                   const DecodedStream& s, std::map<std::string, OriginStats> DeviceReport::*out,
                   ProcessReport* p) {
  const std::vector<Allocation>& table = timeline.allocations();
  std::vector<uint32_t> births;
  for (uint32_t i = 0; i < table.size(); ++i) {
    if (IsDeviceMemory(table[i].kind)) births.push_back(i);  // already in event order
  }
  // Deaths in position order. Only those before a birth are ever applied, so the order
  // among the allocations closed together at the end does not matter.
  std::vector<uint32_t> deaths;
  deaths.reserve(births.size());
  for (uint32_t i : timeline.death_order()) {
    if (IsDeviceMemory(table[i].kind)) deaths.push_back(i);
  }
  std::map<std::pair<uint32_t, uint32_t>, OriginStats> stats;  // (slot, origin id)
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> live_bytes;
  size_t next_death = 0;
  for (uint32_t i : births) {
    const Allocation& a = table[i];
    for (; next_death < deaths.size() && table[deaths[next_death]].death_pos < a.birth_pos;
         ++next_death) {
      const Allocation& dead = table[deaths[next_death]];
      live_bytes[{dead.slot, dead.*origin}] -= dead.bytes;
    }
    const std::pair<uint32_t, uint32_t> key{a.slot, a.*origin};
    OriginStats& group = stats[key];
    ++group.allocations;
    group.allocated_bytes += a.bytes;
    group.peak_bytes = std::max(group.peak_bytes, live_bytes[key] += a.bytes);
    const uint64_t peak_pos = timeline.device(a.slot).peak_pos;
    if (a.birth_pos <= peak_pos && a.death_pos > peak_pos) group.live_at_peak_bytes += a.bytes;
    if (a.death_pos == end_pos) group.live_at_exit_bytes += a.bytes;  // closed at the end
  }
  AddOriginStats(stats, unknown_name, s, out, p);
}

}  // namespace

void AddOriginStats(const std::map<std::pair<uint32_t, uint32_t>, OriginStats>& stats,
                    const char* unknown_name, const DecodedStream& s,
                    std::map<std::string, OriginStats> DeviceReport::*out, ProcessReport* p) {
  for (const auto& [key, group] : stats) {
    const std::string name = key.second == 0 ? unknown_name : s.Resolve(key.second);
    // Two ids with one text (a string sent again after a lost batch) merge.
    OriginStats& merged = (p->devices[key.first].*out)[name];
    merged.allocations += group.allocations;
    merged.allocated_bytes += group.allocated_bytes;
    merged.peak_bytes = std::max(merged.peak_bytes, group.peak_bytes);
    merged.live_at_peak_bytes += group.live_at_peak_bytes;
    merged.live_at_exit_bytes += group.live_at_exit_bytes;
  }
}

void FillDeviceReport(const DecodedStream& s, const DeviceCounters& c, uint32_t index,
                      uint64_t first, DeviceReport* out) {
  DeviceReport& d = *out;
  auto rel = [first](uint64_t ts) { return ts >= first ? ts - first : 0; };
  d.index = index;
  auto info = s.device_info.find(d.index);
  if (info != s.device_info.end()) {
    d.has_info = true;
    d.name = info->second.name;
    d.uuid = info->second.uuid;
    d.total_memory_bytes = info->second.total_memory_bytes;
  }
  d.peak.seen = c.peak_pos != kNever;
  if (d.peak.seen) {
    d.peak.bytes = c.peak;
    d.peak.time_abs_ns = c.peak_ns;
    d.peak.time_ns = rel(c.peak_ns);
  }
  for (int k = 0; k < kMemoryKinds; ++k) {
    if (c.kind_seen[k] || c.kinds[k].releases > 0) d.by_kind[MemoryKindName(static_cast<uint8_t>(k))] = c.kinds[k];
  }
  d.live_at_exit_count = c.kinds[3].live_at_exit_count + c.kinds[4].live_at_exit_count;
  d.live_at_exit_bytes = c.kinds[3].live_at_exit_bytes + c.kinds[4].live_at_exit_bytes;
  d.not_program.static_peak_bytes = c.static_peak;
  d.not_program.static_allocations = c.kinds[6].allocations + c.kinds[7].allocations;
  d.not_program.static_releases = c.kinds[6].releases + c.kinds[7].releases;
  d.not_program.released_unknown_count = c.released_unknown_count;
  d.not_program.released_unknown_bytes = c.released_unknown_bytes;
  auto tracer = s.tracer_memory.find(d.index);
  if (tracer != s.tracer_memory.end()) {
    d.not_program.tracer_bytes = tracer->second.bytes;
    d.not_program.tracer_description = tracer->second.description;
  }
  d.kernel_count = c.kernel_count;
  d.kernel_busy_ns = c.kernel_busy_ns;
  d.reallocated_live_address = c.reallocated_live_address;
}

void FillPeakContents(std::vector<std::vector<const Allocation*>>& at_peak,
                      const std::vector<std::string>& phase_names, const DecodedStream& s,
                      size_t top_allocations, uint64_t first, ProcessReport* p) {
  auto rel = [first](uint64_t ts) { return ts >= first ? ts - first : 0; };
  auto phase_name = [&phase_names](int32_t phase) {
    return phase < 0 ? std::string() : phase_names[static_cast<size_t>(phase)];
  };
  for (size_t slot = 0; slot < at_peak.size(); ++slot) {
    std::map<std::pair<int32_t, uint8_t>, LiveGroup> groups;
    for (const Allocation* a : at_peak[slot]) {
      LiveGroup& g = groups[{a->phase, a->kind}];
      ++g.count;
      g.bytes += a->bytes;
    }
    DevicePeak& peak = p->devices[slot].peak;
    for (auto& [key, g] : groups) {
      g.phase = phase_name(key.first);
      g.kind = MemoryKindName(key.second);
      peak.live_by_phase_and_kind.push_back(std::move(g));
    }
    std::stable_sort(peak.live_by_phase_and_kind.begin(), peak.live_by_phase_and_kind.end(),
                     [](const LiveGroup& x, const LiveGroup& y) { return x.bytes > y.bytes; });
    std::vector<const Allocation*>& ids = at_peak[slot];
    peak.live_count = ids.size();
    const size_t top = std::min(top_allocations, ids.size());
    // Births have distinct positions, so this order is total: the result does not depend on
    // the order the allocations were collected in.
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(top), ids.end(),
                      [](const Allocation* x, const Allocation* y) {
                        if (x->bytes != y->bytes) return x->bytes > y->bytes;
                        return x->birth_pos < y->birth_pos;
                      });
    for (size_t i = 0; i < top; ++i) {
      const Allocation& a = *ids[i];
      peak.largest.push_back(LiveAllocation{a.address, a.bytes, MemoryKindName(a.kind),
                                            phase_name(a.phase), s.Resolve(a.api_id), a.thread_id,
                                            rel(a.birth_ns)});
    }
  }
}

void FillPhaseReports(const PhaseTracker& phases, const std::vector<std::string>& phase_names,
                      const std::vector<uint32_t>& slot_device, const DecodedStream& s,
                      uint64_t first, ProcessReport* p) {
  auto rel = [first](uint64_t ts) { return ts >= first ? ts - first : 0; };
  for (size_t i = 0; i < phases.names().size(); ++i) {
    const PhaseName& n = phases.names()[i];
    if (n.rollup) continue;
    PhaseReport r;
    r.name = phase_names[i];
    r.range_names = n.range_names;
    r.inferred = n.inferred;
    r.iteration = n.iteration;
    r.domain = s.Resolve(n.domain_id);
    r.message = s.Resolve(n.message_id);
    r.occurrences = n.occurrences;
    r.total_ns = n.total_ns;
    r.still_open = n.still_open;
    r.first_open_ns = rel(n.first_open_ns);
    for (uint32_t slot = 0; slot < slot_device.size(); ++slot) {
      const PhaseCounters& c = phases.counters(static_cast<int32_t>(i), slot);
      PhaseDeviceStats d;
      d.index = slot_device[slot];
      d.bytes_at_entry = c.bytes_at_entry;
      d.peak_bytes = c.peak_bytes;
      d.peak_above_entry_bytes = c.peak_above_entry_bytes;
      d.allocated_bytes = c.allocated_bytes;
      d.freed_bytes = c.freed_bytes;
      d.allocations = c.allocations;
      d.frees = c.frees;
      d.failed_allocations = c.failed_allocations;
      d.kernels = c.kernels;
      r.devices.push_back(d);
    }
    p->phases.push_back(std::move(r));
  }
}

void FillDropReports(const DecodedStream& s, uint64_t first, ProcessReport* p) {
  auto rel = [first](uint64_t ts) { return ts >= first ? ts - first : 0; };
  std::map<int, DropSummary> drops;
  for (const DropRecord& d : s.drops) {
    DropSummary& sum = drops[d.source];
    sum.source = DropSourceName(d.source);
    sum.total += d.count;
    DropWindow w;
    w.count = d.count;
    w.has_window = d.first_ns != 0;
    if (w.has_window) {
      w.first_ns = rel(d.first_ns);
      w.last_ns = rel(std::max(d.first_ns, d.last_ns));
    }
    sum.windows.push_back(w);
  }
  for (auto& [source, sum] : drops) p->dropped.push_back(std::move(sum));
}

FailedAllocationReport FailedAllocationOf(const Event& e, const DecodedStream& s,
                                          uint64_t time_ns) {
  FailedAllocationReport f;
  f.time_ns = time_ns;
  f.time_abs_ns = e.timestamp_ns;
  f.api = s.Resolve(e.name_id);
  f.requested_bytes = e.a;
  f.error_code = e.code;
  f.error_name = s.Resolve(e.aux_id);
  f.kind = MemoryKindName(e.kind);
  f.device = e.device;
  f.device_free_bytes = e.b;
  f.device_total_bytes = e.c;
  f.thread_id = e.thread_id;
  f.caller = s.Resolve(e.caller_id);
  return f;
}

const char* MemoryKindName(uint8_t kind) {
  static const char* const kNames[kMemoryKinds] = {"UNKNOWN", "PAGEABLE",      "PINNED",
                                                   "DEVICE",  "ARRAY",         "MANAGED",
                                                   "DEVICE_STATIC", "MANAGED_STATIC"};
  return kind < kMemoryKinds ? kNames[kind] : "UNKNOWN";
}

ProcessReport AnalyzeProcess(DecodedStream& s, const AnalysisOptions& options,
                             ProcessTimeline* timeline_out) {
  ProcessReport p;
  FillStreamFacts(s, &p);

  ShiftToRealtime(&s);
  std::vector<Event>& events = s.events;
  SortEvents(&events);
  static const PhaseRules kDefaultRules = PhaseRules::Defaults();
  const PhaseRules* rules = options.phase_rules ? options.phase_rules.get() : &kDefaultRules;
  if (options.infer_phases) {
    const InferenceOutcome inferred = InferTrainingPhases(&s, *rules);
    if (inferred.applied) SortEvents(&events);
    PhaseInferenceReport& r = p.phase_inference;
    r.applied = inferred.applied;
    r.reason = inferred.reason;
    r.signal = inferred.signal;
    r.calling_thread = inferred.calling_thread;
    r.autograd_threads = inferred.autograd_threads;
    r.backward_passes = inferred.backward_passes;
    r.optimizers_inferred = inferred.optimizers_inferred;
  }

  std::set<uint32_t> device_indices;
  for (const auto& [index, info] : s.device_info) device_indices.insert(index);
  for (const auto& [index, t] : s.tracer_memory) device_indices.insert(index);
  uint64_t first = 0, last = 0;
  for (const Event& e : events) {
    if (HasDevice(e.type)) device_indices.insert(e.device);
    last = std::max(last, e.timestamp_ns);
    if (e.type == EventType::kKernel) last = std::max(last, e.a);
  }
  if (!events.empty()) first = events.front().timestamp_ns;
  if (s.process_exit_ns != 0) {
    if (events.empty() || s.process_exit_ns < first) first = s.process_exit_ns;
    last = std::max(last, s.process_exit_ns);
  }
  for (const DropRecord& d : s.drops) {
    if (d.first_ns != 0 && (events.empty() || d.first_ns < first)) first = d.first_ns;
    last = std::max(last, d.last_ns);
  }
  p.first_timestamp_abs_ns = first;
  p.last_timestamp_abs_ns = last;
  p.duration_ns = last - first;

  const DeviceSlots slots(device_indices);
  const size_t n_slots = slots.size();
  MemoryTimeline timeline(n_slots);
  PhaseTracker phases(n_slots, &s, rules);
  std::vector<uint64_t> in_use(n_slots, 0);
  Attribution attribution;
  FailedAllocationLog failed;

  for (uint64_t pos = 0; pos < events.size(); ++pos) {
    const Event& e = events[pos];
    switch (e.type) {
      case EventType::kRangeOpen:
        phases.Open(e, in_use, pos);
        break;
      case EventType::kRangeClose:
        if (!phases.Close(e, in_use)) ++p.unmatched_range_closes;
        break;
      case EventType::kMark:
        ++p.nvtx_marks;
        break;
      case EventType::kAllocate: {
        const uint32_t slot = slots(e.device);
        failed.OnMemoryEvent(e);
        phases.Attribute(e.thread_id, &attribution);
        timeline.Allocate(e, slot, pos, attribution.innermost);
        if (IsDeviceMemory(e.kind)) {
          in_use[slot] = timeline.InUse(slot);
          phases.OnInUse(slot, in_use[slot]);
          for (int32_t phase : attribution.names) {
            PhaseCounters& c = phases.counters(phase, slot);
            ++c.allocations;
            c.allocated_bytes += e.b;
          }
        }
        break;
      }
      case EventType::kRelease: {
        const uint32_t slot = slots(e.device);
        failed.OnMemoryEvent(e);
        const int64_t index = timeline.Release(e, slot, pos);
        if (index < 0) break;  // not the program's: released_unknown
        const Allocation& a = timeline.allocations()[static_cast<size_t>(index)];
        if (!IsDeviceMemory(a.kind)) break;
        in_use[slot] = timeline.InUse(slot);
        phases.Attribute(e.thread_id, &attribution);
        timeline.SetDeathPhase(index, attribution.innermost);
        for (int32_t phase : attribution.names) {
          PhaseCounters& c = phases.counters(phase, slot);
          ++c.frees;
          c.freed_bytes += a.bytes;
        }
        break;
      }
      case EventType::kFailedAllocation: {
        const uint32_t slot = slots(e.device);
        failed.OnMemoryEvent(e);
        phases.Attribute(e.thread_id, &attribution);
        failed.OnFailed(e, slot, attribution, in_use[slot]);
        break;
      }
      case EventType::kKernel: {
        const uint32_t slot = slots(e.device);
        DeviceCounters& d = timeline.device(slot);
        ++d.kernel_count;
        d.kernel_busy_ns += e.a > e.timestamp_ns ? e.a - e.timestamp_ns : 0;
        phases.Attribute(e.thread_id, &attribution);
        for (int32_t phase : attribution.names) ++phases.counters(phase, slot).kernels;
        break;
      }
    }
  }
  timeline.CloseLive(events.size());
  phases.CloseAll(last, in_use);

  // Phase names, once.
  std::vector<std::string> phase_names;
  for (const PhaseName& n : phases.names()) phase_names.push_back(n.name);
  p.rolled_up_ranges = phases.rolled_up_ranges();
  failed.Finish(s, first, &phases, &p);

  // Devices.
  p.devices.resize(n_slots);
  std::vector<uint32_t> slot_device;
  for (uint32_t slot = 0; slot < n_slots; ++slot) slot_device.push_back(slots.index(slot));
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    FillDeviceReport(s, timeline.device(slot), slot_device[slot], first, &p.devices[slot]);
  }

  // Device memory by API and by calling library.
  GroupByOrigin(timeline, events.size(), &Allocation::api_id, "(unknown)", s, &DeviceReport::by_api,
                &p);
  GroupByOrigin(timeline, events.size(), &Allocation::caller_id, "(not unwound)", s,
                &DeviceReport::by_library, &p);

  // What was live at each device's peak: a filter over the allocation table by position.
  std::vector<std::vector<const Allocation*>> at_peak(n_slots);
  for (const Allocation& a : timeline.allocations()) {
    const uint64_t peak_pos = timeline.device(a.slot).peak_pos;
    if (!IsDeviceMemory(a.kind) || peak_pos == kNever) continue;
    if (a.birth_pos > peak_pos || a.death_pos <= peak_pos) continue;
    at_peak[a.slot].push_back(&a);
  }
  FillPeakContents(at_peak, phase_names, s, options.top_allocations, first, &p);

  // Phases, in order of first opening.
  FillPhaseReports(phases, phase_names, slot_device, s, first, &p);

  // Iterations, per-phase statistics over them, lifetime classes.
  AddTrainingAnalysis(TrainingInputs{s, events, phases, timeline, slot_device, first, last, options},
                      &p);

  // Drops by source, with their windows.
  FillDropReports(s, first, &p);
  if (timeline_out != nullptr) {
    CaptureTimeline(s, timeline.allocations(), phases.names(), phase_names, p, timeline_out);
  }
  return p;
}

}  // namespace cumemtrace::internal
