#include "collector/engine/failed_allocations.h"

#include "collector/engine/accountant.h"

namespace cumemtrace::internal {

constexpr int32_t kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY (and cudaErrorMemoryAllocation)

void FailedAllocationLog::OnMemoryEvent(const Event& e) {
  if (e.thread_id == 0 || pending_.empty()) return;
  auto it = pending_.find(e.thread_id);
  if (it == pending_.end()) return;
  Failure& f = failures_[it->second];
  f.retried = e.type == EventType::kAllocate && e.device == f.event.device && e.b >= f.event.a;
  pending_.erase(it);
}

void FailedAllocationLog::OnFailed(const Event& e, uint32_t slot, const Attribution& at,
                                   uint64_t in_use) {
  failures_.push_back(Failure{e, slot, in_use, at});
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
    if (f.retried) {
      p->driver_retries.push_back(std::move(r));
      continue;
    }
    for (int32_t phase : f.at.names) ++phases->counters(phase, f.slot).failed_allocations;
    p->failed_allocations.push_back(std::move(r));
  }
}

}  // namespace cumemtrace::internal
