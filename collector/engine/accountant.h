// Internal: the one accounting of a process. Its events come in one at a time, in the order
// of event_order.h; the Accountant keeps the device slots, the live set and each device's
// peak, per-kind figures, phases (PhaseTracker), origin groups and failed allocations, and
// at the end writes the ProcessReport, and with Retention::kKeepAll the timeline.
//
// What it keeps of the allocations is its retention policy, and nothing else depends on it:
//   kLiveAndPeak - an allocation only while it is live, or while it was live at its device's
//                  current peak: memory follows the live set, not the trace (`report`);
//   kKeepAll     - every allocation and every event: lifetime rows and timelines (exports,
//                  the viewer), as large as the trace.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/engine/address_map.h"
#include "collector/engine/decoded_stream.h"
#include "collector/engine/engine.h"
#include "collector/engine/failed_allocations.h"
#include "collector/engine/phase_inference.h"
#include "collector/engine/phases.h"
#include "collector/engine/report.h"

namespace cumemtrace::internal {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
// "DEVICE", "PINNED", ... for a v1::MemoryKind value.
const char* MemoryKindName(uint8_t kind);

enum class Retention { kLiveAndPeak, kKeepAll };

// The most a process's analysis held at once: what the memory bound is made of.
struct StreamingStats {
  uint64_t max_window_events = 0;  // events waiting in the reorder window
  uint64_t max_runs = 0;           // sorted runs the window was split into
  uint64_t max_live = 0;           // live allocations
  uint64_t max_kept_at_peak = 0;   // freed allocations kept because live at the peak
  uint64_t max_lateness_ns = 0;    // newest timestamp seen minus an arriving event's
};

struct Allocation {
  uint64_t address;
  uint64_t bytes;
  uint64_t birth_pos;  // sweep position (events swept before it) of the allocating event
  uint64_t birth_ns;   // absolute
  uint32_t slot;       // device slot
  int32_t phase;       // phase of origin (innermost attributed range), -1 for none
  uint32_t stream;
  uint32_t api_id;
  uint32_t caller_id;  // calling module, 0 when not looked up
  uint32_t thread_id;
  uint32_t stack_id;  // wire stack id (`run --stacks`), 0 when none
  uint8_t kind;
  uint64_t death_pos = kNever;     // of the releasing event; kNever while live
  uint64_t death_ns = 0;           // absolute; meaningless while live
  int32_t death_phase = -1;        // phase it was freed in, -1 for none (or never freed)
  uint32_t group[2] = {~0u, ~0u};  // origin groups (by API, by calling module) of device memory
  uint8_t lifetime_class = 0;      // LifetimeClass, set at the end (kKeepAll) or at the peak
  // kKeepAll, device memory: its birth's and death's steps in the device's timeline.
  uint32_t birth_step = kNoStep;
  uint32_t death_step = kNoStep;
};

struct DeviceCounters {
  uint64_t in_use = 0;  // DEVICE + ARRAY live bytes
  uint64_t peak = 0;
  uint64_t peak_pos = kNever;
  uint64_t peak_ns = 0;
  std::array<uint64_t, kMemoryKinds> kind_live{};
  std::array<KindStats, kMemoryKinds> kinds{};
  // The figures counted as the report gives them: kernels, reallocated live addresses and
  // not_program's static peak and unknown releases.
  DeviceReport report;
  // TORCH_RESERVED live when TORCH_ALLOCATED last reached its peak.
  uint64_t torch_reserved_at_allocated_peak = 0;
  // kKeepAll: the device's counter series, a step at each birth and death as swept (absolute
  // times until Finish).
  DeviceTimeline timeline;
};

class Accountant {
 public:
  // `stream` resolves interned ids for the phases; `stats` receives the bounds held.
  Accountant(const AnalysisOptions& options, Retention retention, const PhaseRules* rules,
             const DecodedStream* stream, StreamingStats* stats);

  // For the last pass of a process whose phases are inferred: the outcome and the ranges,
  // swept among the events, after those of the same key.
  void SetInferred(const PhaseInferenceReport& outcome, std::vector<Event> ranges);

  // The next event in the sweep's order (its tie rank in Event::pad).
  void Sweep(const Event& e) {
    while (next_synthetic_ < synthetic_.size() && KeyBefore(synthetic_[next_synthetic_], e)) {
      SweepOne(synthetic_[next_synthetic_++]);
    }
    SweepOne(e);
  }

