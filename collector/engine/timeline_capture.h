// Internal: fills a ProcessTimeline (analyzed_trace.h) at the end of the process sweep, from
// the sorted events and the allocation table the sweep built.
#pragma once

#include <vector>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"
#include "collector/engine/accounting.h"
#include "collector/engine/analyzed_trace.h"

namespace cumemtrace::internal {

// `stream.events` must be sorted as the sweep sorted them; `allocations` and `phases` are the
// sweep's, `phase_names` the display name of each of its phases (Allocation::phase indexes
// both); `report` is the finished ProcessReport (devices, time origin, end).
void CaptureTimeline(const DecodedStream& stream, const std::vector<Allocation>& allocations,
                     const std::vector<PhaseName>& phases,
                     const std::vector<std::string>& phase_names, const ProcessReport& report,
                     ProcessTimeline* out);

}  // namespace cumemtrace::internal
