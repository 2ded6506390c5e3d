#include "collector/engine/phases.h"

#include <algorithm>

namespace cumemtrace::internal {

int32_t PhaseTracker::PhaseIndex(uint32_t domain_id, uint32_t message_id, uint64_t ts) {
  if (const int32_t known = PhaseOf(domain_id, message_id); known >= 0) return known;
  // First time this id pair is seen: map its text through the rules, once.
  const bool inferred = domain_id == kInferredDomainId;
  const std::string range_name = stream_->RangeName(inferred ? 0 : domain_id, message_id);
  const PhaseRules::Mapping mapping =
      inferred ? PhaseRules::Mapping{range_name} : rules_->Map(range_name);
  const std::string phase_key = (mapping.rollup ? "@rollup:" : inferred ? "@inferred:" : "") +
                                mapping.phase;
  auto [named, inserted] = name_by_phase_.emplace(phase_key, static_cast<int32_t>(names_.size()));
  if (inserted) {
    PhaseName& name = names_.emplace_back();
    name.domain_id = domain_id;
    name.message_id = message_id;
    name.name = mapping.phase;
    name.rollup = mapping.rollup;
    name.iteration = mapping.iteration;
    name.inferred = inferred;
    name.first_open_ns = ts;
    for (std::vector<PhaseCounters>& slot : counters_) slot.resize(names_.size());
  }
  std::vector<std::string>& range_names = names_[static_cast<size_t>(named->second)].range_names;
  if (!inferred) AddOnce(range_names, range_name);
  name_index_.emplace(IdPair(domain_id, message_id), named->second);
  return named->second;
}

void PhaseTracker::Open(const Event& event, const std::vector<uint64_t>& in_use, uint64_t order) {
  const int32_t phase = PhaseIndex(event.aux_id, event.name_id, event.timestamp_ns);
  const bool rollup = names_[static_cast<size_t>(phase)].rollup;
  Occurrence& o = open_.emplace_back(Occurrence{
      OccurrenceRecord{phase, event.thread_id, event.timestamp_ns, 0, {}}, event, order, rollup});
  for (size_t s = 0; s < slots_ && !rollup; ++s) {
    o.record.levels.insert(o.record.levels.end(), {in_use[s], in_use[s], 0});
  }
}

bool PhaseTracker::Close(const Event& event, const std::vector<uint64_t>& in_use) {
  size_t best = open_.size();
  for (size_t i = 0; i < open_.size(); ++i) {
    const Occurrence& o = open_[i];
    if (Closes(event, o.opened) && (best == open_.size() || o.order > open_[best].order)) best = i;
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
  OccurrenceRecord& r = open_[open_index].record;
  PhaseName& name = names_[static_cast<size_t>(r.phase)];
  ++name.occurrences;
  name.total_ns += end_ns > r.start_ns ? end_ns - r.start_ns : 0;
  if (still_open) ++name.still_open;
  if (open_[open_index].rollup) {
    ++rolled_up_ranges_;
  } else {
    r.end_ns = end_ns;
    for (size_t s = 0; s < slots_; ++s) r.levels[3 * s + 2] = in_use[s];
    records_.push_back(std::move(r));
  }
  // Swap-remove: order is kept in Occurrence::order, not in the vector.
  if (open_index != open_.size() - 1) open_[open_index] = std::move(open_.back());
  open_.pop_back();
}

void PhaseTracker::AddSlot() {
  counters_.emplace_back(names_.size());
  ++slots_;
  for (Occurrence& o : open_) {
    if (!o.rollup) o.record.levels.resize(3 * slots_, 0);
  }
  for (OccurrenceRecord& r : records_) r.levels.resize(3 * slots_, 0);
}

void PhaseTracker::ReorderSlots(const std::vector<uint32_t>& new_slot) {
  std::vector<std::vector<PhaseCounters>> counters(slots_);
  for (size_t s = 0; s < slots_; ++s) counters[new_slot[s]].swap(counters_[s]);
  counters_.swap(counters);
  for (OccurrenceRecord& r : records_) {
    std::vector<uint64_t> moved(r.levels.size());
    for (size_t s = 0; s < slots_; ++s) {
      std::copy_n(r.levels.begin() + 3 * s, 3, moved.begin() + 3 * new_slot[s]);
    }
    r.levels.swap(moved);
  }
}

OccurrenceLists PhaseTracker::OccurrencesByPhase() const {
  OccurrenceLists by_phase(names_.size());
  for (const OccurrenceRecord& o : records_) by_phase[static_cast<size_t>(o.phase)].push_back(&o);
  for (auto& list : by_phase) {
    std::stable_sort(list.begin(), list.end(),
                     [](const auto* x, const auto* y) { return x->start_ns < y->start_ns; });
  }
  return by_phase;
}

void PhaseTracker::OnInUse(uint32_t slot, uint64_t in_use) {
  for (Occurrence& o : open_) {
    if (o.rollup) continue;
    uint64_t& peak = o.record.levels[3 * slot + 1];
    peak = std::max(peak, in_use);
  }
}

void PhaseTracker::Attribute(uint32_t thread_id, Attribution* out) const {
  out->innermost = -1;
  out->names.clear();
  // Own thread first; else the thread of the most recently opened range anywhere.
  const Occurrence* latest = nullptr;
  bool own = false;
  for (const Occurrence& o : open_) {
    if (o.rollup) continue;
    own = own || (thread_id != 0 && o.record.thread_id == thread_id);
    if (latest == nullptr || o.order > latest->order) latest = &o;
  }
  if (latest == nullptr) return;  // only per-op ranges are open, or none
  const uint32_t owner = own ? thread_id : latest->record.thread_id;
  const Occurrence* innermost = nullptr;
  for (const Occurrence& o : open_) {
    if (o.rollup || o.record.thread_id != owner) continue;
    if (innermost == nullptr || o.order > innermost->order) innermost = &o;
    AddOnce(out->names, o.record.phase);
  }
  out->innermost = innermost->record.phase;
}

}  // namespace cumemtrace::internal