  // The report, once every event was swept; `events` and `late_events` are the order's
  // counts. With kKeepAll and `timeline`, also the timeline.
  ProcessReport Finish(DecodedStream& s, uint64_t events, uint64_t late_events,
                       ProcessTimeline* timeline);
  // After Finish(): the phases can be inferred, and need passes 2 and 3 (the outcome so far).
  bool needs_inference() const { return needs_inference_; }
  const PhaseInferenceReport& inference() const { return inference_; }

  // The sweep's order: time, then the tie rule of design.md (Event::pad); arrival breaks the
  // remaining ties.
  static bool KeyBefore(const Event& x, const Event& y) {
    return std::tie(x.timestamp_ns, x.pad) < std::tie(y.timestamp_ns, y.pad);
  }

 private:
  struct Group {
    uint32_t slot;
    uint32_t id;
    OriginStats stats;
    uint64_t live = 0;
  };

  void SweepOne(const Event& e);
  uint32_t SlotOf(uint32_t device);
  uint32_t GroupOf(int which, uint32_t slot, uint32_t id);
  uint32_t NewLive();
  void Die(uint32_t index, uint64_t ts, int32_t death_phase);
  uint32_t TimelineStep(const Allocation& a, uint64_t ts);
  void Forget(uint32_t index);
  void Allocate(const Event& e, uint32_t slot);
  void Release(const Event& e, uint32_t slot);

  const AnalysisOptions& options_;
  const Retention retention_;
  StreamingStats& stats_;
  const DecodedStream* stream_;  // the post-mortem of a failure reads its allocator events
  bool needs_inference_ = false;
  bool scan_inference_;

  std::vector<Event> synthetic_;  // inferred phase ranges, sorted
  size_t next_synthetic_ = 0;
  bool inferred_ = false;
  PhaseInferenceReport inference_;
  InferenceScan inference_scan_;

  PhaseTracker phases_;
  Attribution attribution_;
  uint64_t pos_ = 0;
  bool any_ = false;
  uint64_t first_ = 0;
  uint64_t last_ = 0;
  std::vector<uint32_t> slot_device_;  // device index of each slot, in order of first sight
  std::vector<uint32_t> direct_slot_;  // device index -> slot + 1 (0: none), small indices
  std::unordered_map<uint32_t, uint32_t> far_slot_;
  std::vector<DeviceCounters> devices_;
  std::vector<uint64_t> in_use_;
  AddressMap live_;  // (slot, address) -> index in pool_
  // kLiveAndPeak: live allocations, slots reused. kKeepAll: every allocation, in birth order.
  std::vector<Allocation> pool_;
  std::vector<uint32_t> free_;
  uint64_t live_count_ = 0;
  std::vector<std::vector<Allocation>> freed_at_peak_;  // per slot: freed, but live at its peak
  uint64_t kept_at_peak_ = 0;
  std::vector<Group> groups_[2];
  std::unordered_map<uint64_t, uint32_t> group_index_[2];
  // The last group of each table and its key (all ones: none; no slot is numbered 2^32 - 1).
  uint64_t last_group_key_[2] = {~uint64_t{0}, ~uint64_t{0}};
  uint32_t last_group_[2] = {0, 0};
  FailedAllocationLog failed_;
  uint64_t nvtx_marks_ = 0;
  uint64_t unmatched_range_closes_ = 0;
  std::vector<Event> swept_;  // kKeepAll: every event, as swept
};

class EventOrder;
struct StreamingOptions;
// An order (event_order.h) that feeds `accountant`. Made here so that the order's loop and
// the sweep are compiled together: the sweep's per-event code is inlined into it.
std::unique_ptr<EventOrder> OrderFor(bool sorted, const StreamingOptions& streaming,
                                     Accountant* accountant, StreamingStats* stats);

// A timestamp moved onto CLOCK_REALTIME by the handshake's clock pair (0, unknown, stays 0).
inline uint64_t ToRealtime(int64_t offset, uint64_t t) {
  return t == 0 ? t : static_cast<uint64_t>(static_cast<int64_t>(t) + offset);
}
inline void ShiftEventToRealtime(int64_t offset, Event* e) {
  e->timestamp_ns = ToRealtime(offset, e->timestamp_ns);
  if (e->type == EventType::kKernel) e->a = ToRealtime(offset, e->a);  // its end
}

}  // namespace cumemtrace::internal
