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
//
// The inference reads a process's events in time order three times: which thread calls
// (InferenceScan), the bursts (BurstScan), the gradient frees (GradientScan). Each scan
// takes one event at a time, so the streaming analysis runs them as passes over the file
// and the in-memory one over its sorted vector, with the same result.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/phase_rules.h"

namespace cumemtrace::internal {

// Pass 1: named ranges and device memory events per thread.
class InferenceScan {
 public:
  void Add(const Event& e);
  // Decides from what was seen (and the stream's thread names and strings): not applied
  // (with the reason), or the calling thread found and passes 2 and 3 needed (*more).
  PhaseInferenceReport Decide(const DecodedStream& s, const PhaseRules& rules, bool* more) const;

 private:
  std::vector<std::pair<uint32_t, uint32_t>> range_names_;  // (domain, message), first seen first
  std::map<std::pair<uint32_t, uint32_t>, bool> seen_names_;
  std::map<uint32_t, uint64_t> memory_events_;  // by thread (0 left out)
  uint32_t last_thread_ = 0;
  uint64_t* last_count_ = nullptr;
};

struct Burst {
  uint64_t first_ns;
  uint64_t last_ns;
};

// Pass 2: bursts of the autograd threads' work between the calling thread's.
class BurstScan {
 public:
  explicit BurstScan(const PhaseInferenceReport& decided) : decided_(decided) {}
  void Sweep(const Event& e);  // the next event, in the order of event_order.h
  // The bursts of the chosen signal; sets out->signal, or out->reason when there are none.
  std::vector<Burst> Finish(PhaseInferenceReport* out);
  uint64_t forward_start() const { return forward_start_; }

 private:
  struct Finder {
    std::vector<Burst> bursts;
    bool open = false;
    void Add(uint64_t ts, bool autograd);
  };
  const PhaseInferenceReport& decided_;
  Finder memory_, kernels_;
  uint64_t forward_start_ = 0;  // the calling thread's first memory point
};

// Pass 3 (memory signal only): when the gradients born in each burst are freed.
class GradientScan {
 public:
  GradientScan(const PhaseInferenceReport& decided, const std::vector<Burst>& bursts)
      : decided_(decided), bursts_(bursts), optimizer_end_(bursts.size(), 0) {}
  void Sweep(const Event& e);  // the next event, in the order of event_order.h
  const std::vector<uint64_t>& optimizer_end() const { return optimizer_end_; }

 private:
  const PhaseInferenceReport& decided_;
  const std::vector<Burst>& bursts_;
  std::vector<uint64_t> optimizer_end_;
  std::unordered_map<uint64_t, size_t> born_in_burst_;  // (device, address) -> burst
  size_t burst_ = 0;
};

// The synthesized range events (domain kInferredDomainId), swept after real events of the
// same key; sets the outcome's counts. `optimizer_end` empty: none inferred.
std::vector<Event> InferredRanges(const std::vector<Burst>& bursts,
                                  const std::vector<uint64_t>& optimizer_end,
                                  uint64_t forward_start, PhaseInferenceReport* out);
// The names of the synthesized ranges' message ids, and their domain's (none).
void AddInferredNames(DecodedStream* s);

}  // namespace cumemtrace::internal
