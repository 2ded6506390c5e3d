#include "collector/engine/phase_inference.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "collector/engine/phases.h"
#include "collector/engine/timeline.h"

namespace cumemtrace::internal {
namespace {

// Synthetic string ids for the inferred phase names (real ids count up from 1).
constexpr uint32_t kForwardId = 0xFFFFFFF1u;
constexpr uint32_t kBackwardId = 0xFFFFFFF2u;
constexpr uint32_t kOptimizerId = 0xFFFFFFF3u;

struct Burst {
  uint64_t first_ns;
  uint64_t last_ns;
};

bool IsAutograd(const std::vector<uint32_t>& threads, uint32_t tid) {
  return std::find(threads.begin(), threads.end(), tid) != threads.end();
}

// Maximal runs of autograd-thread points not interrupted by a calling-thread point.
std::vector<Burst> FindBursts(const std::vector<std::pair<uint64_t, bool>>& points) {
  std::vector<Burst> bursts;
  bool open = false;
  for (const auto& [ts, autograd] : points) {
    if (autograd) {
      if (!open) bursts.push_back(Burst{ts, ts});
      bursts.back().last_ns = ts;
      open = true;
    } else {
      open = false;
    }
  }
  return bursts;
}

void AddRange(std::vector<Event>* events, uint32_t message_id, uint32_t thread, uint64_t range_id,
              uint64_t begin_ns, uint64_t end_ns) {
  Event open{};
  open.type = EventType::kRangeOpen;
  open.timestamp_ns = begin_ns;
  open.thread_id = thread;
  open.name_id = message_id;
  open.aux_id = kInferredDomainId;
  open.nvtx_op = 3;  // START: ranges pair by id, whatever the thread stacks hold
  open.a = range_id;
  Event close = open;
  close.type = EventType::kRangeClose;
  close.timestamp_ns = end_ns;
  close.name_id = 0;
  close.nvtx_op = 4;  // END
  events->push_back(open);
  events->push_back(close);
}

}  // namespace

InferenceOutcome InferTrainingPhases(DecodedStream* s, const PhaseRules& rules) {
  InferenceOutcome out;
  for (const auto& [tid, name] : s->thread_names) {
    if (name.rfind("pt_autograd", 0) == 0) out.autograd_threads.push_back(tid);
  }
  if (out.autograd_threads.empty()) {
    out.reason = "no autograd worker thread (pt_autograd_*) in this process";
    return out;
  }
  std::unordered_map<uint32_t, uint64_t> memory_events_by_thread;
  for (const Event& e : s->events) {
    if (e.type == EventType::kRangeOpen) {
      const std::string message = s->Resolve(e.name_id);
      const std::string domain = s->Resolve(e.aux_id);
      const std::string phase =
          rules.Map(domain.empty() ? message : domain + ": " + message).phase;
      if (phase == "forward" || IsBackwardLikePhase(phase) || IsOptimizerLikePhase(phase)) {
        out.reason = "the program labels its phases with NVTX (" + phase + ")";
        return out;
      }
    }
    if ((e.type == EventType::kAllocate || e.type == EventType::kRelease) &&
        IsDeviceMemory(e.kind) && !IsAutograd(out.autograd_threads, e.thread_id) &&
        e.thread_id != 0) {
      ++memory_events_by_thread[e.thread_id];
    }
  }
  uint64_t most = 0;
  for (const auto& [tid, n] : memory_events_by_thread) {
    if (n > most) {
      most = n;
      out.calling_thread = tid;
    }
  }
  if (out.calling_thread == 0) {
    out.reason = "no calling thread with device memory activity";
    return out;
  }

  // Bursts from memory events (host time) when the autograd thread allocates in most
  // passes (async allocator); else from kernels (the caching allocator reuses its blocks).
  std::vector<std::pair<uint64_t, bool>> memory_points, kernel_points;
  for (const Event& e : s->events) {
    const bool autograd = IsAutograd(out.autograd_threads, e.thread_id);
    if (!autograd && e.thread_id != out.calling_thread) continue;
    if ((e.type == EventType::kAllocate || e.type == EventType::kRelease) &&
        IsDeviceMemory(e.kind)) {
      memory_points.emplace_back(e.timestamp_ns, autograd);
    } else if (e.type == EventType::kKernel) {
      kernel_points.emplace_back(e.timestamp_ns, autograd);
    }
  }
  std::vector<Burst> bursts = FindBursts(memory_points);
  out.signal = "memory";
  const std::vector<Burst> kernel_bursts = FindBursts(kernel_points);
  if (kernel_bursts.size() > bursts.size()) {
    bursts = kernel_bursts;
    out.signal = "kernels";
  }
  if (bursts.empty()) {
    out.reason = "the autograd thread did no work that was recorded";
    return out;
  }

  // Gradients: memory born on the autograd thread during burst k and freed after it, before
  // the next one. The optimizer of iteration k ends with the last such free. Memory that is
  // never freed (a library's workspace made by the first backward pass) is not a gradient.
  std::vector<uint64_t> optimizer_end(bursts.size(), 0);
  if (out.signal == "memory") {
    std::unordered_map<uint64_t, size_t> born_in_burst;  // (device, address) -> burst
    size_t burst = 0;
    for (const Event& e : s->events) {
      if ((e.type != EventType::kAllocate && e.type != EventType::kRelease) ||
          !IsDeviceMemory(e.kind)) {
        continue;
      }
      while (burst < bursts.size() && bursts[burst].last_ns < e.timestamp_ns) ++burst;
      const uint64_t key = e.a ^ (static_cast<uint64_t>(e.device) << 56);
      if (e.type == EventType::kAllocate) {
        // Allocated by the autograd thread inside a burst: a candidate gradient.
        if (burst < bursts.size() && e.timestamp_ns >= bursts[burst].first_ns &&
            IsAutograd(out.autograd_threads, e.thread_id)) {
          born_in_burst[key] = burst;
        }
        continue;
      }
      auto it = born_in_burst.find(key);
      if (it == born_in_burst.end()) continue;
      const size_t k = it->second;
      born_in_burst.erase(it);
      // Freed inside its own burst: a temporary of the backward pass, not a gradient.
      if (e.timestamp_ns <= bursts[k].last_ns) continue;
      if (k + 1 == bursts.size() || e.timestamp_ns < bursts[k + 1].first_ns) {
        optimizer_end[k] = std::max(optimizer_end[k], e.timestamp_ns);
      }
    }
  }

  // The calling thread's first recorded work opens the first forward pass.
  uint64_t forward_start = 0;
  for (const auto& [ts, autograd] : memory_points) {
    if (!autograd) {
      forward_start = ts;
      break;
    }
  }
  if (forward_start == 0 || forward_start > bursts[0].first_ns) forward_start = bursts[0].first_ns;

  uint64_t range_id = 0xFFFF000000000000ull;
  for (size_t k = 0; k < bursts.size(); ++k) {
    const Burst& b = bursts[k];
    if (b.first_ns > forward_start) {
      AddRange(&s->events, kForwardId, out.calling_thread, range_id++, forward_start,
               b.first_ns - 1);
    }
    AddRange(&s->events, kBackwardId, out.calling_thread, range_id++, b.first_ns, b.last_ns);
    forward_start = b.last_ns + 1;
    if (optimizer_end[k] != 0) {
      AddRange(&s->events, kOptimizerId, out.calling_thread, range_id++, b.last_ns + 1,
               optimizer_end[k]);
      forward_start = optimizer_end[k] + 1;
      ++out.optimizers_inferred;
    }
  }
  s->strings[kForwardId] = "forward";
  s->strings[kBackwardId] = "backward";
  s->strings[kOptimizerId] = "optimizer";
  out.applied = true;
  out.backward_passes = bursts.size();
  out.reason = "no NVTX phases; inferred from the autograd thread (" + out.signal + ")";
  return out;
}

}  // namespace cumemtrace::internal
