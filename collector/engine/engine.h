// The analysis engine's one entry point: a trace file (or its bytes) -> an AnalyzedTrace,
// that is the Report (report.h: per process and device, the peak and what was live at it,
// per-phase figures, iterations, failed allocations...) and, when asked for, the timelines
// the exports and the viewer draw. Everything else in collector/engine/ is internal.
//
// Inside (docs/design.md "Data flow"): the trace reader (collector/format/trace_file.h) ->
// StreamDecoder (stream_decoder.h) -> per process an EventOrder (event_order.h) -> one
// Accountant (accountant.h), and for phase inference more passes over the same reader
// (phase_inference.h); analysis.cc drives them.
//
// Times named *_ns are relative to the process's first timestamp
// (ProcessReport::first_timestamp_abs_ns), like the *_ns figures of the Report.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "collector/engine/phase_rules.h"
#include "collector/engine/report.h"

namespace cumemtrace {

struct AnalysisOptions {
  // How many of the largest allocations live at the peak to list per device.
  size_t top_allocations = 10;
  // Range name -> phase rules (user rules first); null means the built-in rules only.
  std::shared_ptr<const PhaseRules> phase_rules;
  // Name (range name or phase) of the range that marks one iteration; "" to detect it.
  std::string iteration_range;
  // Infer forward/backward(/optimizer) for PyTorch and LibTorch programs with no such ranges.
  bool infer_phases = true;
  // Keep one AllocationLifetime per device allocation (for the lifetimes CSV); sorts every
  // event unless `timelines` says otherwise (one row per allocation is as large as the trace
  // anyway).
  bool keep_lifetimes = false;
  // Keep every event and allocation, and make the timelines (AnalyzedTrace::timelines): memory
  // grows with the trace.
  bool timelines = false;
  // Sort every event (exact order; memory grows with the trace) instead of ordering them
  // through the reorder window, as `report` does. The summary is the same for the recorded
  // traces (docs/design.md "Event order").
  bool sorted = false;
  // Called while a trace file is read: the pass (1, then 2 and 3 when phases are inferred),
  // the bytes read and the file's size: with 0 bytes when a pass starts (so that a pass can
  // be timed on its own), about every 4 MiB, and once at the end of each pass.
  std::function<void(int pass, uint64_t done_bytes, uint64_t total_bytes)> progress;
};

// TimelineAllocation::kind: a v1::MemoryKind value 0..7, or one of the analysis's own two for
// PyTorch's layers, made at decode time from the bridge's events (torch_layers.h).
constexpr int kMemoryKinds = 10;
constexpr uint8_t kTorchAllocatedKind = 8;  // tensors: the caching allocator's blocks
constexpr uint8_t kTorchReservedKind = 9;   // its segments (driver memory, holding blocks)
// Program-own device memory (design.md "What counts where"): DEVICE, ARRAY and tensors; the
// segments that hold the tensors are not counted again.
inline bool IsDeviceMemory(uint8_t kind) {
  return kind == 3 || kind == 4 || kind == kTorchAllocatedKind;
}
inline bool IsStaticMemory(uint8_t kind) { return kind == 6 || kind == 7; }

namespace internal {
// A time relative to `first` (the process's first timestamp, above); 0 before it.
inline uint64_t Since(uint64_t first, uint64_t ts) { return ts >= first ? ts - first : 0; }
// The file name of a path: what follows its last '/'.
inline std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
template <typename T>
bool Contains(const std::vector<T>& list, const T& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}
// Appends `value` unless `list` has it already: first-seen order.
template <typename T>
void AddOnce(std::vector<T>& list, const T& value) {
  if (!Contains(list, value)) list.push_back(value);
}
}  // namespace internal

constexpr uint32_t kNoStep = 0xFFFFFFFFu;

// Bytes in use right after one allocation or release.
struct MemoryStep {
  uint64_t time_ns = 0;
  uint64_t bytes = 0;
};

// PyTorch's segments (TORCH_RESERVED, the allocator bridge's) live after one change: `bytes`
// from DeviceTimeline::device_memory step `from_step` on, until the next change. Segments are
// no device memory of their own (their tensors are), so they have no steps of theirs; this
// places each change between the steps exactly, as swept, not by a timestamp that may tie.
struct ReservedStep {
  uint32_t from_step = 0;
  uint64_t bytes = 0;
};

struct DeviceTimeline {
  uint32_t index = 0;  // CUDA device ordinal
  // The program's own device memory (DEVICE + ARRAY), one step per allocation or release, in
  // event order (several steps may share a timestamp).
  std::vector<MemoryStep> device_memory;
  // Not the program's own: DEVICE_STATIC + MANAGED_STATIC module globals.
  std::vector<MemoryStep> static_memory;
  // With the allocator bridge: PyTorch's segments live, at each change (empty without it).
  std::vector<ReservedStep> torch_reserved;
  // First step at the highest value (the Report's peak); kNoStep when nothing was allocated.
  uint32_t peak_step = kNoStep;
};

// One allocation of any kind. Only device memory (DEVICE, ARRAY) has steps.
struct TimelineAllocation {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t birth_ns = 0;
  uint64_t death_ns = 0;  // the process's end when live_at_exit
  // Index into DeviceTimeline::device_memory of the step it was born in and the step it was
  // released in (kNoStep: never released). It is live at step k when birth <= k < death.
  uint32_t birth_step = kNoStep;
  uint32_t death_step = kNoStep;
  uint32_t device_slot = 0;  // index into ProcessTimeline::devices (and ProcessReport::devices)
  int32_t phase = -1;        // phase of origin: index into ProcessTimeline::phase_names; -1: none
  uint32_t api = 0;          // index into ProcessTimeline::strings; 0 ("") when not seen
  uint32_t library = 0;      // calling module, index into strings; 0 when not unwound
  uint8_t kind = 0;  // v1::MemoryKind
  bool live_at_exit = false;
  // Index into ProcessTimeline::stacks.stacks of the stack that allocated it; -1: none.
  int32_t stack = -1;
  // Device memory, with AnalysisOptions::keep_lifetimes: its lifetime class ("temporary",
  // "activation", ..., lifetimes.h), as the sweep classified it; else null.
  const char* lifetime_class = nullptr;
  // A tensor allocation of a process with categories: its v1::Category value, 0 otherwise
  // (docs/phases.md "Categories"); category_from_objects: a tag named it.
  uint8_t category = 0;
  bool category_from_objects = false;
  // A tensor with attribution (`run --modules`, `--ops`): index into
  // ProcessTimeline::attributions of its module path and operators (0: none).
  uint32_t attribution = 0;
};

// One distinct attribution of a process's tensors (`run --modules`, `--ops`): indices into
// ProcessTimeline::strings, 0 ("") when unknown. Their number is bounded by the program's code.
struct TimelineAttribution {
  uint32_t module = 0;
  uint32_t op = 0;        // the outermost operator
  uint32_t inner_op = 0;  // the innermost operator
  bool backward = false;  // born in an autograd node's backward
  // Born in backward and linked to its forward op: that op's outer operator; 0 otherwise.
  uint32_t forward_op = 0;
  bool operator<(const TimelineAttribution& o) const {
    return std::tie(module, op, inner_op, backward, forward_op) <
           std::tie(o.module, o.op, o.inner_op, o.backward, o.forward_op);
  }
};

// One NVTX range occurrence.
struct RangeSlice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t thread_id = 0;   // the thread that opened it
  int32_t phase = -1;       // index into ProcessTimeline::phase_names
  bool still_open = false;  // closed at the process's end
};

