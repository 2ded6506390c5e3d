#include "collector/engine/streaming_sweep.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "collector/engine/failed_allocations.h"
#include "collector/engine/lifetimes.h"
#include "collector/engine/phase_inference.h"
#include "collector/engine/phases.h"
#include "collector/engine/in_memory_sweep.h"
#include "collector/engine/stream_decoder.h"
#include "collector/engine/accounting.h"
#include "collector/engine/training_analysis.h"

namespace cumemtrace::internal {
namespace {

// The sweep's order: time, then the tie rule of design.md (its rank is kept in Event::pad
// while the event waits); arrival breaks the remaining ties.
inline bool KeyBefore(const Event& x, const Event& y) {
  if (x.timestamp_ns != y.timestamp_ns) return x.timestamp_ns < y.timestamp_ns;
  return x.pad < y.pad;
}

// Storage of the reorder window: fixed blocks, recycled, so that events flowing through the
// window touch no new memory once it has reached its size.
struct Block {
  static constexpr size_t kEvents = 1024;
  Event events[kEvents];
  uint64_t arrival[kEvents];
};

class BlockPool {
 public:
  Block* Get() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<Block>());
      return all_.back().get();
    }
    Block* b = free_.back();
    free_.pop_back();
    return b;
  }
  void Put(Block* b) { free_.push_back(b); }

 private:
  std::vector<std::unique_ptr<Block>> all_;
  std::vector<Block*> free_;
};

// A sorted run of the reorder window: events in key order, each with its arrival index.
class Run {
 public:
  explicit Run(BlockPool* pool) : pool_(pool) {}
  Run(Run&& other) noexcept
      : pool_(other.pool_), blocks_(std::move(other.blocks_)), back_ns_(other.back_ns_),
        back_rank_(other.back_rank_), head_(other.head_), tail_(other.tail_) {
    other.blocks_.clear();
    other.head_ = other.tail_ = 0;
  }
  Run& operator=(Run&& other) noexcept {
    if (this != &other) {
      Release();
      pool_ = other.pool_;
      blocks_ = std::move(other.blocks_);
      back_ns_ = other.back_ns_;
      back_rank_ = other.back_rank_;
      head_ = other.head_;
      tail_ = other.tail_;
      other.blocks_.clear();
      other.head_ = other.tail_ = 0;
    }
    return *this;
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run() { Release(); }

  bool empty() const { return blocks_.empty(); }
  const Event& front() const { return blocks_.front()->events[head_]; }
  uint64_t front_arrival() const { return blocks_.front()->arrival[head_]; }
  // The key of the last event: its time and tie rank (Event::pad).
  uint64_t back_ns() const { return back_ns_; }
  uint8_t back_rank() const { return back_rank_; }
  // e goes in with `rank` as its tie rank (Event::pad).
  void Push(const Event& e, uint8_t rank, uint64_t arrival) {
    back_ns_ = e.timestamp_ns;
    back_rank_ = rank;
    if (blocks_.empty() || tail_ == Block::kEvents) {
      blocks_.push_back(pool_->Get());
      tail_ = 0;
    }
    Block* block = blocks_.back();
    block->events[tail_] = e;
    block->events[tail_].pad = rank;
    block->arrival[tail_] = arrival;
    ++tail_;
  }
  void Pop() {
    ++head_;
    if (blocks_.size() == 1 ? head_ == tail_ : head_ == Block::kEvents) {
      pool_->Put(blocks_.front());
      blocks_.erase(blocks_.begin());
      head_ = 0;
      if (blocks_.empty()) tail_ = 0;
    }
  }

 private:
  void Release() {
    for (Block* b : blocks_) pool_->Put(b);
    blocks_.clear();
  }

  BlockPool* pool_;
  std::vector<Block*> blocks_;
  uint64_t back_ns_ = 0;
  uint8_t back_rank_ = 0;
  size_t head_ = 0;  // in the first block
  size_t tail_ = 0;  // in the last block
};

constexpr size_t kMaxRuns = 32;
constexpr uint32_t kNone = ~uint32_t{0};

}  // namespace

// The reorder window of one stream: events come in arrival order and leave, in the
// sweep's order, to sink->Sweep(event) once they are `window_ns` older than the newest.
template <typename Sink>
class ReorderWindow {
 public:
  ReorderWindow(const StreamingOptions& streaming, Sink* sink, StreamingStats* stats)
      : streaming_(streaming), sink_(sink), stats_(*stats) {}

  uint64_t late_events() const { return late_events_; }

  // The events a chunk added to the stream, in arrival order (taken).
  void AddEvents(const DecodedStream& s, std::vector<Event>& events) {
    const int64_t offset = s.realtime_offset_ns;
    for (Event& e : events) {
      if (offset != 0) ShiftEventToRealtime(offset, &e);
      Insert(e);
    }
    events.clear();
    stats_.max_window_events = std::max<uint64_t>(stats_.max_window_events, window_events_);
    stats_.max_runs = std::max<uint64_t>(stats_.max_runs, runs_.size());
    if (newest_ns_ > streaming_.window_ns) Drain(newest_ns_ - streaming_.window_ns, false);
  }
  void DrainAll() { Drain(0, true); }

