// WriteMemoryVizSnapshot (exports.h): the snapshot layout of torch.cuda.memory._snapshot(),
// which https://pytorch.org/memory_viz opens:
//   {"segments": [segment...], "device_traces": [[entry...] per device ordinal]}
// `segments` is the state at the end of the trace (what was still allocated), and the traces
// are the history that leads there. How CUPTI's view maps onto PyTorch's allocator:
// - async mode (and programs without PyTorch's caching allocator): every allocation is its
//   own cudaMalloc(Async), so it is a segment holding one block that fills it:
//   segment_alloc + alloc at birth, free_requested + free_completed + segment_free at release.
// - native mode: CUPTI sees the caching allocator's cudaMalloc'ed segments, not the tensors
//   inside them, so the trace has segment_alloc/segment_free only and each segment's one block
//   is "inactive" (its use is unknown, not claimed).
// - native mode with the PyTorch bridge: the allocator's own view. Segments hold the tensors
//   live in them (active_allocated) and the gaps (inactive); the trace has segment_alloc/
//   segment_free for segments, alloc/free_requested/free_completed for tensors, and memory
//   PyTorch never sees as one-block segments, as in async mode.
// Every entry has `category`: the phase of origin of its allocation, "unknown" without one.
// When every allocation has a phase, one `snapshot` entry (the end of the trace) carries
// "unknown": MemoryViz.js adds "unknown" itself when it is missing, through a misspelled
// field (`snapshot.categores.push`), and stops with a TypeError before drawing anything.
// With `run --stacks`, blocks, segments and their alloc/segment_alloc entries carry the
// allocating stack as PyTorch's `frames` ({"filename", "line", "name"}, innermost first);
// frees carry none (the tracer records the stacks of allocations only).
// `time_us` is wall-clock microseconds (the trace's timestamps are on CLOCK_REALTIME once the
// handshake's clock pair is known), as PyTorch writes it; from 0 the page showed 1970.
#include <algorithm>
#include <map>
#include <vector>

#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"
#include "collector/output/pickle_writer.h"
#include "collector/engine/engine.h"

