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
// Every entry has `category`: for a process with categories (docs/phases.md "Categories"),
// PyTorch's name of its allocation's category ("parameter", "optimizer_state", "input",
// "temporary", "activation", "gradient", "autograd_detail"; "unknown" for memory that is no
// tensor allocation; a buffer is a "parameter" there); otherwise the phase of origin of its
// allocation, "unknown" without one. When no entry is "unknown", one `snapshot` entry (the
// end of the trace) carries "unknown": MemoryViz.js adds "unknown" itself when it is missing,
// through a misspelled field (`snapshot.categores.push`), and stops with a TypeError before drawing
// anything. With `run --stacks`, blocks, segments and their alloc/segment_alloc entries carry the
// allocating stack as PyTorch's `frames` ({"filename", "line", "name"}, innermost first);
// frees carry none (the tracer records the stacks of allocations only).
// `time_us` is wall-clock microseconds (the trace's timestamps are on CLOCK_REALTIME once the
// handshake's clock pair is known), as PyTorch writes it; from 0 the page showed 1970.
#include <algorithm>
#include <string_view>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/lifetimes.h"
#include "collector/output/exports.h"
#include "collector/output/pickle_writer.h"
#include "collector/output/slice_tracks.h"

namespace cumemtrace {
namespace {

// The snapshot's records, each allocation's frames taken from the process' stack table.
class SnapshotWriter : public internal::PickleWriter {
 public:
  SnapshotWriter(std::ostream& out, const ProcessTimeline& timeline)
      : PickleWriter(out), timeline_(timeline) {}

  void Field(const char* key, uint64_t value) {
    Str(key);
    UInt(value);
  }
  void Field(const char* key, const std::string& value) {
    Str(key);
    Str(value);
  }

  // `stack` indexes the stack table; -1 (frees, gaps): an empty list. A tensor born with
  // attribution (`run --modules`, `--ops`) has a frame of its own first: the module path as
  // the file, the operator as the function, line 0.
  void Frames(int32_t stack, const TimelineAllocation* born = nullptr) {
    Str("frames");
    BeginList();
    const TimelineAttribution& a = timeline_.attributions.at(born ? born->attribution : 0);
    if (a.module != 0 || a.op != 0) {
      const std::vector<std::string>& strings = timeline_.strings;
      BeginDict();
      Field("filename", a.module != 0 ? strings[a.module] : "(no module)");
      Field("line", 0);
      Field("name", (a.backward ? "backward: " : "") +
                        (a.op != 0 ? strings[a.op] : std::string("(no operator)")));
      EndDict();
    }
    const StackTable& stacks = timeline_.stacks;
    if (stack >= 0 && static_cast<size_t>(stack) < stacks.stacks.size()) {
      for (uint32_t f : stacks.stacks[static_cast<size_t>(stack)]) {
        BeginDict();
        Field("filename", stacks.file[f]);
        Field("line", stacks.line[f]);
        Field("name", stacks.function[f]);
        EndDict();
      }
    }
    EndList();
  }

  void Entry(const char* action, uint64_t address, uint64_t bytes, uint64_t time_abs_ns,
             const std::string& category, int32_t stack = -1,
             const TimelineAllocation* born = nullptr) {
    BeginDict();
    Field("action", action);
    Field("addr", address);
    Field("size", bytes);
    // CUPTI's memory records do not say which stream an allocation is ordered on.
    Field("stream", 0);
    Field("time_us", time_abs_ns / 1000);
    // PyTorch's own OOM entries carry the device's free bytes under this key too, and its
    // _memory_viz.trace() reads it (a KeyError without it, seen on the GPU suite).
    if (std::string_view(action) == "oom") Field("device_free", address);
    Frames(stack, born);
    Field("category", category);
    EndDict();
  }

