// Internal: completes a ProcessTimeline (engine.h) at the end of a sweep that kept
// everything (Retention::kKeepAll), whose devices' counter series the Accountant made as it
// swept: the allocations, ranges, kernels and marks, from the events as swept and every
// allocation.
#pragma once

#include <vector>

#include "collector/engine/accountant.h"
#include "collector/engine/decoded_stream.h"
#include "collector/engine/engine.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"

namespace cumemtrace::internal {

// `events` as the sweep took them; `allocations` and `phases` are the sweep's
// (Allocation::phase indexes phases.names(), and a range's phase is the one the sweep gave it);
// `report` is the finished ProcessReport (time origin, end). With `classified`, device
// allocations carry their lifetime class.
void CaptureTimeline(const DecodedStream& stream, const std::vector<Event>& events,
                     const std::vector<Allocation>& allocations, const PhaseTracker& phases,
                     const ProcessReport& report, bool classified, ProcessTimeline* out);

}  // namespace cumemtrace::internal
