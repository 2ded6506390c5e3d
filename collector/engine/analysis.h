// Turns a trace (a sequence of TraceChunks) into a Report: per process and device, the
// memory timeline, the peak and what was live at it, per-phase figures, failed allocations.
// No I/O policy here beyond reading the file it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "collector/engine/phase_rules.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

struct Report;  // defined in collector/engine/report.h

struct AnalysisOptions {
  // How many of the largest allocations live at the peak to list per device.
  size_t top_allocations = 10;
  // Range name -> phase rules (user rules first); null means the built-in rules only.
  std::shared_ptr<const PhaseRules> phase_rules;
  // Name (range name or phase) of the range that marks one iteration; "" to detect it.
  std::string iteration_range;
  // Infer forward/backward(/optimizer) for PyTorch and LibTorch programs with no such ranges.
  bool infer_phases = true;
  // Keep one AllocationLifetime per device allocation (for the lifetimes CSV).
  bool keep_lifetimes = false;
  // Called while a trace file is read: the pass (1, then 2 and 3 when phases are inferred),
  // the bytes read and the file's size; about every 4 MiB and once at the end of each pass.
  std::function<void(int pass, uint64_t done_bytes, uint64_t total_bytes)> progress;
};

// Feed chunks in file order, then Finish() once.
class TraceAnalyzer {
 public:
  explicit TraceAnalyzer(const AnalysisOptions& options);
  ~TraceAnalyzer();
  TraceAnalyzer(const TraceAnalyzer&) = delete;
  TraceAnalyzer& operator=(const TraceAnalyzer&) = delete;

  void AddChunk(const v1::TraceChunk& chunk);
  // The input ended early (a cut file); the report says so with this reason.
  void MarkTruncated(const std::string& reason);
  std::unique_ptr<Report> Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads and analyzes a trace file. Returns null with *error set only when the file cannot be
// read at all or is not a trace file; a file that is cut or corrupt after a valid start
// gives a report marked truncated, with everything before the damage. Streams the file
// (memory bounded by a reorder window and the live allocations, not by the number of
// events); with options.keep_lifetimes, keeps every event instead (docs/design.md).
std::unique_ptr<Report> AnalyzeTraceFile(const std::string& path, const AnalysisOptions& options,
                                         std::string* error);

// The same for a whole trace file's bytes held in memory.
std::unique_ptr<Report> AnalyzeTraceBytes(std::string_view bytes, const AnalysisOptions& options,
                                          std::string* error);

}  // namespace cumemtrace
