// Phases of PyTorch and LibTorch training programs that carry no NVTX ranges, inferred from
// their threads: both run a backward pass on an autograd worker thread ("pt_autograd_N")
// while the calling thread waits. So, per iteration:
//   backward  = the autograd thread's burst of work;
//   optimizer = the calling thread's work after it, until the gradients born in that
//               backward pass are freed (zero_grad(set_to_none=True)); not inferred when
//               the gradients are never freed;
//   forward   = the calling thread's work before the backward pass (from the end of the
//               previous optimizer, or of the previous backward pass).
// The first forward also holds whatever the program did before its first iteration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/engine/decoded.h"
#include "collector/engine/phase_rules.h"

namespace cumemtrace::internal {

struct InferenceOutcome {
  bool applied = false;
  std::string reason;          // why it was (not) applied
  std::string signal;          // "memory" or "kernels": what the bursts were read from
  uint32_t calling_thread = 0;
  std::vector<uint32_t> autograd_threads;
  uint64_t backward_passes = 0;
  uint64_t optimizers_inferred = 0;
};

// Appends synthesized range events (domain kInferredDomainId) to s->events, which must be
// sorted on entry; the caller sorts again when `applied`.
InferenceOutcome InferTrainingPhases(DecodedStream* s, const PhaseRules& rules);

}  // namespace cumemtrace::internal