  // A segment; `blocks()` writes its blocks.
  template <typename Blocks>
  void Segment(uint32_t device, const TimelineAllocation& a, uint64_t used,
               const char* segment_type, Blocks blocks) {
    BeginDict();
    Field("device", device);
    Field("address", a.address);
    Field("total_size", a.bytes);
    Field("allocated_size", used);
    Field("active_size", used);
    Field("requested_size", used);
    Field("stream", 0);
    Field("segment_type", segment_type);
    Str("segment_pool_id");
    BeginTuple();
    UInt(0);
    UInt(0);
    EndTuple();
    Str("is_expandable");
    Bool(false);
    Frames(a.stack);
    Str("blocks");
    BeginList();
    blocks();
    EndList();
    EndDict();
  }

  void Block(uint64_t address, uint64_t bytes, uint64_t requested, bool active, int32_t stack = -1,
             const TimelineAllocation* born = nullptr) {
    BeginDict();
    Field("address", address);
    Field("size", bytes);
    Field("requested_size", requested);
    Field("state", active ? "active_allocated" : "inactive");
    Frames(stack, born);
    EndDict();
  }

  // A segment holding one block that fills it.
  void Segment(uint32_t device, const TimelineAllocation& a, bool blocks_known) {
    const uint64_t used = blocks_known ? a.bytes : 0;
    Segment(device, a, used, "large",
            [&] { Block(a.address, a.bytes, used, blocks_known, a.stack); });
  }

 private:
  const ProcessTimeline& timeline_;  // its stacks, attributions and strings
};

bool IsTorchSegment(const TimelineAllocation& a) { return a.kind == kTorchReservedKind; }
bool IsTensor(const TimelineAllocation& a) { return a.kind == kTorchAllocatedKind; }

// PyTorch's allocator seen through the bridge: a segment (TORCH_RESERVED) holds the tensors
// (TORCH_ALLOCATED) inside its range as active_allocated blocks, and the gaps between them
// as inactive ones, as torch.cuda.memory._snapshot() shows it.
// Live at the instant the snapshot shows: at `at_ns` when given (born by then, not dead by
// then), else at the end of the trace.
bool LiveThen(const TimelineAllocation& a, const uint64_t* at_ns) {
  if (at_ns == nullptr) return a.live_at_exit;
  return a.birth_ns <= *at_ns && (a.live_at_exit || a.death_ns > *at_ns);
}

void BridgedSegments(SnapshotWriter& w, const ProcessTimeline& t, const uint64_t* at_ns) {
  for (uint32_t slot = 0; slot < t.devices.size(); ++slot) {
    const uint32_t device = t.devices[slot].index;
    std::vector<const TimelineAllocation*> segments;
    std::vector<const TimelineAllocation*> tensors;
    for (const TimelineAllocation& a : t.allocations) {
      if (a.device_slot != slot || !LiveThen(a, at_ns)) continue;
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
      size_t last = next;
      uint64_t allocated = 0;
      for (; last < tensors.size() && tensors[last]->address + tensors[last]->bytes <= end;
           ++last) {
        allocated += tensors[last]->bytes;
      }
      // Small-pool segments are 2 MiB.
      const char* type = segment->bytes <= (2u << 20) ? "small" : "large";
      w.Segment(device, *segment, allocated, type, [&] {
        uint64_t cursor = segment->address;
        for (; next < last; ++next) {
          const TimelineAllocation& b = *tensors[next];
          if (b.address > cursor) w.Block(cursor, b.address - cursor, 0, false);
          w.Block(b.address, b.bytes, b.bytes, true, b.stack, &b);
          cursor = b.address + b.bytes;
        }
        if (cursor < end) w.Block(cursor, end - cursor, 0, false);
      });
    }
    // Memory PyTorch never sees: a segment of its own, holding one block.
    for (const TimelineAllocation& a : t.allocations) {
      if (a.device_slot == slot && LiveThen(a, at_ns) && IsDeviceMemory(a.kind) && !IsTensor(a)) {
        w.Segment(device, a, /*blocks_known=*/true);
      }
    }
  }
}

// One allocation's birth or death in a device's trace.
struct Step {
  uint64_t time_ns;
  const TimelineAllocation* a;
  bool birth;
};

// Through the bridge, the births and deaths of the device's segments, tensors and the memory
// PyTorch never sees, by time.
std::vector<Step> BridgedSteps(const ProcessTimeline& t, uint32_t ordinal, const uint64_t* at_ns) {
  std::vector<Step> steps;
  for (const TimelineAllocation& a : t.allocations) {
    if (t.devices[a.device_slot].index != ordinal) continue;
    if (!IsTorchSegment(a) && !IsDeviceMemory(a.kind)) continue;
    if (at_ns != nullptr && a.birth_ns > *at_ns) continue;
    steps.push_back({a.birth_ns, &a, true});
    if (!LiveThen(a, at_ns) && !a.live_at_exit) steps.push_back({a.death_ns, &a, false});
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const Step& x, const Step& y) { return x.time_ns < y.time_ns; });
  return steps;
}

// Without the bridge, the steps of the device's memory series: each is one birth or death.
std::vector<Step> SeriesSteps(const ProcessTimeline& t, const DeviceTimeline& device,
                              uint32_t slot) {
  std::vector<Step> steps;
  steps.reserve(device.device_memory.size());
  for (const MemoryStep& s : device.device_memory) {
    steps.push_back({s.time_ns, t.allocations.data(), false});
  }
  for (const TimelineAllocation& a : t.allocations) {
    if (a.device_slot != slot || a.birth_step == kNoStep) continue;
    steps[a.birth_step].a = &a;
    steps[a.birth_step].birth = true;
    if (a.death_step != kNoStep) steps[a.death_step].a = &a;
  }
  return steps;
}

}  // namespace

