#include "collector/engine/phase_inference.h"

#include <algorithm>

#include "collector/engine/phases.h"

namespace cumemtrace::internal {
namespace {

// Synthetic string ids for the inferred phase names (real ids count up from 1).
constexpr uint32_t kForwardId = 0xFFFFFFF1u;
constexpr uint32_t kBackwardId = 0xFFFFFFF2u;
constexpr uint32_t kOptimizerId = 0xFFFFFFF3u;

bool IsMemory(const Event& e) {
  return (e.type == EventType::kAllocate || e.type == EventType::kRelease) &&
         IsDeviceMemory(e.kind);
}

}  // namespace

void InferenceScan::Add(const Event& e) {
  if (e.type == EventType::kRangeOpen) {
    const std::pair<uint32_t, uint32_t> name{e.aux_id, e.name_id};
    if (seen_names_.emplace(name, true).second) range_names_.push_back(name);
  } else if (IsMemory(e) && e.thread_id != 0) {
    // Streams run long on one thread: skip the map lookup while the thread stays the same.
    if (e.thread_id != last_thread_) {
      last_thread_ = e.thread_id;
      last_count_ = &memory_events_[e.thread_id];
    }
    ++*last_count_;
  }
}

PhaseInferenceReport InferenceScan::Decide(const DecodedStream& s, const PhaseRules& rules,
                                       bool* more) const {
  *more = false;
  PhaseInferenceReport out;
  for (const auto& [tid, name] : s.thread_names) {
    if (name.rfind("pt_autograd", 0) == 0) out.autograd_threads.push_back(tid);
  }
  if (out.autograd_threads.empty()) {
    out.reason = "no autograd worker thread (pt_autograd_*) in this process";
    return out;
  }
  // The first range opened (in time order) that names a training phase.
  for (const auto& [domain_id, message_id] : range_names_) {
    const std::string phase = rules.Map(s.RangeName(domain_id, message_id)).phase;
    if (phase == "forward" || IsBackwardLikePhase(phase) || IsOptimizerLikePhase(phase)) {
      out.reason = "the program labels its phases with NVTX (" + phase + ")";
      return out;
    }
  }
  uint64_t most = 0;
  for (const auto& [tid, n] : memory_events_) {
    if (Contains(out.autograd_threads, tid)) continue;
    if (n > most) {
      most = n;
      out.calling_thread = tid;
    }
  }
  if (out.calling_thread == 0) {
    out.reason = "no calling thread with device memory activity";
    return out;
  }
  *more = true;
  return out;
}

void BurstScan::Finder::Add(uint64_t ts, bool autograd) {
  // Maximal runs of autograd-thread points not interrupted by a calling-thread point.
  if (autograd) {
    if (!open) bursts.push_back(Burst{ts, ts});
    bursts.back().last_ns = ts;
    open = true;
  } else {
    open = false;
  }
}

void BurstScan::Sweep(const Event& e) {
  const bool autograd = Contains(decided_.autograd_threads, e.thread_id);
  if (!autograd && e.thread_id != decided_.calling_thread) return;
  // Bursts from memory events (host time) when the autograd thread allocates in most
  // passes (async allocator); else from kernels (the caching allocator reuses its blocks).
  if (IsMemory(e)) {
    memory_.Add(e.timestamp_ns, autograd);
    if (!autograd && forward_start_ == 0) forward_start_ = e.timestamp_ns;
  } else if (e.type == EventType::kKernel) {
    kernels_.Add(e.timestamp_ns, autograd);
  }
}

std::vector<Burst> BurstScan::Finish(PhaseInferenceReport* out) {
  out->signal = "memory";
  std::vector<Burst> bursts = std::move(memory_.bursts);
  if (kernels_.bursts.size() > bursts.size()) {
    bursts = std::move(kernels_.bursts);
    out->signal = "kernels";
  }
  if (bursts.empty()) out->reason = "the autograd thread did no work that was recorded";
  return bursts;
}

void GradientScan::Sweep(const Event& e) {
  // Gradients: memory born on the autograd thread during burst k and freed after it, before
  // the next one. The optimizer of iteration k ends with the last such free. Memory that is
  // never freed (a library's workspace made by the first backward pass) is not a gradient.
  if (!IsMemory(e)) return;
  while (burst_ < bursts_.size() && bursts_[burst_].last_ns < e.timestamp_ns) ++burst_;
  const uint64_t key = AddressKey(e.device, e.a);
  if (e.type == EventType::kAllocate) {
    // Allocated by the autograd thread inside a burst: a candidate gradient.
    if (burst_ < bursts_.size() && e.timestamp_ns >= bursts_[burst_].first_ns &&
        Contains(decided_.autograd_threads, e.thread_id)) {
      born_in_burst_[key] = burst_;
    }
    return;
  }
  auto it = born_in_burst_.find(key);
  if (it == born_in_burst_.end()) return;
  const size_t k = it->second;
  born_in_burst_.erase(it);
  // Freed inside its own burst: a temporary of the backward pass, not a gradient.
  if (e.timestamp_ns <= bursts_[k].last_ns) return;
  if (k + 1 == bursts_.size() || e.timestamp_ns < bursts_[k + 1].first_ns) {
    optimizer_end_[k] = std::max(optimizer_end_[k], e.timestamp_ns);
  }
}

std::vector<Event> InferredRanges(const std::vector<Burst>& bursts,
                                  const std::vector<uint64_t>& optimizer_end,
                                  uint64_t forward_start, PhaseInferenceReport* out) {
  std::vector<Event> events;
  uint64_t range_id = 0xFFFF000000000000ull;
  auto add = [&](uint32_t message_id, uint64_t begin_ns, uint64_t end_ns) {
    Event open{};
    open.type = EventType::kRangeOpen;
    open.timestamp_ns = begin_ns;
    open.thread_id = out->calling_thread;
    open.name_id = message_id;
    open.aux_id = kInferredDomainId;
    open.nvtx_op = 3;  // START: ranges pair by id, whatever the thread stacks hold
    open.a = range_id++;
    Event close = open;
    close.type = EventType::kRangeClose;
    close.timestamp_ns = end_ns;
    close.name_id = 0;
    close.nvtx_op = 4;  // END
    events.push_back(open);
    events.push_back(close);
  };
  // The calling thread's first recorded work opens the first forward pass.
  if (forward_start == 0 || forward_start > bursts[0].first_ns) forward_start = bursts[0].first_ns;
  for (size_t k = 0; k < bursts.size(); ++k) {
    const Burst& b = bursts[k];
    if (b.first_ns > forward_start) add(kForwardId, forward_start, b.first_ns - 1);
    add(kBackwardId, b.first_ns, b.last_ns);
    forward_start = b.last_ns + 1;
    const uint64_t end = optimizer_end.empty() ? 0 : optimizer_end[k];
    if (end != 0) {
      add(kOptimizerId, b.last_ns + 1, end);
      forward_start = end + 1;
      ++out->optimizers_inferred;
    }
  }
  out->applied = true;
  out->backward_passes = bursts.size();
  out->reason = "no NVTX phases; inferred from the autograd thread (" + out->signal + ")";
  return events;
}

void AddInferredNames(DecodedStream* s) {
  s->strings[kInferredDomainId] = "";  // no domain, rather than an unknown id
  s->strings[kForwardId] = "forward";
  s->strings[kBackwardId] = "backward";
  s->strings[kOptimizerId] = "optimizer";
}

}  // namespace cumemtrace::internal
