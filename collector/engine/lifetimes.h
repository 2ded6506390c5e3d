// Lifetime classes of allocations, from where each was born and where it died (the
// analysis the EP plan's graph profiler did by hand):
//   temporary  - born and freed inside one occurrence of one phase;
//   activation - born in forward or settling (or energy), freed in backward or contrast;
//   gradient   - born in backward or contrast, alive when an optimizer or update step starts,
//                gone before the next iteration (else it is state: persistent);
//   persistent - alive at the start of an iteration it was not born in (weights, optimizer
//                state), never freed, or freed only in teardown (after the last phase
//                closed), so that it does not depend on how the program exits;
//   other      - none of these.
// The first class that fits wins, in that order.
#pragma once

#include <cstdint>
#include <vector>

#include "collector/engine/categories.h"
#include "collector/engine/iterations.h"
#include "collector/engine/phases.h"

namespace cumemtrace::internal {

enum class LifetimeClass : uint8_t { kTemporary, kActivation, kGradient, kPersistent, kOther };
const char* LifetimeClassName(LifetimeClass c);

// A forward-like and a backward-like phase (phase_rules.h): the phases that define the
// classes. Without them no class or activation figure is reported (LifetimeAtPeak).
bool HasTrainingPhases(const std::vector<PhaseName>& names);

class LifetimeClassifier {
 public:
  // exited: the process ended on its own (not by a signal), so what it never freed was held
  // to the end rather than cut off.
  // by_phase: phases.OccurrencesByPhase(), which it keeps a reference to.
  LifetimeClassifier(const PhaseTracker& phases, const OccurrenceLists& by_phase,
                     const std::vector<IterationWindow>& iterations, bool exited);
  // Absolute times and phases (-1: none); death_ns is the process end for allocations never
  // freed.
  LifetimeClass Classify(uint64_t birth_ns, int32_t birth_phase, uint64_t death_ns,
                         int32_t death_phase, bool freed) const;
  // The inferred category (v1::Category) of an allocation no object named; same arguments.
  // `objects`: bit c set when the program's objects named category c somewhere in the
  // process (the Python side ran): such a category is never inferred for another allocation.
  uint8_t Categorize(uint64_t birth_ns, int32_t birth_phase, uint64_t death_ns, int32_t death_phase,
                     bool freed, uint32_t objects) const;

 private:
  const std::vector<PhaseName>& names_;
  const OccurrenceLists& by_phase_;
  std::vector<uint64_t> optimizer_starts_;  // sorted
  std::vector<uint64_t> backward_starts_;   // sorted
  uint64_t first_forward_ns_ = 0;           // 0: no forward-like phase
  uint64_t last_phase_end_ns_ = 0;          // 0: no phase at all
  bool exited_ = false;
  const std::vector<IterationWindow>& iterations_;              // sorted, disjoint
};

}  // namespace cumemtrace::internal