size_t ProcessWithHighestPeak(const Report& report) {
  size_t process = 0, slot = 0;
  // The first of equals (HighestPeak's); process 0 when no device memory was ever in use.
  const bool found = HighestPeak(report, &process, &slot);
  return found && report.processes[process].devices[slot].peak.bytes > 0 ? process : 0;
}

namespace {

void WriteSnapshot(const AnalyzedTrace& trace, size_t process, const uint64_t* at_ns,
                   std::ostream& out) {
  const ProcessReport& p = trace.report->processes.at(process);
  const ProcessTimeline& t = trace.timelines.at(process);
  const bool bridged = p.torch.attached;
  const bool blocks_known = p.allocator_mode != "native";
  SnapshotWriter w(out, t);
  w.BeginDict();

  w.Str("segments");
  w.BeginList();
  if (bridged) {
    BridgedSegments(w, t, at_ns);
  } else {
    for (const TimelineAllocation& a : t.allocations) {
      if (IsDeviceMemory(a.kind) && LiveThen(a, at_ns)) {
        w.Segment(t.devices[a.device_slot].index, a, blocks_known);
      }
    }
  }
  w.EndList();

  // One trace per device ordinal, from 0 to the highest seen (PyTorch indexes it by ordinal).
  uint32_t max_device = 0;
  for (const DeviceTimeline& d : t.devices) max_device = std::max(max_device, d.index);
  const uint64_t origin = p.first_timestamp_abs_ns;  // relative time 0, absolute
  bool unknown_written = false;
  uint64_t last_ns = 0;
  auto entry = [&](const char* action, uint64_t address, uint64_t bytes, uint64_t time_ns,
                   const std::string& category, int32_t stack = -1,
                   const TimelineAllocation* born = nullptr) {
    unknown_written |= category == "unknown";
    last_ns = std::max(last_ns, time_ns);
    w.Entry(action, address, bytes, origin + time_ns, category, stack, born);
  };
  w.Str("device_traces");
  w.BeginList();
  for (uint32_t ordinal = 0; ordinal <= max_device && !t.devices.empty(); ++ordinal) {
    auto slot_it = std::find_if(t.devices.begin(), t.devices.end(),
                                [ordinal](const DeviceTimeline& d) { return d.index == ordinal; });
    const auto slot = static_cast<uint32_t>(slot_it - t.devices.begin());
    std::vector<Step> steps;
    std::vector<const FailedAllocationReport*> failures;
    if (bridged || slot_it != t.devices.end()) {
      steps = bridged ? BridgedSteps(t, ordinal, at_ns) : SeriesSteps(t, *slot_it, slot);
      if (at_ns != nullptr) {
        steps.erase(std::remove_if(steps.begin(), steps.end(),
                                   [at_ns](const Step& x) { return x.time_ns > *at_ns; }),
                    steps.end());
      }
      for (const FailedAllocationReport& f : p.failed_allocations) {
        if (f.device == ordinal && (at_ns == nullptr || f.time_ns <= *at_ns)) {
          failures.push_back(&f);
        }
      }
    }
    w.BeginList();
    size_t next_failure = 0;
    for (size_t i = 0; i <= steps.size(); ++i) {
      const uint64_t now = i < steps.size() ? steps[i].time_ns : ~uint64_t{0};
      for (; next_failure < failures.size() && failures[next_failure]->time_ns < now;
           ++next_failure) {
        const FailedAllocationReport& f = *failures[next_failure];
        // PyTorch's OOM entry carries the device's free bytes in `addr`.
        entry("oom", f.device_free_bytes, f.requested_bytes, f.time_ns,
              f.phase.empty() || p.categories_given ? "unknown" : f.phase);
      }
      if (i == steps.size()) break;
      const TimelineAllocation& a = *steps[i].a;
      // Which of PyTorch's entries the allocation has: a segment's and a block's.
      const bool segment = !bridged || !IsTensor(a);
      const bool block = bridged ? !IsTorchSegment(a) : blocks_known;
      // With categories, PyTorch's own names (memory that is no tensor allocation is
      // "unknown"); else the phase of origin.
      const std::string category = p.categories_given ? internal::MemoryVizCategoryName(a.category)
                                                      : internal::PhaseLabel(t, a.phase, "unknown");
      if (steps[i].birth) {
        if (segment) entry("segment_alloc", a.address, a.bytes, now, category, a.stack);
        if (block) entry("alloc", a.address, a.bytes, now, category, a.stack, &a);
      } else {
        if (block) entry("free_requested", a.address, a.bytes, now, category);
        if (block) entry("free_completed", a.address, a.bytes, now, category);
        if (segment) entry("segment_free", a.address, a.bytes, now, category);
      }
    }
    if (ordinal == max_device && !unknown_written) {
      w.Entry("snapshot", 0, 0, origin + last_ns, "unknown");  // see the top of this file
    }
    w.EndList();
  }
  w.EndList();
  w.EndDict();
  w.Finish();
}

}  // namespace

bool FirstOutOfMemory(const ProcessReport& process, uint64_t* at_ns) {
  const FailedAllocationReport* first = nullptr;
  for (const FailedAllocationReport& f : process.failed_allocations) {
    const bool torch = f.kind == "TORCH_ALLOCATED";
    if (first == nullptr || (torch && first->kind != "TORCH_ALLOCATED")) first = &f;
  }
  if (first != nullptr) *at_ns = first->time_ns;
  return first != nullptr;
}

void WriteMemoryVizSnapshot(const AnalyzedTrace& trace, size_t process, std::ostream& out) {
  WriteSnapshot(trace, process, nullptr, out);
}

void WriteMemoryVizSnapshotAt(const AnalyzedTrace& trace, size_t process, uint64_t at_ns,
                              std::ostream& out) {
  WriteSnapshot(trace, process, &at_ns, out);
}

}  // namespace cumemtrace
