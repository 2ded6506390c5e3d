// The job view of a distributed run (torchrun, DDP, SLURM): one row per rank with its peak,
// the rank that peaks highest, the spread between ranks, and per-phase peaks per rank.
#pragma once

#include "collector/engine/report.h"

namespace cumemtrace::internal {

// Fills report->job from the processes that carry a rank (no-op when none does).
void AddJobSummary(Report* report);

}  // namespace cumemtrace::internal