 private:

  // e is the caller's copy, which this may change. Its tie rank is written into the
  // window's copy (Run::Push), not into e just before e is copied: the copy's wide loads
  // would wait on that one-byte store.
  void Insert(Event& e) {
    const uint64_t arrival = arrival_++;
    const auto rank = static_cast<uint8_t>(TieRank(e.type));
    if (e.timestamp_ns > newest_ns_) {
      newest_ns_ = e.timestamp_ns;
    } else {
      stats_.max_lateness_ns = std::max(stats_.max_lateness_ns, newest_ns_ - e.timestamp_ns);
    }
    if (released_any_ && (e.timestamp_ns != released_ns_ ? e.timestamp_ns < released_ns_
                                                          : rank < released_rank_)) {
      // Older than what was swept already: applied now, where it arrived, and counted.
      e.pad = rank;
      ++late_events_;
      sink_->Sweep(e);
      return;
    }
    // The run whose last event is the latest one not after e; else a new run.
    Run* best = nullptr;
    for (Run& r : runs_) {
      const bool fits = e.timestamp_ns != r.back_ns() ? e.timestamp_ns > r.back_ns()
                                                      : rank >= r.back_rank();
      if (fits && (best == nullptr || best->back_ns() < r.back_ns() ||
                   (best->back_ns() == r.back_ns() && best->back_rank() < r.back_rank()))) {
        best = &r;
      }
    }
    if (best == nullptr) {
      if (runs_.size() >= kMaxRuns) Consolidate();
      best = &NewRun();
      const Run& merged = runs_[0];
      if (runs_.size() > 1 && !merged.empty() &&
          (e.timestamp_ns != merged.back_ns() ? e.timestamp_ns > merged.back_ns()
                                              : rank >= merged.back_rank())) {
        // Consolidate() left one run that e can extend.
        runs_.pop_back();
        best = &runs_[0];
      }
    }
    best->Push(e, rank, arrival);
    ++window_events_;
    if (window_events_ > streaming_.max_window_events) Drain(0, false);
  }

  Run& NewRun() { return runs_.emplace_back(&blocks_); }

  // Too many runs (input far from sorted): merge them all into one.
  void Consolidate() {
    std::vector<std::pair<uint64_t, Event>> all;
    all.reserve(window_events_);
    for (Run& r : runs_) {
      for (; !r.empty(); r.Pop()) all.emplace_back(r.front_arrival(), r.front());
    }
    std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) {
      if (KeyBefore(x.second, y.second)) return true;
      if (KeyBefore(y.second, x.second)) return false;
      return x.first < y.first;
    });
    runs_.erase(runs_.begin() + 1, runs_.end());
    for (const auto& [arrival, e] : all) runs_[0].Push(e, e.pad, arrival);
  }

  // Sweeps, in order, every waiting event older than `below_ns`, and the oldest ones beyond
  // the window's size limit; with `all`, every waiting event.
  void Drain(uint64_t below_ns, bool all) {
    while (!runs_.empty()) {
      // The run with the first event, and the first event of all the others: events leave
      // that run without comparisons until they pass the other's.
      size_t next = 0;
      for (size_t i = 1; i < runs_.size(); ++i) {
        if (Before(runs_[i], runs_[next])) next = i;
      }
      const Run* other = nullptr;
      for (size_t i = 0; i < runs_.size(); ++i) {
        if (i != next && (other == nullptr || Before(runs_[i], *other))) other = &runs_[i];
      }
      Run& run = runs_[next];
      // The other run's first key, read once: the loop below compares every event with it.
      const bool bounded = other != nullptr;
      const uint64_t other_ns = bounded ? other->front().timestamp_ns : 0;
      const uint8_t other_rank = bounded ? other->front().pad : 0;
      const uint64_t other_arrival = bounded ? other->front_arrival() : 0;
      do {
        const Event& e = run.front();
        if (!all && e.timestamp_ns >= below_ns && window_events_ <= streaming_.max_window_events) {
          return;
        }
        released_ns_ = e.timestamp_ns;
        released_rank_ = e.pad;
        released_any_ = true;
        --window_events_;
        // The sink never touches the window, so the event is swept where it lies.
        sink_->Sweep(e);
        run.Pop();
        if (run.empty() || !bounded) continue;
        const Event& f = run.front();
        if (f.timestamp_ns != other_ns) {
          if (f.timestamp_ns > other_ns) break;
        } else if (f.pad != other_rank) {
          if (f.pad > other_rank) break;
        } else if (run.front_arrival() > other_arrival) {
          break;
        }
      } while (!run.empty());
      if (run.empty()) {
        if (next != runs_.size() - 1) runs_[next] = std::move(runs_.back());
        runs_.pop_back();
      }
    }
  }

  // Whether x's first event goes before y's.
  static bool Before(const Run& x, const Run& y) {
    const Event& a = x.front();
    const Event& b = y.front();
    if (a.timestamp_ns != b.timestamp_ns) return a.timestamp_ns < b.timestamp_ns;
    if (a.pad != b.pad) return a.pad < b.pad;
    return x.front_arrival() < y.front_arrival();
  }

  const StreamingOptions& streaming_;
  Sink* sink_;
  StreamingStats& stats_;
  BlockPool blocks_;
  std::vector<Run> runs_;  // never empty ones
  size_t window_events_ = 0;
  uint64_t arrival_ = 0;
  uint64_t newest_ns_ = 0;
  bool released_any_ = false;
  // The key of the last event swept (KeyBefore's fields).
  uint64_t released_ns_ = 0;
  uint8_t released_rank_ = 0;
  uint64_t late_events_ = 0;
};

