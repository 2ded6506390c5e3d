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
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/engine/address_map.h"
#include "collector/engine/decoded_stream.h"
#include "collector/engine/engine.h"
#include "collector/engine/failed_allocations.h"
#include "collector/engine/iterations.h"
#include "collector/engine/lifetimes.h"
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
  uint8_t tag = 0;                 // the highest-priority v1::Category a tag gave it, 0: none
  // Its category byte (lifetimes.h): in the category pass, of a tensor allocation (0: not
  // one); with kKeepAll, set at the end.
  uint8_t category = 0;
  uint32_t ordinal = 0;  // device memory: its place among the process's device allocations
  uint32_t attribution = 0;  // a tensor: index into AttributionDecode::births (0: none)
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

// Which of a device's allocations are its tensor allocations (the ones with categories).
enum class TensorLayer : uint8_t {
  kTorchAllocated,  // the bridge's blocks (TORCH_ALLOCATED)
  kAsync,           // device memory from a stream-ordered allocation (cudaMallocAsync)
  kDevice,          // every device allocation (no PyTorch allocator seen)
};

// The two passes that give categories (docs/design.md), after the last accounting sweep:
//   kClassify - every device allocation's final category (its tag, else inferred with the
//               previous sweep's phases and iterations) into one byte by ordinal;
//   kApply    - with those bytes known at each birth, the bytes of each category at the
//               tensor and device peaks, at the end, and each category's own peak.
enum class CategoryPass : uint8_t { kNone, kClassify, kApply };

// A device's figures of the kApply pass: live bytes per category, now and at the peaks.
struct CategoryLive {
  std::array<uint64_t, kCategoryCount> bytes{};
  std::array<uint64_t, kCategoryCount> objects{};  // of bytes, named by tags
};
struct CategorySlot {
  CategoryLive now, at_tensor_peak, at_device_peak, own_peak;
  std::array<uint64_t, kCategoryCount> own_peak_ns{};
  std::array<uint64_t, kCategoryCount> allocations{};
  std::array<uint64_t, kCategoryCount> objects_allocations{};
  uint64_t tensor_live = 0;
  uint64_t tensor_peak = 0;
  uint64_t tensor_peak_ns = 0;
  bool tensor_peak_seen = false;
  uint64_t cache_at_tensor_peak = 0, cache_at_device_peak = 0;
  uint64_t other_at_tensor_peak = 0, other_at_device_peak = 0;
  // Device memory that is no tensor allocation, live by calling module (interned id): a
  // handful of libraries, copied at each new peak.
  std::unordered_map<uint32_t, uint64_t> other_live, other_at_tensor_peak_by_library,
      other_at_device_peak_by_library;
};

// A device's tensors by attribution (docs/design.md "Modules and operators"): live bytes per
// distinct attribution (AttributionDecode::births), copied at each new tensor peak through
// the list of those changed since the last one, and per module path its subtree's live bytes
// and highest.
struct AttributionSlot {
  std::vector<uint64_t> live_bytes, live_count;  // by attribution index
  std::vector<uint64_t> peak_bytes, peak_count;  // at the tensor peak
  std::vector<uint32_t> changed;                 // indices changed since the last peak
  std::vector<uint8_t> is_changed;
  std::vector<uint64_t> node_live, node_peak;  // by module node (Accountant::module_nodes_)
  uint64_t module_live = 0, module_peak = 0;   // tensors born in any module
  uint64_t peak_ns = 0;
  uint64_t backward_allocations = 0, backward_bytes = 0;
  uint64_t unlinked_allocations = 0, unlinked_bytes = 0;
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
  // After Finish(): the process has categories (training phases, or a tag), which the two
  // category passes compute from this accountant's phases and iterations.
  bool categories_given() const { return categories_given_; }

  // Before the first event: this sweep is a category pass after `previous` (finished, kept
  // alive), with `categories` (one byte per device allocation) to fill or to read.
  void SetCategoryPass(CategoryPass pass, const Accountant* previous,
                       std::vector<uint8_t>* categories);
  // After Finish, kept for the category passes: frees what they do not read (the live set,
  // and with kKeepAll every allocation and event), keeping the phases and iterations.
  void KeepOnlyClassifier();
  // kClassify, after the last event: the category of every allocation still live.
  void EndClassify();
  // kApply, after the last event: the category figures into the report `p` (Finish's).
  void FillCategories(const DecodedStream& s, ProcessReport* p) const;

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
  void Tag(const Event& e);
  // The tensor layer of each slot and whether `a` is one of its tensor allocations.
  TensorLayer LayerOf(uint32_t slot) const;
  bool IsTensor(const Allocation& a, TensorLayer layer);
  // a's final category byte (tag or inferred), with the previous sweep's classifier and end.
  uint8_t FinalCategory(const Allocation& a, const LifetimeClassifier& classifier,
                        uint64_t end_ns) const;
  void CategoryBirth(Allocation& a, uint32_t slot);
  // A tensor's bytes in or out of its device's attribution figures; AttributionPeak at a new
  // tensor peak.
  void AttributionLive(const Allocation& a, bool birth);
  void AttributionPeak(uint32_t slot, uint64_t ts);
  // The module nodes of a module id: its path and its parents' (a.b.c, a.b, a), the names
  // as known when first asked (docs/design.md).
  const std::vector<uint32_t>& ModuleChain(uint32_t module_id);
  void FillAttribution(const DecodedStream& s, const std::vector<uint32_t>& new_slot,
                       uint64_t first, ProcessReport* p) const;
  void CategoryDeath(const Allocation& a);

  const AnalysisOptions& options_;
  const Retention retention_;
  StreamingStats& stats_;
  // Interned names; the post-mortem of a failure reads its allocator events.
  const DecodedStream* stream_;
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

  uint64_t tags_ = 0;
  uint32_t tagged_categories_ = 0;  // bit c: a tag named category c
  uint64_t tags_unmatched_ = 0;
  uint32_t next_ordinal_ = 0;
  // After Finish: whether categories are given, and what a category pass takes from here.
  bool categories_given_ = false;
  uint64_t end_ns_ = 0;
  OccurrenceLists by_phase_;
  std::vector<IterationWindow> iterations_;
  std::unique_ptr<LifetimeClassifier> classifier_;
  std::map<uint32_t, TensorLayer> layer_by_device_;
  // Of a category pass.
  CategoryPass category_pass_ = CategoryPass::kNone;
  const Accountant* previous_ = nullptr;
  std::vector<uint8_t>* categories_ = nullptr;
  std::vector<TensorLayer> slot_layer_;  // kApply: by slot, as the previous sweep found it
  std::vector<CategorySlot> category_slots_;
  std::unordered_map<uint32_t, bool> async_api_;  // interned api id -> stream-ordered
  // By slot; module paths seen by the sweep (node index -> path) and each module id's chain.
  std::vector<AttributionSlot> attribution_slots_;
  std::vector<std::string> module_nodes_;
  std::unordered_map<std::string, uint32_t> module_node_index_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> module_chains_;
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
