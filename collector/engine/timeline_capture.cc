#include "collector/engine/timeline_capture.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "collector/engine/lifetimes.h"
#include "collector/engine/stacks.h"

namespace cumemtrace::internal {
void CaptureTimeline(const DecodedStream& s, const std::vector<Event>& events,
                     const std::vector<Allocation>& allocations, const PhaseTracker& phases,
                     const ProcessReport& report, bool classified, ProcessTimeline* out) {
  for (const PhaseName& n : phases.names()) out->phase_names.push_back(n.name);
  const uint64_t first = report.first_timestamp_abs_ns;
  const uint64_t end_ns = report.duration_ns;
  auto rel = [first](uint64_t ts) { return Since(first, ts); };
  // Names deduplicated (kernel names repeat millions of times).
  std::unordered_map<std::string, uint32_t> index;
  for (uint32_t i = 0; i < out->strings.size(); ++i) index.emplace(out->strings[i], i);
  auto intern = [&](const std::string& value) {
    auto [it, inserted] = index.emplace(value, static_cast<uint32_t>(out->strings.size()));
    if (inserted) out->strings.push_back(value);
    return it->second;
  };

  out->allocations.resize(allocations.size());
  out->attribution = s.attribution.seen;
  std::unordered_map<uint32_t, uint32_t> interned;  // wire string id -> strings index
  auto name_of = [&](uint32_t id) {
    auto [it, inserted] = interned.emplace(id, 0);
    if (inserted) it->second = intern(s.Resolve(id));
    return it->second;
  };
  std::unique_ptr<StackResolver> stacks;
  if (!s.stacks.empty()) stacks = std::make_unique<StackResolver>(s);
  // Each distinct attribution's names, interned once: their number is bounded by the
  // program's code, not by its allocations. Births that differ only in what is not shown
  // (the forward op's stack, how the module was found) are one entry.
  std::vector<uint32_t> entry_of(s.attribution.births.size(), 0);
  std::map<TimelineAttribution, uint32_t> entries{{TimelineAttribution(), 0}};
  for (size_t i = 1; i < entry_of.size(); ++i) {
    const BirthAttribution& b = s.attribution.births[i];
    TimelineAttribution n;
    n.module = intern(s.attribution.Name(v1::ATTRIBUTION_KIND_MODULE, b.module));
    n.op = intern(s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.op));
    n.inner_op = intern(s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.inner_op));
    n.backward = b.backward;
    if (b.backward && b.linked) {
      n.forward_op = intern(s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.forward_op));
    }
    auto [it, inserted] = entries.emplace(n, static_cast<uint32_t>(out->attributions.size()));
    if (inserted) out->attributions.push_back(n);
    entry_of[i] = it->second;
  }
  for (uint32_t i = 0; i < allocations.size(); ++i) {
    const Allocation& a = allocations[i];
    TimelineAllocation& t = out->allocations[i];
    if (stacks != nullptr) t.stack = stacks->Resolve(a.stack_id);
    t.address = a.address;
    t.bytes = a.bytes;
    t.birth_ns = rel(a.birth_ns);
    t.live_at_exit = a.death_pos == kNever;
    t.death_ns = t.live_at_exit ? end_ns : rel(a.death_ns);
    t.birth_step = a.birth_step;
    t.death_step = a.death_step;
    t.device_slot = a.slot;
    t.phase = a.phase;
    t.api = name_of(a.api_id);
    t.library = name_of(a.caller_id);
    t.kind = a.kind;
    t.category = static_cast<uint8_t>(a.category & ~kFromObjects);
    t.category_from_objects = (a.category & kFromObjects) != 0;
    if (a.attribution < entry_of.size()) t.attribution = entry_of[a.attribution];
    if (classified && IsDeviceMemory(a.kind)) {
      t.lifetime_class = LifetimeClassName(static_cast<LifetimeClass>(a.lifetime_class));
    }
  }

  // NVTX ranges, paired as PhaseTracker pairs them (Closes).
  struct Open {
    RangeSlice slice;
    Event opened;
  };
  std::vector<Open> open;
  for (const Event& e : events) {
    switch (e.type) {
      case EventType::kRangeOpen: {
        const int32_t phase = phases.PhaseOf(e.aux_id, e.name_id);
        open.push_back(Open{RangeSlice{rel(e.timestamp_ns), 0, e.thread_id, phase, false}, e});
        break;
      }
      case EventType::kRangeClose: {
        for (size_t i = open.size(); i-- > 0;) {  // most recent first
          if (!Closes(e, open[i].opened)) continue;
          out->ranges.emplace_back(open[i].slice).end_ns = rel(e.timestamp_ns);
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
        break;
      }
      case EventType::kKernel: {
        const uint64_t start = rel(e.timestamp_ns);
        out->kernels.push_back(KernelSlice{start, std::max(start, rel(e.a)), e.device,
                                           static_cast<uint32_t>(e.c), name_of(e.name_id)});
        break;
      }
      case EventType::kMark:
        out->marks.push_back(MarkInstant{rel(e.timestamp_ns), e.thread_id,
                                         intern(s.RangeName(e.aux_id, e.name_id))});
        break;
      default:
        break;
    }
  }
  for (const Open& o : open) {
    RangeSlice& slice = out->ranges.emplace_back(o.slice);
    slice.end_ns = std::max(slice.start_ns, end_ns);
    slice.still_open = true;
  }
  std::stable_sort(
      out->ranges.begin(), out->ranges.end(),
      [](const RangeSlice& x, const RangeSlice& y) { return x.start_ns < y.start_ns; });
  if (stacks != nullptr) out->stacks = stacks->Take();
}

}  // namespace cumemtrace::internal