// One stream: its reorder window and the sweep that consumes it.
class ProcessSweep {
 public:
  ProcessSweep(const AnalysisOptions& options, const StreamingOptions& streaming,
               const PhaseRules* rules, const DecodedStream* stream)
      : options_(options), streaming_(streaming), phases_(0, stream, rules) {}

  bool in_memory() const { return in_memory_; }
  const StreamingStats& stats() const { return stats_; }

  // Takes the events a chunk added to the stream (in arrival order).
  void AddEvents(DecodedStream& s, std::vector<Event>& events) {
    if (events.empty()) return;
    if (!s.has_handshake) batch_before_handshake_ = true;
    events_ += events.size();
    window_.AddEvents(s, events);
  }

  // For the last pass of a process whose phases are inferred: the outcome and the ranges.
  void SetInferred(const InferenceOutcome& outcome, std::vector<Event> ranges) {
    inferred_ = true;
    scan_inference_ = false;
    inference_ = outcome;
    for (Event& e : ranges) e.pad = static_cast<uint8_t>(TieRank(e.type));
    std::stable_sort(ranges.begin(), ranges.end(), KeyBefore);
    synthetic_ = std::move(ranges);
  }

  // Set by Finish(): the inference needs passes 2 and 3 (the outcome so far).
  bool needs_inference() const { return needs_inference_; }
  const InferenceOutcome& inference() const { return inference_; }

  void Sweep(const Event& e) {
    while (next_synthetic_ < synthetic_.size() && KeyBefore(synthetic_[next_synthetic_], e)) {
      SweepOne(synthetic_[next_synthetic_++]);
    }
    SweepOne(e);
  }

  ProcessReport Finish(DecodedStream& s);

 private:
  struct Live {
    Allocation a;
    uint32_t group[2];  // origin groups (by API, by calling module); kNone for other memory
  };
  struct Freed {
    Live live;
    uint64_t death_ns;
  };
  struct Group {
    uint32_t slot;
    uint32_t id;
    OriginStats stats;
    uint64_t live = 0;
  };


  // --- The sweep (AnalyzeProcess's loop, one event at a time) ----------------------------

  uint32_t SlotOf(uint32_t device) {
    if (device < direct_slot_.size() && direct_slot_[device] != 0) return direct_slot_[device] - 1;
    if (device >= 4096) {
      auto it = far_slot_.find(device);
      if (it != far_slot_.end()) return it->second;
    }
    const auto slot = static_cast<uint32_t>(slot_device_.size());
    slot_device_.push_back(device);
    devices_.emplace_back();
    in_use_.push_back(0);
    freed_at_peak_.emplace_back();
    phases_.AddSlot();
    if (device < 4096) {
      if (direct_slot_.size() <= device) direct_slot_.resize(device + 1, 0);
      direct_slot_[device] = slot + 1;
    } else {
      far_slot_[device] = slot;
    }
    return slot;
  }

  static uint64_t Key(uint32_t slot, uint64_t address) {
    return address ^ (static_cast<uint64_t>(slot) << 56);
  }

  uint32_t GroupOf(int which, uint32_t slot, uint32_t id) {
    const uint64_t key = (static_cast<uint64_t>(slot) << 32) | id;
    // Programs allocate through few APIs and libraries: the last group usually matches.
    if (last_group_key_[which] == key && last_group_[which] != kNone) return last_group_[which];
    auto [it, inserted] = group_index_[which].emplace(key, 0);
    if (inserted) {
      it->second = static_cast<uint32_t>(groups_[which].size());
      groups_[which].push_back(Group{slot, id, OriginStats(), 0});
    }
    last_group_key_[which] = key;
    last_group_[which] = it->second;
    return it->second;
  }

  uint32_t NewLive() {
    if (!free_.empty()) {
      const uint32_t index = free_.back();
      free_.pop_back();
      return index;
    }
    pool_.emplace_back();
    return static_cast<uint32_t>(pool_.size() - 1);
  }

