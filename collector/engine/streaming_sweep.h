// Internal: the streaming analysis behind `cumemtrace report` (docs/benchmarks.md, "Bounded
// memory"). Events are decoded into a bounded reorder window per stream and swept as they
// leave it; allocations are kept only while live, or while live at the device's current
// peak. Memory is bounded by the window and the live set, not by the number of events.
//
// The report is the one AnalyzeProcess (in_memory_sweep.h) writes from every event at once,
// with one difference: an event older than what the sweep has already passed (it arrived
// more than the window late) is applied where it arrived and counted in
// ProcessReport::late_events. A process whose phases are inferred is read three or four
// times (NeedsPass()); one whose handshake came after events it would have moved onto
// CLOCK_REALTIME is left to the in-memory analysis (Finish()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collector/engine/analysis.h"
#include "collector/engine/report.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {

struct StreamingOptions {
  // An event leaves the reorder window once it is this much older than the newest event of
  // its stream. The tracer delivers CUPTI buffers at most about 200 ms after their records
  // (tracer_runtime.cc); the recorded traces arrive at most ~0.1 s late (docs/benchmarks.md).
  uint64_t window_ns = 1'000'000'000;
  // ... and at most this many events of one stream wait in it (64 bytes each).
  size_t max_window_events = size_t{1} << 20;
};

// The most a stream's analysis held at once: what the memory bound is made of.
struct StreamingStats {
  uint64_t max_window_events = 0;  // events waiting in the reorder window
  uint64_t max_runs = 0;           // sorted runs the window was split into
  uint64_t max_live = 0;           // live allocations
  uint64_t max_kept_at_peak = 0;   // freed allocations kept because live at the peak
  uint64_t max_lateness_ns = 0;    // newest timestamp seen minus an arriving event's
};

class StreamingAnalyzer {
 public:
  explicit StreamingAnalyzer(const AnalysisOptions& options,
                             const StreamingOptions& streaming = StreamingOptions());
  ~StreamingAnalyzer();
  StreamingAnalyzer(const StreamingAnalyzer&) = delete;
  StreamingAnalyzer& operator=(const StreamingAnalyzer&) = delete;

  void AddChunk(const v1::TraceChunk& chunk);
  // A chunk that wraps a wire frame, given as its stream id and the frame's bytes.
  void AddWireFrame(uint32_t stream_id, std::string_view frame);
  void MarkTruncated(const std::string& reason);
  // One process per stream, by stream id; no job summary. The ids of streams that need the
  // in-memory analysis go to *in_memory: their entries hold only the stream id, for the
  // caller to replace with AnalyzeProcess over a second read of those streams.
  std::unique_ptr<Report> Finish(std::vector<uint32_t>* in_memory);
  // After Finish(): processes whose phases are inferred need the same chunks read again,
  // twice or three times (docs/phases.md; the inference's passes, then the sweep with the
  // inferred ranges). While NeedsPass(): BeginPass(), every chunk again, EndPass(report),
  // which updates those processes in the report Finish() returned.
  bool NeedsPass() const;
  void BeginPass();
  void EndPass(Report* report);
  // Per stream id, valid after Finish().
  const std::map<uint32_t, StreamingStats>& stats() const { return stats_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::map<uint32_t, StreamingStats> stats_;
};

}  // namespace cumemtrace::internal