struct KernelSlice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t device = 0;  // ordinal
  uint32_t stream = 0;  // CUPTI stream id
  uint32_t name = 0;    // index into ProcessTimeline::strings
};

struct MarkInstant {
  uint64_t time_ns = 0;
  uint32_t thread_id = 0;
  uint32_t name = 0;  // index into strings
};

// The allocations' stacks (`run --stacks`), frames in columns and symbolized.
struct StackTable {
  std::vector<std::string> function;  // native without a symbol: "0x<address>"
  std::vector<std::string> file;      // native without line info: the module's path
  std::vector<uint32_t> line;         // 0 when unknown
  std::vector<const char*> kind;      // "python" or "native"
  // Frame indices, innermost (the allocating call) first.
  std::vector<std::vector<uint32_t>> stacks;
  // Per stack: index of its innermost frame of the program's own code (stacks.h).
  std::vector<uint32_t> user_frame;
  bool empty() const { return stacks.empty(); }
};

struct ProcessTimeline {
  std::vector<std::string> strings{std::string()};  // names, deduplicated; [0] is ""
  // Display names of the phases that TimelineAllocation::phase and RangeSlice::phase index.
  std::vector<std::string> phase_names;
  std::vector<DeviceTimeline> devices;          // in ProcessReport::devices order
  std::vector<TimelineAllocation> allocations;  // in birth order
  std::vector<RangeSlice> ranges;               // by start
  std::vector<KernelSlice> kernels;             // by start
  std::vector<MarkInstant> marks;               // by time
  StackTable stacks;                            // empty without `run --stacks`
  bool attribution = false;                     // the process sent module paths or operators
  // The distinct attributions TimelineAllocation::attribution indexes; [0] is none.
  std::vector<TimelineAttribution> attributions{TimelineAttribution()};
};

// processes[i] belongs to report->processes[i]; timelines only with AnalysisOptions::timelines.
struct AnalyzedTrace {
  std::unique_ptr<Report> report;
  std::vector<ProcessTimeline> timelines;
};

// Where the trace is: a trace file, or when `path` is empty, a whole trace file's bytes in
// memory.
struct TraceSource {
  std::string path;
  std::string_view bytes;
};

// Reads and analyzes a trace. Returns null with *error set only when the trace cannot be read
// at all or is not a trace file; one that is cut or corrupt after a valid start gives a report
// marked truncated, with everything before the damage. Memory is bounded by the reorder
// window and the live allocations, not by the number of events, unless `sorted`,
// `timelines` or `keep_lifetimes` asks for everything (docs/design.md).
std::unique_ptr<AnalyzedTrace> Analyze(const TraceSource& source, const AnalysisOptions& options,
                                       std::string* error);

}  // namespace cumemtrace