  // An allocation dies at the current position (release, or a new allocation at its live
  // address): the device's counters, and kept if it was live at the device's peak.
  void Die(uint32_t index, uint64_t ts, int32_t death_phase) {
    Live& l = pool_[index];
    Allocation& a = l.a;
    DeviceCounters& d = devices_[a.slot];
    d.kind_live[a.kind] -= a.bytes;
    if (IsStaticMemory(a.kind)) d.static_live -= a.bytes;
    if (!IsDeviceMemory(a.kind)) return;
    d.in_use -= a.bytes;
    if (d.peak_pos != kNever && a.birth_pos <= d.peak_pos) {
      a.death_pos = pos_;
      a.death_phase = death_phase;
      freed_at_peak_[a.slot].push_back(Freed{l, ts});
      ++kept_at_peak_;
      stats_.max_kept_at_peak = std::max(stats_.max_kept_at_peak, kept_at_peak_);
    }
  }

  void Forget(uint32_t index) {
    const Live& l = pool_[index];
    if (IsDeviceMemory(l.a.kind)) {
      for (int g = 0; g < 2; ++g) groups_[g][l.group[g]].live -= l.a.bytes;
    }
    free_.push_back(index);
    --live_count_;
  }

  void Allocate(const Event& e, uint32_t slot) {
    const uint8_t kind = e.kind < kMemoryKinds ? e.kind : 0;
    DeviceCounters& d = devices_[slot];
    const uint64_t key = Key(slot, e.a);
    const size_t found = live_.Find(key);
    uint32_t killed = kNone;
    if (found != AddressMap::kNotFound) {
      // The release was lost: the old allocation ends here (as MemoryTimeline::Allocate).
      ++d.reallocated_live_address;
      killed = live_.ValueAt(found);
      live_.EraseAt(found);
      Die(killed, e.timestamp_ns, -1);
    }
    const uint32_t index = NewLive();
    ++live_count_;
    stats_.max_live = std::max(stats_.max_live, live_count_);
    Live& l = pool_[index];
    l.a = Allocation{e.a, e.b, pos_, kNever, e.timestamp_ns, slot, attribution_.innermost,
                     -1, static_cast<uint32_t>(e.c), e.name_id, e.caller_id, e.thread_id, kind};
    l.group[0] = l.group[1] = kNone;
    live_.Insert(key, index);

    d.CountAllocation(kind, e.b);
    if (IsDeviceMemory(kind)) {
      d.in_use += e.b;
      if (d.in_use > d.peak || d.peak_pos == kNever) {
        d.peak = d.in_use;
        d.peak_pos = pos_;
        d.peak_ns = e.timestamp_ns;
        // None of those freed so far was live at this new peak.
        kept_at_peak_ -= freed_at_peak_[slot].size();
        freed_at_peak_[slot].clear();
      }
      in_use_[slot] = d.in_use;
      phases_.OnInUse(slot, in_use_[slot]);
      for (int32_t phase : attribution_.names) {
        PhaseCounters& c = phases_.counters(phase, slot);
        ++c.allocations;
        c.allocated_bytes += e.b;
      }
      // By origin: the birth counts before the death of a block at the same address.
      const uint32_t ids[2] = {e.name_id, e.caller_id};
      for (int g = 0; g < 2; ++g) {
        const uint32_t group = GroupOf(g, slot, ids[g]);
        pool_[index].group[g] = group;
        Group& G = groups_[g][group];
        ++G.stats.allocations;
        G.stats.allocated_bytes += e.b;
        G.live += e.b;
        G.stats.peak_bytes = std::max(G.stats.peak_bytes, G.live);
      }
    }
    if (killed != kNone) Forget(killed);
  }

  void Release(const Event& e, uint32_t slot) {
    const size_t found = live_.Find(Key(slot, e.a));
    DeviceCounters& d = devices_[slot];
    if (found == AddressMap::kNotFound) {
      ++d.released_unknown_count;
      d.released_unknown_bytes += e.b;
      return;
    }
    const uint32_t index = live_.ValueAt(found);
    live_.EraseAt(found);
    const Allocation a = pool_[index].a;
    KindStats& k = d.kinds[a.kind];
    ++k.releases;
    k.released_bytes += a.bytes;
    int32_t death_phase = -1;
    if (IsDeviceMemory(a.kind)) {
      phases_.Attribute(e.thread_id, &attribution_);
      death_phase = attribution_.innermost;
    }
    Die(index, e.timestamp_ns, death_phase);
    if (IsDeviceMemory(a.kind)) {
      in_use_[slot] = d.in_use;
      for (int32_t phase : attribution_.names) {
        PhaseCounters& c = phases_.counters(phase, slot);
        ++c.frees;
        c.freed_bytes += a.bytes;
      }
    }
    Forget(index);
  }

