// Internal: one process's decoded stream -> its ProcessReport (sort, one sweep, tables).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collector/engine/analysis.h"
#include "collector/engine/decoded_stream.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"
#include "collector/engine/accounting.h"
#include "collector/engine/analyzed_trace.h"

namespace cumemtrace::internal {

// Sorts stream.events in place (time, then the tie rule of design.md, then arrival). With
// `timeline`, also fills it from the same sweep (analyzed_trace.h).
ProcessReport AnalyzeProcess(DecodedStream& stream, const AnalysisOptions& options,
                             ProcessTimeline* timeline = nullptr);

// "DEVICE", "PINNED", ... for a v1::MemoryKind value.
const char* MemoryKindName(uint8_t kind);

// A failed allocation event as the report lists it, `time_ns` after the process's start;
// its phase and the device memory in use then are the sweep's to fill in.
FailedAllocationReport FailedAllocationOf(const Event& e, const DecodedStream& s,
                                          uint64_t time_ns);

// The pieces of a ProcessReport that the in-memory sweep and the streaming one
// (streaming_sweep.h) share, so that both write the same report from the same state.
// `first` is the process's first timestamp; relative times are taken from it.
void FillStreamFacts(const DecodedStream& s, ProcessReport* p);
// Moves a stream's timestamp onto CLOCK_REALTIME (the handshake's clock pair).
inline void ShiftEventToRealtime(int64_t offset, Event* e) {
  auto shift = [offset](uint64_t t) {
    return t == 0 ? t : static_cast<uint64_t>(static_cast<int64_t>(t) + offset);
  };
  e->timestamp_ns = shift(e->timestamp_ns);
  if (e->type == EventType::kKernel) e->a = shift(e->a);  // its end
}
// The same for the stream's other timed records (drops, exit, start); sets the offset to 0.
void ShiftRecordsToRealtime(DecodedStream* s);
void FillDeviceReport(const DecodedStream& s, const DeviceCounters& c, uint32_t index,
                      uint64_t first, DeviceReport* out);
// Per (slot, origin id), merged by the origin's text into p->devices[slot].*out.
void AddOriginStats(const std::map<std::pair<uint32_t, uint32_t>, OriginStats>& stats,
                    const char* unknown_name, const DecodedStream& s,
                    std::map<std::string, OriginStats> DeviceReport::*out, ProcessReport* p);
// at_peak[slot]: the device allocations live at that slot's peak, in any order (reordered).
void FillPeakContents(std::vector<std::vector<const Allocation*>>& at_peak,
                      const std::vector<std::string>& phase_names, const DecodedStream& s,
                      size_t top_allocations, uint64_t first, ProcessReport* p);
void FillPhaseReports(const PhaseTracker& phases, const std::vector<std::string>& phase_names,
                      const std::vector<uint32_t>& slot_device, const DecodedStream& s,
                      uint64_t first, ProcessReport* p);
void FillDropReports(const DecodedStream& s, uint64_t first, ProcessReport* p);

}  // namespace cumemtrace::internal
