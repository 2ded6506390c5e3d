// Exports of an analyzed trace (collector/engine/engine.h) to files that other tools open: Perfetto's
// native trace, Chrome's JSON trace, PyTorch's memory_viz snapshot, CSV tables, and the
// self-contained HTML viewer. docs/exports.md describes each. The functions only write to
// the stream they are given; the caller checks it and owns the files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {

// Perfetto protobuf (a `perfetto.protos.Trace`): per process a process track; per device
// counter tracks of bytes in use (the program's, and module globals and tracer buffers, which
// are not the program's); per thread a track of NVTX ranges; per GPU stream a track of
// kernels; instants for the peak and failed allocations. Slices that would overlap without
// nesting go to extra tracks under the same parent.
void WritePerfettoTrace(const AnalyzedTrace& trace, std::ostream& out);

// Chrome trace event JSON ({"traceEvents": [...]}): the same content, times in microseconds.
void WriteChromeTrace(const AnalyzedTrace& trace, std::ostream& out);

// PyTorch memory_viz snapshot (a pickle, protocol 2) of one process:
// `trace.report->processes[process]`. Allocations are categorized by phase of origin.
void WriteMemoryVizSnapshot(const AnalyzedTrace& trace, size_t process, std::ostream& out);
// The same at one instant (`at_ns`, relative to the process's first timestamp): the segments
// and blocks live then, and the history up to it (`export --at oom`).
void WriteMemoryVizSnapshotAt(const AnalyzedTrace& trace, size_t process, uint64_t at_ns,
                              std::ostream& out);
// The instant of the process's first out-of-memory: PyTorch's own OOM when there is one,
// else the first failed allocation the program saw; false when there was none.
bool FirstOutOfMemory(const ProcessReport& process, uint64_t* at_ns);

// The process memory_viz exports by default: the one with the highest device peak.
size_t ProcessWithHighestPeak(const Report& report);

// The tensors at the tensor peak by module path (`run --modules`) as folded stacks, one line
// "frame;frame;... bytes" per module with bytes of its own: frames are the path's segments
// under the root module, so a flame graph of it draws the module tree. Each process and
// device with attribution; under a "pid P GPU D" frame when there are several. "" when none.
std::string ModuleFoldedStacks(const Report& report);

// The summary's tables as CSV files: (file name, content), e.g. ("devices.csv", "...").
std::vector<std::pair<std::string, std::string>> SummaryCsvTables(const Report& report);

// The HTML viewer (viewer/) with this trace's data embedded: one file, no network. Lifetime
// classes per allocation are embedded when the analysis kept them (keep_lifetimes).
void WriteViewerHtml(const AnalyzedTrace& trace, std::ostream& out);

// The viewer's compare page: each run's memory (the process and device with its highest peak)
// on one time axis, time 0 being the run's first iteration start (its trace start when no
// iterations were found).
struct ViewerRun {
  std::string label;
  const AnalyzedTrace* trace = nullptr;
};
void WriteCompareViewerHtml(const std::vector<ViewerRun>& runs, std::ostream& out);

// The viewer's sweep page: peak, persistent and activation memory against the parameter, one
// line per label, and the table (`cumemtrace sweep` writes it as sweep.html).
void WriteSweepViewerHtml(const std::string& parameter, const std::vector<SweepPoint>& points,
                          std::ostream& out);

// JSON text made safe to embed in an HTML <script> element: '<', '>', '&', U+2028 and
// U+2029 as \u escapes (the same JSON). Every page above embeds its data this way.
std::string EscapeJsonForScript(std::string_view json_text);

}  // namespace cumemtrace