  void SweepOne(const Event& e) {
    if (scan_inference_) inference_scan_.Add(e);
    if (!any_ || e.timestamp_ns < first_) first_ = e.timestamp_ns;
    any_ = true;
    last_ = std::max(last_, e.timestamp_ns);
    switch (e.type) {
      case EventType::kRangeOpen:
        phases_.Open(e, in_use_, pos_);
        break;
      case EventType::kRangeClose:
        if (!phases_.Close(e, in_use_)) ++unmatched_range_closes_;
        break;
      case EventType::kMark:
        ++nvtx_marks_;
        break;
      case EventType::kAllocate: {
        const uint32_t slot = SlotOf(e.device);
        failed_.OnMemoryEvent(e);
        phases_.Attribute(e.thread_id, &attribution_);
        Allocate(e, slot);
        break;
      }
      case EventType::kRelease:
        failed_.OnMemoryEvent(e);
        Release(e, SlotOf(e.device));
        break;
      case EventType::kFailedAllocation: {
        const uint32_t slot = SlotOf(e.device);
        failed_.OnMemoryEvent(e);
        phases_.Attribute(e.thread_id, &attribution_);
        failed_.OnFailed(e, slot, attribution_, in_use_[slot]);
        break;
      }
      case EventType::kKernel: {
        last_ = std::max(last_, e.a);
        const uint32_t slot = SlotOf(e.device);
        DeviceCounters& d = devices_[slot];
        ++d.kernel_count;
        d.kernel_busy_ns += e.a > e.timestamp_ns ? e.a - e.timestamp_ns : 0;
        phases_.Attribute(e.thread_id, &attribution_);
        for (int32_t phase : attribution_.names) ++phases_.counters(phase, slot).kernels;
        break;
      }
    }
    ++pos_;
  }

  const AnalysisOptions& options_;
  const StreamingOptions& streaming_;
  StreamingStats stats_;
  bool in_memory_ = false;
  bool needs_inference_ = false;
  bool scan_inference_ = options_.infer_phases;
  bool batch_before_handshake_ = false;
  uint64_t events_ = 0;

  ReorderWindow<ProcessSweep> window_{streaming_, this, &stats_};
  // Inferred phase ranges (sorted), swept among the events: after those of the same key.
  std::vector<Event> synthetic_;
  size_t next_synthetic_ = 0;
  bool inferred_ = false;
  InferenceOutcome inference_;
  InferenceScan inference_scan_;

  // Sweep.
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
  std::vector<Live> pool_;
  std::vector<uint32_t> free_;
  uint64_t live_count_ = 0;
  std::vector<std::vector<Freed>> freed_at_peak_;  // per slot: freed, but live at its peak
  uint64_t kept_at_peak_ = 0;
  std::vector<Group> groups_[2];
  std::unordered_map<uint64_t, uint32_t> group_index_[2];
  uint64_t last_group_key_[2] = {0, 0};
  uint32_t last_group_[2] = {kNone, kNone};
  FailedAllocationLog failed_;
  uint64_t nvtx_marks_ = 0;
  uint64_t unmatched_range_closes_ = 0;
};

