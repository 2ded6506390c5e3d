// Iterations of a training loop and per-phase statistics over them. Iterations come from a
// range the user names, from a range the rules mark as an iteration (step, train_step, ...),
// or from the repetition of the top-level phase sequence (forward, backward, optimizer, ...).
#pragma once

#include <cstdint>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"

namespace cumemtrace::internal {

struct IterationWindow {
  uint64_t start_ns;  // absolute
  uint64_t end_ns;
};

// Index of the window holding `ts`, or -1 (before the first, after the last, or between).
int64_t IterationOf(const std::vector<IterationWindow>& windows, uint64_t ts);

// The iterations pass, after the sweep: finds the iterations in the phases' occurrences (from
// the range options.iteration_range names, if any) and fills p->iterations with per-phase
// statistics over iterations 2..N (the first, warm-up, is reported apart). Returns the
// iterations' windows, by start. `by_phase`: phases.OccurrencesByPhase().
std::vector<IterationWindow> AddIterations(const PhaseTracker& phases,
                                           const OccurrenceLists& by_phase,
                                           const std::vector<uint32_t>& slot_device,
                                           uint64_t first_ns, const AnalysisOptions& options,
                                           ProcessReport* p);

}  // namespace cumemtrace::internal
