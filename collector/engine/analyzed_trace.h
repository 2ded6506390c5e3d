// What happened over time in a trace, per process and device: device memory in use as a step
// series, every allocation with the steps where it starts and ends, NVTX range slices per
// thread, kernel slices per stream and NVTX marks. It is filled by the same sweep that makes
// the Report (accountant.cc), so a timeline never disagrees with the summary; the exports
// (collector/output/exports.h) and the HTML viewer are drawn from it.
//
// Times are nanoseconds relative to the process's first timestamp
// (ProcessReport::first_timestamp_abs_ns), like the *_ns figures of the Report.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/engine/analysis.h"
#include "collector/engine/report.h"

namespace cumemtrace {

constexpr uint32_t kNoStep = 0xFFFFFFFFu;

// Bytes in use right after one allocation or release.
struct MemoryStep {
  uint64_t time_ns = 0;
  uint64_t bytes = 0;
};

struct DeviceTimeline {
  uint32_t index = 0;  // CUDA device ordinal
  // The program's own device memory (DEVICE + ARRAY), one step per allocation or release, in
  // event order (several steps may share a timestamp).
  std::vector<MemoryStep> device_memory;
  // Not the program's own: DEVICE_STATIC + MANAGED_STATIC module globals.
  std::vector<MemoryStep> static_memory;
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
  uint32_t thread_id = 0;
  uint8_t kind = 0;  // v1::MemoryKind
  bool live_at_exit = false;
  // Device memory, with AnalysisOptions::keep_lifetimes: its lifetime class ("temporary",
  // "activation", ..., lifetimes.h), as the sweep classified it; else null.
  const char* lifetime_class = nullptr;
};

// One NVTX range occurrence.
struct RangeSlice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t thread_id = 0;  // the thread that opened it
  int32_t phase = -1;      // index into ProcessTimeline::phase_names
  bool still_open = false;  // closed at the process's end
};

struct KernelSlice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t device = 0;  // ordinal
  uint32_t stream = 0;  // CUPTI stream id
  uint32_t name = 0;    // index into ProcessTimeline::strings
  uint32_t thread_id = 0;
};

struct MarkInstant {
  uint64_t time_ns = 0;
  uint32_t thread_id = 0;
  uint32_t name = 0;  // index into strings
};

struct ProcessTimeline {
  std::vector<std::string> strings{std::string()};  // names, deduplicated; [0] is ""
  // Display names of the phases that TimelineAllocation::phase and RangeSlice::phase index.
  std::vector<std::string> phase_names;
  std::vector<DeviceTimeline> devices;               // in ProcessReport::devices order
  std::vector<TimelineAllocation> allocations;       // in birth order
  std::vector<RangeSlice> ranges;                    // by start
  std::vector<KernelSlice> kernels;                  // by start
  std::vector<MarkInstant> marks;                    // by time
};

// processes[i] belongs to report->processes[i].
struct AnalyzedTrace {
  std::unique_ptr<Report> report;
  std::vector<ProcessTimeline> timelines;
};

// AnalyzeTraceFile (analysis.h) that also keeps the timelines; same errors and truncation.
// Every event is sorted (exact order); with `summary_order`, events are ordered as
// AnalyzeTraceFile orders them (the reorder window), so that the report is, to the byte, the
// summary AnalyzeTraceFile writes: one analysis for both the summary and the viewer.
std::unique_ptr<AnalyzedTrace> AnalyzeTraceFileDetailed(const std::string& path,
                                                        const AnalysisOptions& options,
                                                        std::string* error,
                                                        bool summary_order = false);

}  // namespace cumemtrace