ProcessReport ProcessSweep::Finish(DecodedStream& s) {
  ProcessReport p;
  if (in_memory_ || (batch_before_handshake_ && s.realtime_offset_ns != 0)) {
    // The caller analyzes this one in memory (a handshake after events it would have
    // shifted is rare enough not to be streamed).
    in_memory_ = true;
    p.stream_id = s.stream_id;
    return p;
  }
  window_.DrainAll();
  while (next_synthetic_ < synthetic_.size()) SweepOne(synthetic_[next_synthetic_++]);
  if (options_.infer_phases && !inferred_) {
    // Pass 1 of the inference ran with the sweep; when it finds the phases can be inferred,
    // this report is not used: the caller reads the process again (passes 2 and 3, then
    // this sweep with the inferred ranges).
    inference_ = inference_scan_.Decide(s, *phases_.rules(), &needs_inference_);
  }
  FillStreamFacts(s, &p);
  p.events = events_;
  p.late_events = window_.late_events();
  ShiftRecordsToRealtime(&s);
  if (options_.infer_phases) {
    PhaseInferenceReport& r = p.phase_inference;
    r.applied = inference_.applied;
    r.reason = inference_.reason;
    r.signal = inference_.signal;
    r.calling_thread = inference_.calling_thread;
    r.autograd_threads = inference_.autograd_threads;
    r.backward_passes = inference_.backward_passes;
    r.optimizers_inferred = inference_.optimizers_inferred;
  }

  // Devices named only by the stream's records get a slot too.
  for (const auto& [index, info] : s.device_info) SlotOf(index);
  for (const auto& [index, t] : s.tracer_memory) SlotOf(index);

  uint64_t first = any_ ? first_ : 0, last = last_;
  if (s.process_exit_ns != 0) {
    if (!any_ || s.process_exit_ns < first) first = s.process_exit_ns;
    last = std::max(last, s.process_exit_ns);
  }
  for (const DropRecord& d : s.drops) {
    if (d.first_ns != 0 && (!any_ || d.first_ns < first)) first = d.first_ns;
    last = std::max(last, d.last_ns);
  }
  p.first_timestamp_abs_ns = first;
  p.last_timestamp_abs_ns = last;
  p.duration_ns = last - first;

  // What is still live closes at the end.
  live_.ForEachValue([this](uint32_t index) {
    const Allocation& a = pool_[index].a;
    KindStats& k = devices_[a.slot].kinds[a.kind];
    ++k.live_at_exit_count;
    k.live_at_exit_bytes += a.bytes;
  });
  phases_.CloseAll(last, in_use_);

  // Slots in device order, as the in-memory sweep numbers them.
  const size_t n_slots = slot_device_.size();
  std::vector<uint32_t> sorted = slot_device_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> new_slot(n_slots);
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    new_slot[slot] = static_cast<uint32_t>(
        std::lower_bound(sorted.begin(), sorted.end(), slot_device_[slot]) - sorted.begin());
  }
  failed_.Finish(s, first, &phases_, &p);  // counts in phases by the slots it was given
  phases_.ReorderSlots(new_slot);

  std::vector<std::string> phase_names;
  for (const PhaseName& n : phases_.names()) phase_names.push_back(n.name);
  p.rolled_up_ranges = phases_.rolled_up_ranges();
  p.nvtx_marks = nvtx_marks_;
  p.unmatched_range_closes = unmatched_range_closes_;

  p.devices.resize(n_slots);
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    FillDeviceReport(s, devices_[slot], slot_device_[slot], first, &p.devices[new_slot[slot]]);
  }

  // What was live at each peak: still live and born by then, or kept when freed.
  std::vector<std::vector<const Allocation*>> at_peak(n_slots);
  std::vector<const Live*> live_at_peak;
  live_.ForEachValue([&](uint32_t index) {
    const Live& l = pool_[index];
    const uint64_t peak_pos = devices_[l.a.slot].peak_pos;
    if (IsDeviceMemory(l.a.kind) && peak_pos != kNever && l.a.birth_pos <= peak_pos) {
      live_at_peak.push_back(&l);
    }
  });

  // By API and by calling module.
  for (const Live* l : live_at_peak) {
    for (int g = 0; g < 2; ++g) groups_[g][l->group[g]].stats.live_at_peak_bytes += l->a.bytes;
  }
  for (const std::vector<Freed>& list : freed_at_peak_) {
    for (const Freed& f : list) {
      for (int g = 0; g < 2; ++g) {
        groups_[g][f.live.group[g]].stats.live_at_peak_bytes += f.live.a.bytes;
      }
    }
  }
  live_.ForEachValue([&](uint32_t index) {
    const Live& l = pool_[index];
    if (!IsDeviceMemory(l.a.kind)) return;
    for (int g = 0; g < 2; ++g) groups_[g][l.group[g]].stats.live_at_exit_bytes += l.a.bytes;
  });
  for (int g = 0; g < 2; ++g) {
    std::map<std::pair<uint32_t, uint32_t>, OriginStats> stats;
    for (const Group& G : groups_[g]) stats[{new_slot[G.slot], G.id}] = G.stats;
    if (g == 0) {
      AddOriginStats(stats, "(unknown)", s, &DeviceReport::by_api, &p);
    } else {
      AddOriginStats(stats, "(not unwound)", s, &DeviceReport::by_library, &p);
    }
  }

  for (const Live* l : live_at_peak) at_peak[new_slot[l->a.slot]].push_back(&l->a);
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    for (const Freed& f : freed_at_peak_[slot]) at_peak[new_slot[slot]].push_back(&f.live.a);
  }
  FillPeakContents(at_peak, phase_names, s, options_.top_allocations, first, &p);

  FillPhaseReports(phases_, phase_names, sorted, s, first, &p);
  const IterationDetection detection = AddIterations(phases_, sorted, first, options_, &p);

  // Lifetime classes at the peak.
  const LifetimeClassifier classifier(phases_.names(), phases_.occurrences(), detection.windows);
  std::vector<std::map<std::string, uint64_t>> classes(n_slots);
  for (const Live* l : live_at_peak) {
    const Allocation& a = l->a;
    const LifetimeClass c = classifier.Classify(a.birth_ns, a.phase, last, -1, false);
    classes[new_slot[a.slot]][LifetimeClassName(c)] += a.bytes;
  }
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    for (const Freed& f : freed_at_peak_[slot]) {
      const Allocation& a = f.live.a;
      const LifetimeClass c =
          classifier.Classify(a.birth_ns, a.phase, f.death_ns, a.death_phase, true);
      classes[new_slot[slot]][LifetimeClassName(c)] += a.bytes;
    }
  }
  SetLifetimeAtPeak(sorted, classes, &p);

  FillDropReports(s, first, &p);
  return p;
}

class StreamingAnalyzer::Impl {
 public:
  Impl(const AnalysisOptions& options, const StreamingOptions& streaming)
      : options_(options),
        streaming_(streaming),
        rules_(options.phase_rules ? options.phase_rules.get() : &DefaultRules()) {}

  static const PhaseRules& DefaultRules() {
    static const PhaseRules rules = PhaseRules::Defaults();
    return rules;
  }