namespace cumemtrace {
namespace {

using internal::PickleWriter;

// An allocation's stack, or none.
struct Frames {
  const StackTable* table = nullptr;
  int32_t stack = -1;
};

Frames FramesOf(const ProcessTimeline& t, const TimelineAllocation& a) {
  return Frames{&t.stacks, a.stack};
}

void WriteFrames(PickleWriter& w, const Frames& frames) {
  w.Str("frames");
  w.BeginList();
  if (frames.table != nullptr && frames.stack >= 0 &&
      static_cast<size_t>(frames.stack) < frames.table->stacks.size()) {
    const StackTable& table = *frames.table;
    for (uint32_t f : table.stacks[static_cast<size_t>(frames.stack)]) {
      w.BeginDict();
      w.Str("filename");
      w.Str(table.file[f]);
      w.Str("line");
      w.UInt(table.line[f]);
      w.Str("name");
      w.Str(table.function[f]);
      w.EndDict();
    }
  }
  w.EndList();
}

std::string Category(const ProcessTimeline& t, int32_t phase) {
  if (phase < 0 || static_cast<size_t>(phase) >= t.phase_names.size()) return "unknown";
  return t.phase_names[static_cast<size_t>(phase)];
}

void Entry(PickleWriter& w, const char* action, uint64_t address, uint64_t bytes,
           uint64_t time_abs_ns, const std::string& category, const Frames& frames = {}) {
  w.BeginDict();
  w.Str("action");
  w.Str(action);
  w.Str("addr");
  w.UInt(address);
  w.Str("size");
  w.UInt(bytes);
  w.Str("stream");
  w.Int(0);  // CUPTI's memory records do not say which stream an allocation is ordered on
  w.Str("time_us");
  w.UInt(time_abs_ns / 1000);
  WriteFrames(w, frames);
  w.Str("category");
  w.Str(category);
  w.EndDict();
}

// A segment's fields up to its open list of blocks; EndSegment closes both.
void BeginSegment(PickleWriter& w, uint32_t device, uint64_t address, uint64_t total,
                  uint64_t used, const char* segment_type, const Frames& frames) {
  w.BeginDict();
  w.Str("device");
  w.UInt(device);
  w.Str("address");
  w.UInt(address);
  w.Str("total_size");
  w.UInt(total);
  w.Str("allocated_size");
  w.UInt(used);
  w.Str("active_size");
  w.UInt(used);
  w.Str("requested_size");
  w.UInt(used);
  w.Str("stream");
  w.Int(0);
  w.Str("segment_type");
  w.Str(segment_type);
  w.Str("segment_pool_id");
  w.BeginTuple();
  w.Int(0);
  w.Int(0);
  w.EndTuple();
  w.Str("is_expandable");
  w.Bool(false);
  WriteFrames(w, frames);
  w.Str("blocks");
  w.BeginList();
}

void EndSegment(PickleWriter& w) {
  w.EndList();
  w.EndDict();
}

void Block(PickleWriter& w, uint64_t address, uint64_t bytes, uint64_t requested, bool active,
           const Frames& frames = {}) {
  w.BeginDict();
  w.Str("address");
  w.UInt(address);
  w.Str("size");
  w.UInt(bytes);
  w.Str("requested_size");
  w.UInt(requested);
  w.Str("state");
  w.Str(active ? "active_allocated" : "inactive");
  WriteFrames(w, frames);
  w.EndDict();
}

void Segment(PickleWriter& w, uint32_t device, const TimelineAllocation& a, bool blocks_known,
             const Frames& frames) {
  const uint64_t used = blocks_known ? a.bytes : 0;
  BeginSegment(w, device, a.address, a.bytes, used, "large", frames);
  Block(w, a.address, a.bytes, used, blocks_known, frames);
  EndSegment(w);
}

// PyTorch's allocator seen through the bridge: a segment (TORCH_RESERVED) holds the tensors
// (TORCH_ALLOCATED) inside its range as active_allocated blocks, and the gaps between them
// as inactive ones, as torch.cuda.memory._snapshot() shows it.
void SegmentWithBlocks(PickleWriter& w, const ProcessTimeline& t, uint32_t device,
                       const TimelineAllocation& segment,
                       const std::vector<const TimelineAllocation*>& blocks) {
  uint64_t allocated = 0;
  for (const TimelineAllocation* b : blocks) allocated += b->bytes;
  // Small-pool segments are 2 MiB.
  BeginSegment(w, device, segment.address, segment.bytes, allocated,
               segment.bytes <= (2u << 20) ? "small" : "large", FramesOf(t, segment));
  uint64_t cursor = segment.address;
  for (const TimelineAllocation* b : blocks) {
    if (b->address > cursor) Block(w, cursor, b->address - cursor, 0, false);
    Block(w, b->address, b->bytes, b->bytes, true, FramesOf(t, *b));
    cursor = b->address + b->bytes;
  }
  if (cursor < segment.address + segment.bytes) {
    Block(w, cursor, segment.address + segment.bytes - cursor, 0, false);
  }
  EndSegment(w);
}

bool IsTorchSegment(const TimelineAllocation& a) { return a.kind == kTorchReservedKind; }
bool IsTensor(const TimelineAllocation& a) { return a.kind == kTorchAllocatedKind; }

void WriteBridgedSnapshot(const ProcessReport& p, const ProcessTimeline& t, PickleWriter& w) {
  w.BeginDict();
  w.Str("segments");
  w.BeginList();
  for (uint32_t slot = 0; slot < t.devices.size(); ++slot) {
    std::vector<const TimelineAllocation*> segments;
    std::vector<const TimelineAllocation*> tensors;
    for (const TimelineAllocation& a : t.allocations) {
      if (a.device_slot != slot || !a.live_at_exit) continue;
      if (IsTorchSegment(a)) segments.push_back(&a);
      if (IsTensor(a)) tensors.push_back(&a);
    }
    auto by_address = [](const TimelineAllocation* a, const TimelineAllocation* b) {
      return a->address < b->address;
    };
    std::sort(segments.begin(), segments.end(), by_address);
    std::sort(tensors.begin(), tensors.end(), by_address);
    size_t next = 0;
    for (const TimelineAllocation* segment : segments) {
      const uint64_t end = segment->address + segment->bytes;
      while (next < tensors.size() && tensors[next]->address < segment->address) ++next;
      std::vector<const TimelineAllocation*> inside;
      for (; next < tensors.size() && tensors[next]->address + tensors[next]->bytes <= end; ++next) {
        inside.push_back(tensors[next]);
      }
      SegmentWithBlocks(w, t, t.devices[slot].index, *segment, inside);
    }
    // Memory PyTorch never sees: a segment of its own, holding one block.
    for (const TimelineAllocation& a : t.allocations) {
      if (a.device_slot == slot && a.live_at_exit && IsDeviceMemory(a.kind) &&
          !IsTensor(a)) {
        Segment(w, t.devices[slot].index, a, /*blocks_known=*/true, FramesOf(t, a));
      }
    }
  }
  w.EndList();

  uint32_t max_device = 0;
  for (const DeviceTimeline& d : t.devices) max_device = std::max(max_device, d.index);
  const uint64_t origin = p.first_timestamp_abs_ns;  // relative time 0, absolute
  bool unknown_written = false;
  uint64_t last_ns = 0;
  w.Str("device_traces");
  w.BeginList();
  for (uint32_t ordinal = 0; ordinal <= max_device && !t.devices.empty(); ++ordinal) {
    struct Step {
      uint64_t time_ns;
      const char* action;
      const TimelineAllocation* a;
      bool birth;
    };
    std::vector<Step> steps;
    for (const TimelineAllocation& a : t.allocations) {
      if (t.devices[a.device_slot].index != ordinal) continue;
      const bool library = IsDeviceMemory(a.kind) && !IsTensor(a);
      if (!IsTorchSegment(a) && !IsTensor(a) && !library) continue;
      if (!IsTensor(a)) steps.push_back({a.birth_ns, "segment_alloc", &a, true});
      if (!IsTorchSegment(a)) steps.push_back({a.birth_ns, "alloc", &a, true});
      if (a.live_at_exit) continue;
      if (!IsTorchSegment(a)) {
        steps.push_back({a.death_ns, "free_requested", &a, false});
        steps.push_back({a.death_ns, "free_completed", &a, false});
      }
      if (!IsTensor(a)) steps.push_back({a.death_ns, "segment_free", &a, false});
    }
    std::stable_sort(steps.begin(), steps.end(),
                     [](const Step& x, const Step& y) { return x.time_ns < y.time_ns; });
    std::vector<const FailedAllocationReport*> failures;
    for (const FailedAllocationReport& f : p.failed_allocations) {
      if (f.device == ordinal) failures.push_back(&f);
    }
    w.BeginList();
    size_t next_failure = 0;
    for (size_t i = 0; i <= steps.size(); ++i) {
      const uint64_t now = i < steps.size() ? steps[i].time_ns : ~uint64_t{0};
      for (; next_failure < failures.size() && failures[next_failure]->time_ns < now;
           ++next_failure) {
        const FailedAllocationReport& f = *failures[next_failure];
        const std::string category = f.phase.empty() ? "unknown" : f.phase;
        unknown_written |= category == "unknown";
        Entry(w, "oom", f.device_free_bytes, f.requested_bytes, origin + f.time_ns, category);
        last_ns = std::max(last_ns, f.time_ns);
      }
      if (i == steps.size()) break;
      const TimelineAllocation& a = *steps[i].a;
      const std::string category = Category(t, a.phase);
      unknown_written |= category == "unknown";
      Entry(w, steps[i].action, a.address, a.bytes, origin + now, category,
            steps[i].birth ? FramesOf(t, a) : Frames{});
      last_ns = std::max(last_ns, now);
    }
    if (ordinal == max_device && !unknown_written) {
      Entry(w, "snapshot", 0, 0, origin + last_ns, "unknown");  // see the top of this file
    }
    w.EndList();
  }
  w.EndList();
  w.EndDict();
  w.Finish();
}

}  // namespace

size_t ProcessWithHighestPeak(const Report& report) {
  size_t best = 0;
  uint64_t best_bytes = 0;
  for (size_t i = 0; i < report.processes.size(); ++i) {
    for (const DeviceReport& d : report.processes[i].devices) {
      if (d.peak.bytes > best_bytes) {
        best_bytes = d.peak.bytes;
        best = i;
      }
    }
  }
  return best;
}

void WriteMemoryVizSnapshot(const AnalyzedTrace& trace, size_t process, std::ostream& out) {
  const ProcessReport& p = trace.report->processes.at(process);
  const ProcessTimeline& t = trace.timelines.at(process);
  PickleWriter w(out);
  if (p.torch.attached) {
    WriteBridgedSnapshot(p, t, w);
    return;
  }
  const bool blocks_known = p.allocator_mode != "native";
  w.BeginDict();

  w.Str("segments");
  w.BeginList();
  for (const TimelineAllocation& a : t.allocations) {
    if (IsDeviceMemory(a.kind) && a.live_at_exit) {
      Segment(w, t.devices[a.device_slot].index, a, blocks_known, FramesOf(t, a));
    }
  }
  w.EndList();

  // One trace per device ordinal, from 0 to the highest seen (PyTorch indexes it by ordinal).
  uint32_t max_device = 0;
  for (const DeviceTimeline& d : t.devices) max_device = std::max(max_device, d.index);
  const uint64_t origin = p.first_timestamp_abs_ns;  // relative time 0, absolute
  bool unknown_written = false;
  uint64_t last_ns = 0;
  auto category_of = [&unknown_written](const std::string& category) -> const std::string& {
    unknown_written |= category == "unknown";
    return category;
  };
  w.Str("device_traces");
  w.BeginList();
  for (uint32_t ordinal = 0; ordinal <= max_device && !t.devices.empty(); ++ordinal) {
    w.BeginList();
    auto slot_it = std::find_if(t.devices.begin(), t.devices.end(),
                                [ordinal](const DeviceTimeline& d) { return d.index == ordinal; });
    if (slot_it != t.devices.end()) {
      const auto slot = static_cast<uint32_t>(slot_it - t.devices.begin());
      // Step k of the device's series is one birth or death: which allocation, which one.
      std::vector<std::pair<uint32_t, bool>> step_owner(slot_it->device_memory.size());
      for (uint32_t i = 0; i < t.allocations.size(); ++i) {
        const TimelineAllocation& a = t.allocations[i];
        if (a.device_slot != slot || a.birth_step == kNoStep) continue;
        step_owner[a.birth_step] = {i, true};
        if (a.death_step != kNoStep) step_owner[a.death_step] = {i, false};
      }
      std::vector<const FailedAllocationReport*> failures;
      for (const FailedAllocationReport& f : p.failed_allocations) {
        if (f.device == ordinal) failures.push_back(&f);
      }
      size_t next_failure = 0;
      for (size_t step = 0; step <= step_owner.size(); ++step) {
        const uint64_t now =
            step < step_owner.size() ? slot_it->device_memory[step].time_ns : ~uint64_t{0};
        for (; next_failure < failures.size() && failures[next_failure]->time_ns < now;
             ++next_failure) {
          const FailedAllocationReport& f = *failures[next_failure];
          // PyTorch's OOM entry carries the device's free bytes in `addr`.
          Entry(w, "oom", f.device_free_bytes, f.requested_bytes, origin + f.time_ns,
                category_of(f.phase.empty() ? "unknown" : f.phase));
          last_ns = std::max(last_ns, f.time_ns);
        }
        if (step == step_owner.size()) break;
        const TimelineAllocation& a = t.allocations[step_owner[step].first];
        const std::string category = category_of(Category(t, a.phase));
        const uint64_t at = origin + now;
        last_ns = std::max(last_ns, now);
        if (step_owner[step].second) {
          Entry(w, "segment_alloc", a.address, a.bytes, at, category, FramesOf(t, a));
          if (blocks_known) Entry(w, "alloc", a.address, a.bytes, at, category, FramesOf(t, a));
        } else {
          if (blocks_known) {
            Entry(w, "free_requested", a.address, a.bytes, at, category);
            Entry(w, "free_completed", a.address, a.bytes, at, category);
          }
          Entry(w, "segment_free", a.address, a.bytes, at, category);
        }
      }
    }
    if (ordinal == max_device && !unknown_written) {
      Entry(w, "snapshot", 0, 0, origin + last_ns, "unknown");  // see the top of this file
    }
    w.EndList();
  }
  w.EndList();
  w.EndDict();
  w.Finish();
}

}  // namespace cumemtrace
