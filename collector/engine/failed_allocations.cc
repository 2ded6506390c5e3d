#include "collector/engine/failed_allocations.h"

#include <algorithm>
#include <tuple>

#include "collector/engine/accountant.h"
#include "collector/engine/stacks.h"

namespace cumemtrace::internal {

constexpr int32_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY (and cudaErrorMemoryAllocation)

namespace {

// Largest first (ties: by name), at most `top` when not 0.
std::vector<HeldGroup> Ordered(std::vector<HeldGroup> groups, size_t top) {
  std::sort(groups.begin(), groups.end(), [](const HeldGroup& x, const HeldGroup& y) {
    return std::tie(y.bytes, x.name) < std::tie(x.bytes, y.name);
  });
  if (top != 0 && groups.size() > top) groups.resize(top);
  return groups;
}

constexpr size_t kTopStacks = 10;
constexpr size_t kTopHolders = 10;

}  // namespace

void FailedAllocationLog::NameHeld(const Failure& f, const DecodedStream& s,
                                   const PhaseTracker& phases, uint64_t first, OomPostMortem* pm) {
  std::vector<HeldGroup> groups;
  for (const auto& [phase, g] : f.by_phase) {
    groups.push_back(g);
    groups.back().name = phases.NameOf(phase);
  }
  pm->held_by_phase = Ordered(std::move(groups), 0);
  groups.clear();
  for (const auto& [kind, g] : f.by_kind) {
    groups.push_back(g);
    groups.back().name = MemoryKindName(kind);
  }
  pm->held_by_kind = Ordered(std::move(groups), 0);
  groups.clear();
  for (const auto& [caller, g] : f.by_library) {
    groups.push_back(g);
    groups.back().name = BaseName(s.Resolve(caller));
  }
  pm->held_by_library = Ordered(std::move(groups), 0);
  groups.clear();
  std::vector<std::pair<uint32_t, HeldGroup>> stacks;
  for (const auto& [id, g] : f.by_stack) {
    if (id != 0) stacks.emplace_back(id, g);
  }
  std::sort(stacks.begin(), stacks.end(), [](const auto& x, const auto& y) {
    return std::tie(y.second.bytes, x.first) < std::tie(x.second.bytes, y.first);
  });
  if (stacks.size() > kTopStacks) stacks.resize(kTopStacks);
  StackResolver resolver(s);  // symbolizes nothing until a stack is resolved
  for (auto& [id, g] : stacks) {
    g.name = resolver.UserFrameText(resolver.Resolve(id));
    pm->held_by_stack.push_back(g);
  }
  for (const HeldAllocation& a : f.largest) {
    HeldBlock& b = pm->largest_held.emplace_back(Holder(a, s, phases, first));
    if (a.stack_id != 0) b.stack = resolver.UserFrameText(resolver.Resolve(a.stack_id));
  }
}

HeldBlock FailedAllocationLog::Holder(const HeldAllocation& a, const DecodedStream& s,
                                      const PhaseTracker& phases, uint64_t first) {
  HeldBlock b;
  b.address = a.address;
  b.bytes = a.bytes;
  b.time_ns = Since(first, a.birth_ns);
  b.phase = phases.NameOf(a.phase);
  b.kind = MemoryKindName(a.kind);
  b.library = a.caller_id == 0 ? std::string() : BaseName(s.Resolve(a.caller_id));
  return b;
}

void FailedAllocationLog::OnMemoryEvent(const Event& e) {
  if (e.thread_id == 0 || pending_.empty()) return;
  auto it = pending_.find(e.thread_id);
  if (it == pending_.end()) return;
  Failure& f = failures_[it->second];
  f.retried = e.type == EventType::kAllocate && e.device == f.event.device && e.b >= f.event.a;
  pending_.erase(it);
}

void FailedAllocationLog::OnFailed(const DecodedStream& s, const Event& e, uint32_t slot,
                                   const Attribution& at, uint64_t in_use,
                                   const std::vector<HeldAllocation>& live) {
  Failure& f = failures_.emplace_back();
  f.event = e;
  f.slot = slot;
  f.in_use = in_use;
  f.at = at;
  // Host memory (pinned, managed, pageable) fails for reasons the device's state does not say.
  const bool host = e.kind == 1 || e.kind == 2 || e.kind == 5;
  if (!host) FillCachePostMortem(s, e, live, &f.post_mortem);
  for (const HeldAllocation& a : live) {
    f.post_mortem.held_bytes += a.bytes;
    for (HeldGroup* g : {&f.by_phase[a.phase], &f.by_kind[a.kind], &f.by_library[a.caller_id],
                         &f.by_stack[a.stack_id]}) {
      g->bytes += a.bytes;
      ++g->count;
    }
    const auto category = static_cast<uint8_t>(a.category & ~kFromObjects);
    if (category != 0) {
      HeldGroup& g = f.by_category[category];
      g.bytes += a.bytes;
      ++g.count;
    }
  }
  // The largest holders, ties by address: the category pass finds the same ones.
  f.largest = live;
  auto larger = [](const HeldAllocation& x, const HeldAllocation& y) {
    return std::tie(y.bytes, x.address) < std::tie(x.bytes, y.address);
  };
  if (f.largest.size() > kTopHolders) {
    std::partial_sort(f.largest.begin(), f.largest.begin() + kTopHolders, f.largest.end(), larger);
    f.largest.resize(kTopHolders);
  } else {
    std::sort(f.largest.begin(), f.largest.end(), larger);
  }
  if (e.thread_id != 0 && e.code != kOutOfMemory) pending_[e.thread_id] = failures_.size() - 1;
}

void FailedAllocationLog::Finish(const DecodedStream& s, uint64_t first, PhaseTracker* phases,
                                 ProcessReport* p) {
  for (const Failure& f : failures_) {
    const Event& e = f.event;
    FailedAllocationReport r;
    r.time_ns = Since(first, e.timestamp_ns);
    r.time_abs_ns = e.timestamp_ns;
    r.api = s.Resolve(e.name_id);
    r.requested_bytes = e.a;
    r.error_code = e.code;
    r.error_name = s.Resolve(e.aux_id);
    r.kind = MemoryKindName(e.kind);
    r.device = e.device;
    r.device_free_bytes = e.b;
    r.device_total_bytes = e.c;
    r.thread_id = e.thread_id;
    r.caller = s.Resolve(e.caller_id);
    r.phase = phases->NameOf(f.at.innermost);
    r.device_in_use_bytes = f.in_use;
    r.post_mortem = f.post_mortem;
    if (e.kind == kTorchAllocatedKind) {
      // The allocator's OOM says nothing of the device's total: its DeviceInfo does.
      auto info = s.device_info.find(e.device);
      r.device_total_bytes = info == s.device_info.end() ? 0 : info->second.total_memory_bytes;
    }
    NameHeld(f, s, *phases, first, &r.post_mortem);
    if (f.retried) {
      p->driver_retries.push_back(std::move(r));
      continue;
    }
    for (int32_t phase : f.at.names) ++phases->counters(phase, f.slot).failed_allocations;
    p->failed_allocations.push_back(std::move(r));
  }
}

void FailedAllocationLog::FillCategories(ProcessReport* p) const {
  size_t seen = 0, retried = 0;
  for (const Failure& f : failures_) {
    std::vector<FailedAllocationReport>& list =
        f.retried ? p->driver_retries : p->failed_allocations;
    size_t& at = f.retried ? retried : seen;
    if (at >= list.size()) return;  // not the same failures: leave them without categories
    OomPostMortem& pm = list[at++].post_mortem;
    pm.categories_given = true;
    pm.held_tensor_bytes = 0;
    std::vector<HeldGroup> groups;
    for (const auto& [category, g] : f.by_category) {
      groups.push_back(g);
      groups.back().name = CategoryName(category);
      pm.held_tensor_bytes += g.bytes;
    }
    pm.held_by_category = Ordered(std::move(groups), 0);
    for (size_t i = 0; i < f.largest.size() && i < pm.largest_held.size(); ++i) {
      const uint8_t code = f.largest[i].category;
      const auto category = static_cast<uint8_t>(code & ~kFromObjects);
      if (category == 0 || pm.largest_held[i].address != f.largest[i].address) continue;
      pm.largest_held[i].category = CategoryName(category);
      pm.largest_held[i].category_from_objects = (code & kFromObjects) != 0;
    }
  }
}

}  // namespace cumemtrace::internal