  void AddChunk(const v1::TraceChunk& chunk) {
    if (in_pass_) {
      InferencePass* pass = Pass(chunk.stream_id());
      if (pass == nullptr) return;
      pass_decoder_->AddChunk(chunk);
      if (chunk.content_case() == v1::TraceChunk::kWireFrame) PassEvents(chunk.stream_id(), pass);
      return;
    }
    decoder_.AddChunk(chunk);
    if (chunk.content_case() == v1::TraceChunk::kWireFrame) TakeEvents(chunk.stream_id());
  }

  void AddWireFrame(uint32_t stream_id, std::string_view frame) {
    if (in_pass_) {
      InferencePass* pass = Pass(stream_id);
      if (pass == nullptr) return;
      pass_decoder_->AddWireFrame(stream_id, frame);
      PassEvents(stream_id, pass);
      return;
    }
    decoder_.AddWireFrame(stream_id, frame);
    TakeEvents(stream_id);
  }

  // --- Phase inference: passes 2 and 3, then the sweep again with the inferred ranges ---

  bool NeedsPass() const {
    for (const auto& [id, pass] : passes_) {
      if (pass->stage != InferencePass::Stage::kDone) return true;
    }
    return false;
  }

  void BeginPass() {
    in_pass_ = true;
    pass_decoder_ = std::make_unique<StreamDecoder>();
    for (auto& [id, pass] : passes_) {
      InferencePass& p = *pass;
      switch (p.stage) {
        case InferencePass::Stage::kBursts:
          p.bursts_scan = std::make_unique<ScanSink<BurstScan>>(p.outcome);
          p.bursts_window = std::make_unique<ReorderWindow<ScanSink<BurstScan>>>(
              streaming_, p.bursts_scan.get(), &p.stats);
          break;
        case InferencePass::Stage::kGradients:
          p.gradient_scan = std::make_unique<ScanSink<GradientScan>>(p.outcome, p.bursts);
          p.gradient_window = std::make_unique<ReorderWindow<ScanSink<GradientScan>>>(
              streaming_, p.gradient_scan.get(), &p.stats);
          break;
        case InferencePass::Stage::kFinal: {
          DecodedStream& s = pass_decoder_->streams()[id];
          AddInferredNames(&s);
          p.sweep = std::make_unique<ProcessSweep>(options_, streaming_, rules_, &s);
          std::vector<Event> ranges =
              InferredRanges(p.bursts, p.optimizer_end, p.forward_start, &p.outcome);
          p.sweep->SetInferred(p.outcome, std::move(ranges));
          break;
        }
        case InferencePass::Stage::kDone:
          break;
      }
    }
  }

  void EndPass(Report* report) {
    for (auto& [id, pass] : passes_) {
      InferencePass& p = *pass;
      ProcessReport& process = report->processes[p.index];
      switch (p.stage) {
        case InferencePass::Stage::kBursts:
          p.bursts_window->DrainAll();
          p.bursts = p.bursts_scan->scan.Finish(&p.outcome);
          p.forward_start = p.bursts_scan->scan.forward_start();
          p.bursts_window.reset();
          p.bursts_scan.reset();
          if (p.bursts.empty()) {
            // Not applied after all: the first pass's sweep stands, with the reason.
            SetInference(p.outcome, &process);
            p.stage = InferencePass::Stage::kDone;
          } else {
            p.stage = p.outcome.signal == "memory" ? InferencePass::Stage::kGradients
                                                   : InferencePass::Stage::kFinal;
          }
          break;
        case InferencePass::Stage::kGradients:
          p.gradient_window->DrainAll();
          p.optimizer_end = p.gradient_scan->scan.optimizer_end();
          p.gradient_window.reset();
          p.gradient_scan.reset();
          p.stage = InferencePass::Stage::kFinal;
          break;
        case InferencePass::Stage::kFinal: {
          DecodedStream& s = pass_decoder_->streams()[id];
          process = p.sweep->Finish(s);
          p.sweep.reset();
          p.stage = InferencePass::Stage::kDone;
          break;
        }
        case InferencePass::Stage::kDone:
          break;
      }
    }
    pass_decoder_.reset();
    in_pass_ = false;
  }

  // Moves what the last frame decoded into the stream's window.
  void TakeEvents(uint32_t stream_id) {
    auto it = decoder_.streams().find(stream_id);
    if (it == decoder_.streams().end()) return;
    DecodedStream& s = it->second;
    auto sweep = sweeps_.find(stream_id);
    if (sweep == sweeps_.end()) {
      sweep = sweeps_
                  .emplace(stream_id,
                           std::make_unique<ProcessSweep>(options_, streaming_, rules_, &s))
                  .first;
    }
    sweep->second->AddEvents(s, s.events);
  }

  void MarkTruncated(const std::string& reason) {
    if (in_pass_) return;  // the first read said so already
    if (!truncated_) truncation_reason_ = reason;
    truncated_ = true;
  }

