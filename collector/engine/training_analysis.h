// Internal: the training-loop view of one process, computed after the sweep: iterations and
// per-phase statistics over them, lifetime classes at each device's peak, and (on request)
// one lifetime row per allocation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/engine/analysis.h"
#include "collector/engine/decoded_stream.h"
#include "collector/engine/iterations.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"
#include "collector/engine/accounting.h"

namespace cumemtrace::internal {

struct TrainingInputs {
  const DecodedStream& stream;
  const std::vector<Event>& events;  // sorted, as swept
  const PhaseTracker& phases;
  const MemoryTimeline& timeline;
  std::vector<uint32_t> slot_device;  // device index of each slot
  uint64_t first_ns;                  // the process's first timestamp
  uint64_t end_ns;                    // its last
  const AnalysisOptions& options;
};

void AddTrainingAnalysis(const TrainingInputs& in, ProcessReport* p);

// The parts of AddTrainingAnalysis that need no event or allocation table (the streaming
// sweep calls them directly). Fills p->iterations; returns the iteration windows.
IterationDetection AddIterations(const PhaseTracker& phases,
                                 const std::vector<uint32_t>& slot_device, uint64_t first_ns,
                                 const AnalysisOptions& options, ProcessReport* p);
// at_peak[slot]: bytes live at that slot's peak by lifetime class name.
void SetLifetimeAtPeak(const std::vector<uint32_t>& slot_device,
                       const std::vector<std::map<std::string, uint64_t>>& at_peak,
                       ProcessReport* p);

}  // namespace cumemtrace::internal
