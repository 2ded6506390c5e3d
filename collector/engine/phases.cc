#include "collector/engine/phases.h"

#include <algorithm>

namespace cumemtrace::internal {

int32_t PhaseTracker::PhaseIndex(uint32_t domain_id, uint32_t message_id, uint64_t ts) {
  const uint64_t key = (static_cast<uint64_t>(domain_id) << 32) | message_id;
  auto it = name_index_.find(key);
  if (it != name_index_.end()) return it->second;
  // First time this id pair is seen: map its text through the rules, once.
  const std::string message = stream_->Resolve(message_id);
  const bool inferred = domain_id == kInferredDomainId;
  const std::string domain = inferred ? std::string() : stream_->Resolve(domain_id);
  const std::string range_name = domain.empty() ? message : domain + ": " + message;
  PhaseRules::Mapping mapping;
  if (inferred) {
    mapping.phase = message;
  } else {
    mapping = rules_->Map(range_name);
  }
  const std::string phase_key = (mapping.rollup ? "@rollup:" : inferred ? "@inferred:" : "") +
                                mapping.phase;
  auto [named, inserted] = name_by_phase_.emplace(phase_key, static_cast<int32_t>(names_.size()));
  if (inserted) {
    PhaseName name;
    name.domain_id = domain_id;
    name.message_id = message_id;
    name.name = mapping.phase;
    name.rollup = mapping.rollup;
    name.iteration = mapping.iteration;
    name.inferred = inferred;
    name.first_open_ns = ts;
    names_.push_back(std::move(name));
    counters_.resize(names_.size() * slots_);
  }
  std::vector<std::string>& range_names = names_[static_cast<size_t>(named->second)].range_names;
  if (!inferred && std::find(range_names.begin(), range_names.end(), range_name) ==
                       range_names.end()) {
    range_names.push_back(range_name);
  }
  name_index_.emplace(key, named->second);
  return named->second;
}

void PhaseTracker::Open(const Event& event, const std::vector<uint64_t>& in_use, uint64_t order) {
  const int32_t phase = PhaseIndex(event.aux_id, event.name_id, event.timestamp_ns);
  open_.push_back(Occurrence{phase, event.thread_id, event.aux_id,
                             event.nvtx_op == 1 /* PUSH */, event.a, order, event.timestamp_ns,
                             names_[static_cast<size_t>(phase)].rollup});
  for (int half = 0; half < 2; ++half) {
    windows_.insert(windows_.end(), in_use.begin(), in_use.end());
  }
}

bool PhaseTracker::Close(const Event& event, const std::vector<uint64_t>& in_use) {
  const bool is_pop = event.nvtx_op == 2;  // POP; otherwise END
  size_t best = open_.size();
  for (size_t i = 0; i < open_.size(); ++i) {
    const Occurrence& o = open_[i];
    const bool match = is_pop ? (o.is_push && o.thread_id == event.thread_id &&
                                 o.domain_id == event.aux_id)
                              : (!o.is_push && o.range_id == event.a);
    if (match && (best == open_.size() || o.order > open_[best].order)) best = i;
  }
  if (best == open_.size()) return false;
  Finish(best, event.timestamp_ns, false, in_use);
  return true;
}

void PhaseTracker::CloseAll(uint64_t end_ns, const std::vector<uint64_t>& in_use) {
  while (!open_.empty()) Finish(open_.size() - 1, end_ns, true, in_use);
}

void PhaseTracker::Finish(size_t open_index, uint64_t end_ns, bool still_open,
                          const std::vector<uint64_t>& in_use) {
  const Occurrence o = open_[open_index];
  PhaseName& name = names_[static_cast<size_t>(o.phase)];
  ++name.occurrences;
  name.total_ns += end_ns > o.start_ns ? end_ns - o.start_ns : 0;
  if (still_open) ++name.still_open;
  // data() + offset, not &windows_[i]: with no device slots the vector is empty (UBSan).
  const uint64_t* entry = windows_.data() + open_index * 2 * slots_;
  const uint64_t* peak = entry + slots_;
  if (o.rollup) {
    ++rolled_up_ranges_;
  } else {
    std::vector<uint64_t> levels(3 * slots_);
    for (size_t s = 0; s < slots_; ++s) {
      levels[3 * s] = entry[s];
      levels[3 * s + 1] = peak[s];
      levels[3 * s + 2] = in_use[s];
    }
    records_.push_back(OccurrenceRecord{o.phase, o.thread_id, o.start_ns, end_ns, std::move(levels)});
  }
  // Swap-remove: order is kept in Occurrence::order, not in the vector.
  const size_t last = open_.size() - 1;
  if (open_index != last) {
    open_[open_index] = open_[last];
    std::copy_n(windows_.begin() + static_cast<std::ptrdiff_t>(last * 2 * slots_), 2 * slots_,
                windows_.begin() + static_cast<std::ptrdiff_t>(open_index * 2 * slots_));
  }
  open_.pop_back();
  windows_.resize(open_.size() * 2 * slots_);
}

void PhaseTracker::AddSlot() {
  const size_t old = slots_, now = slots_ + 1;
  std::vector<PhaseCounters> counters(names_.size() * now);
  for (size_t p = 0; p < names_.size(); ++p) {
    std::copy_n(counters_.begin() + static_cast<std::ptrdiff_t>(p * old), old,
                counters.begin() + static_cast<std::ptrdiff_t>(p * now));
  }
  counters_.swap(counters);
  std::vector<uint64_t> windows(open_.size() * 2 * now, 0);
  for (size_t i = 0; i < open_.size() * 2; ++i) {
    std::copy_n(windows_.begin() + static_cast<std::ptrdiff_t>(i * old), old,
                windows.begin() + static_cast<std::ptrdiff_t>(i * now));
  }
  windows_.swap(windows);
  for (OccurrenceRecord& r : records_) r.levels.resize(3 * now, 0);
  slots_ = now;
}

void PhaseTracker::ReorderSlots(const std::vector<uint32_t>& new_slot) {
  std::vector<PhaseCounters> counters(counters_.size());
  for (size_t p = 0; p < names_.size(); ++p) {
    for (size_t s = 0; s < slots_; ++s) counters[p * slots_ + new_slot[s]] = counters_[p * slots_ + s];
  }
  counters_.swap(counters);
  for (OccurrenceRecord& r : records_) {
    std::vector<uint64_t> moved(r.levels.size());
    for (size_t s = 0; s < slots_; ++s) {
      for (size_t i = 0; i < 3; ++i) moved[3 * new_slot[s] + i] = r.levels[3 * s + i];
    }
    r.levels.swap(moved);
  }
}

void PhaseTracker::OnInUse(uint32_t slot, uint64_t in_use) {
  for (size_t i = 0; i < open_.size(); ++i) {
    uint64_t& peak = windows_[i * 2 * slots_ + slots_ + slot];
    peak = std::max(peak, in_use);
  }
}

void PhaseTracker::Attribute(uint32_t thread_id, Attribution* out) const {
  out->innermost = -1;
  out->names.clear();
  if (open_.empty()) return;
  // Own thread first; else the thread of the most recently opened range anywhere.
  uint32_t owner = 0;
  bool found = false;
  if (thread_id != 0) {
    for (const Occurrence& o : open_) {
      if (!o.rollup && o.thread_id == thread_id) {
        found = true;
        owner = thread_id;
        break;
      }
    }
  }
  if (!found) {
    const Occurrence* latest = nullptr;
    for (const Occurrence& o : open_) {
      if (!o.rollup && (latest == nullptr || o.order > latest->order)) latest = &o;
    }
    if (latest == nullptr) return;  // only per-op ranges are open
    owner = latest->thread_id;
  }
  uint64_t best_order = 0;
  for (const Occurrence& o : open_) {
    if (o.rollup || o.thread_id != owner) continue;
    if (out->innermost < 0 || o.order > best_order) {
      best_order = o.order;
      out->innermost = o.phase;
    }
    if (std::find(out->names.begin(), out->names.end(), o.phase) == out->names.end()) {
      out->names.push_back(o.phase);
    }
  }
}

}  // namespace cumemtrace::internal