  std::unique_ptr<Report> Finish(std::vector<uint32_t>* in_memory,
                                 std::map<uint32_t, StreamingStats>* stats) {
    auto report = std::make_unique<Report>();
    report->truncated = truncated_;
    report->truncation_reason = truncation_reason_;
    for (auto& [stream_id, stream] : decoder_.streams()) {
      auto sweep = sweeps_.find(stream_id);
      if (sweep == sweeps_.end()) {
        sweep = sweeps_
                    .emplace(stream_id,
                             std::make_unique<ProcessSweep>(options_, streaming_, rules_, &stream))
                    .first;
      }
      report->processes.push_back(sweep->second->Finish(stream));
      if (sweep->second->in_memory()) in_memory->push_back(stream_id);
      if (sweep->second->needs_inference()) {
        auto pass = std::make_unique<InferencePass>();
        pass->index = report->processes.size() - 1;
        pass->outcome = sweep->second->inference();
        passes_[stream_id] = std::move(pass);
      }
      (*stats)[stream_id] = sweep->second->stats();
      sweep->second.reset();
      stream = DecodedStream();
    }
    return report;
  }

 private:
  const AnalysisOptions options_;
  const StreamingOptions streaming_;
  const PhaseRules* rules_;
  StreamDecoder decoder_;
  std::map<uint32_t, std::unique_ptr<ProcessSweep>> sweeps_;

  template <typename Scan>
  struct ScanSink {
    template <typename... Args>
    explicit ScanSink(Args&&... args) : scan(std::forward<Args>(args)...) {}
    void Sweep(const Event& e) { scan.Add(e); }
    Scan scan;
  };
  struct InferencePass {
    enum class Stage { kBursts, kGradients, kFinal, kDone } stage = Stage::kBursts;
    size_t index = 0;  // in the report's processes
    InferenceOutcome outcome;
    std::vector<Burst> bursts;
    uint64_t forward_start = 0;
    std::vector<uint64_t> optimizer_end;
    StreamingStats stats;
    std::unique_ptr<ScanSink<BurstScan>> bursts_scan;
    std::unique_ptr<ReorderWindow<ScanSink<BurstScan>>> bursts_window;
    std::unique_ptr<ScanSink<GradientScan>> gradient_scan;
    std::unique_ptr<ReorderWindow<ScanSink<GradientScan>>> gradient_window;
    std::unique_ptr<ProcessSweep> sweep;
  };

  InferencePass* Pass(uint32_t stream_id) {
    auto it = passes_.find(stream_id);
    if (it == passes_.end() || it->second->stage == InferencePass::Stage::kDone) return nullptr;
    return it->second.get();
  }

  void PassEvents(uint32_t stream_id, InferencePass* pass) {
    DecodedStream& s = pass_decoder_->streams()[stream_id];
    switch (pass->stage) {
      case InferencePass::Stage::kBursts: pass->bursts_window->AddEvents(s, s.events); break;
      case InferencePass::Stage::kGradients: pass->gradient_window->AddEvents(s, s.events); break;
      case InferencePass::Stage::kFinal: pass->sweep->AddEvents(s, s.events); break;
      case InferencePass::Stage::kDone: s.events.clear(); break;
    }
  }

  static void SetInference(const InferenceOutcome& o, ProcessReport* p) {
    PhaseInferenceReport& r = p->phase_inference;
    r.applied = o.applied;
    r.reason = o.reason;
    r.signal = o.signal;
    r.calling_thread = o.calling_thread;
    r.autograd_threads = o.autograd_threads;
    r.backward_passes = o.backward_passes;
    r.optimizers_inferred = o.optimizers_inferred;
  }

  std::map<uint32_t, std::unique_ptr<InferencePass>> passes_;
  std::unique_ptr<StreamDecoder> pass_decoder_;
  bool in_pass_ = false;
  bool truncated_ = false;
  std::string truncation_reason_;
};

StreamingAnalyzer::StreamingAnalyzer(const AnalysisOptions& options,
                                     const StreamingOptions& streaming)
    : impl_(std::make_unique<Impl>(options, streaming)) {}
StreamingAnalyzer::~StreamingAnalyzer() = default;
void StreamingAnalyzer::AddChunk(const v1::TraceChunk& chunk) { impl_->AddChunk(chunk); }
void StreamingAnalyzer::AddWireFrame(uint32_t stream_id, std::string_view frame) {
  impl_->AddWireFrame(stream_id, frame);
}
void StreamingAnalyzer::MarkTruncated(const std::string& reason) {
  impl_->MarkTruncated(reason);
}
std::unique_ptr<Report> StreamingAnalyzer::Finish(std::vector<uint32_t>* in_memory) {
  return impl_->Finish(in_memory, &stats_);
}
bool StreamingAnalyzer::NeedsPass() const { return impl_->NeedsPass(); }
void StreamingAnalyzer::BeginPass() { impl_->BeginPass(); }
void StreamingAnalyzer::EndPass(Report* report) { impl_->EndPass(report); }

}  // namespace cumemtrace::internal
