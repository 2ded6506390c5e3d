// Internal: NVTX range reconstruction and attribution (design.md "Phases"), driven by the
// process sweep one event at a time in time order. Keeps only the open occurrences (the
// nesting depth is small), so the cost is O(events x open ranges).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/phase_rules.h"

namespace cumemtrace::internal {

// A phase: one canonical name (after the rules), possibly several range names.
struct PhaseName : PhaseCounts {
  uint32_t domain_id = 0;  // interned ids of the first range seen
  uint32_t message_id = 0;
  bool rollup = false;         // per-op ranges: never reported, never attributed
  uint64_t first_open_ns = 0;  // absolute
};

// One finished occurrence of a reported phase, with device memory in use (per slot) at its
// entry, its highest point inside, and at its exit: the raw material of iteration statistics.
struct OccurrenceRecord {
  int32_t phase;
  uint32_t thread_id;
  uint64_t start_ns;
  uint64_t end_ns;
  // Per slot: entry, peak, exit. One allocation per record: a long run has one record per
  // phase per iteration.
  std::vector<uint64_t> levels;
  uint64_t entry(size_t slot) const { return levels[3 * slot]; }
  uint64_t peak(size_t slot) const { return levels[3 * slot + 1]; }
  uint64_t exit(size_t slot) const { return levels[3 * slot + 2]; }
};

// Occurrences grouped by phase (index in PhaseTracker::names()), each group by start.
using OccurrenceLists = std::vector<std::vector<const OccurrenceRecord*>>;

// Domain id of ranges that phase inference synthesizes (never a real interned id).
constexpr uint32_t kInferredDomainId = 0xFFFFFFF0u;

// Whether the range close `close` (a pop or an end) matches the opening `open`: a pop closes a
// push of its thread and domain, an end the start with its id. It closes the most recent match.
inline bool Closes(const Event& close, const Event& open) {
  if (close.nvtx_op == 2) {  // POP
    return open.nvtx_op == 1 && open.thread_id == close.thread_id && open.aux_id == close.aux_id;
  }
  return open.nvtx_op != 1 && open.a == close.a;  // END: a START with its range id
}

// The phases an event is attributed to: `innermost` is its phase of origin, `names` every
// phase name counted for it (innermost and enclosing ranges on the same thread, each once).
struct Attribution {
  int32_t innermost = -1;
  std::vector<int32_t> names;
};

class PhaseTracker {
 public:
  // `stream` resolves interned ids, so that two ids naming the same string are one phase.
  PhaseTracker(size_t device_slots, const DecodedStream* stream, const PhaseRules* rules)
      : slots_(device_slots), stream_(stream), rules_(rules), counters_(device_slots) {}

  // in_use: device memory in use per slot at this instant.
  void Open(const Event& event, const std::vector<uint64_t>& in_use, uint64_t order);
  // False when nothing matched (pop on an empty stack, end of an unknown id).
  bool Close(const Event& event, const std::vector<uint64_t>& in_use);
  // Closes everything still open at `end_ns`, flagging those occurrences.
  void CloseAll(uint64_t end_ns, const std::vector<uint64_t>& in_use);
  // Device memory in use on `slot` rose to `in_use`: raise the peaks of open occurrences.
  void OnInUse(uint32_t slot, uint64_t in_use);
  // Fills *out for an event on `thread_id` (0: unknown thread) at the current instant.
  void Attribute(uint32_t thread_id, Attribution* out) const;

  PhaseCounters& counters(int32_t phase, uint32_t slot) {
    return counters_[slot][static_cast<size_t>(phase)];
  }
  const PhaseCounters& counters(int32_t phase, uint32_t slot) const {
    return counters_[slot][static_cast<size_t>(phase)];
  }
  // The streaming sweep meets devices as it goes: a new slot starts at zero everywhere.
  void AddSlot();
  // Once everything is closed: slot s becomes new_slot[s] (a permutation).
  void ReorderSlots(const std::vector<uint32_t>& new_slot);
  const std::vector<PhaseName>& names() const { return names_; }
  // The name of a phase index; "" for -1 (none).
  std::string NameOf(int32_t phase) const {
    return phase < 0 ? std::string() : names_[static_cast<size_t>(phase)].name;
  }
  // The phase of ranges opened with these ids (through the rules); -1 if none was opened.
  int32_t PhaseOf(uint32_t domain_id, uint32_t message_id) const {
    auto it = name_index_.find(IdPair(domain_id, message_id));
    return it == name_index_.end() ? -1 : it->second;
  }
  const PhaseRules* rules() const { return rules_; }
  const std::vector<OccurrenceRecord>& occurrences() const { return records_; }
  // occurrences() per phase (index in names()), each list by start; ties in closing order.
  OccurrenceLists OccurrencesByPhase() const;
  uint64_t rolled_up_ranges() const { return rolled_up_ranges_; }

 private:
  // An open occurrence: its record (levels: entry and the peak so far, per slot) and how a
  // close finds it. Per-op ranges have no levels: they are never recorded.
  struct Occurrence {
    OccurrenceRecord record;  // record.thread_id: its stack, for nesting and attribution
    Event opened;
    uint64_t order;  // opening order, larger is more recent
    bool rollup;
  };

  static uint64_t IdPair(uint32_t domain_id, uint32_t message_id) {
    return (static_cast<uint64_t>(domain_id) << 32) | message_id;
  }
  int32_t PhaseIndex(uint32_t domain_id, uint32_t message_id, uint64_t ts);
  void Finish(size_t open_index, uint64_t end_ns, bool still_open,
              const std::vector<uint64_t>& in_use);

  size_t slots_;
  const DecodedStream* stream_;
  const PhaseRules* rules_;
  std::vector<PhaseName> names_;
  std::unordered_map<uint64_t, int32_t> name_index_;  // by (domain id, message id)
  std::map<std::string, int32_t> name_by_phase_;      // by canonical name (or rollup key)
  std::vector<OccurrenceRecord> records_;
  uint64_t rolled_up_ranges_ = 0;
  std::vector<std::vector<PhaseCounters>> counters_;  // [slot][phase]
  std::vector<Occurrence> open_;
};

}  // namespace cumemtrace::internal
