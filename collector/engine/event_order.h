// Internal: the order in which a process's events reach its sweep (accountant.h): time,
// then the tie rule of design.md, then arrival. Nothing on the wire is in that order, so
// events wait in one of two orders with one interface:
//   SortedOrder   - keeps every event and sorts them once at the end: exact, as large as
//                   the stream;
//   ReorderWindow - events leave, in order, once they are `window_ns` older than the newest
//                   event of their stream; one that arrives after its turn is swept where it
//                   arrived and counted late. Bounded by the window (docs/benchmarks.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "collector/engine/accountant.h"
#include "collector/engine/decoded_stream.h"

namespace cumemtrace::internal {

struct StreamingOptions {
  // An event leaves the reorder window once it is this much older than the newest event of
  // its stream. The tracer delivers CUPTI buffers at most about 200 ms after their records
  // (tracer_runtime.cc); the recorded traces arrive at most ~0.1 s late (docs/benchmarks.md).
  uint64_t window_ns = 1'000'000'000;
  // ... and at most this many events of one stream wait in it (64 bytes each).
  size_t max_window_events = size_t{1} << 20;
};

class EventOrder {
 public:
  virtual ~EventOrder() = default;
  // The events a chunk added to the stream, in arrival order (taken).
  virtual void AddEvents(const DecodedStream& s, std::vector<Event>& events) = 0;
  // The input ended: every waiting event goes to the sweep.
  virtual void DrainAll(const DecodedStream& s) = 0;
  // Events swept out of order because they arrived after their turn.
  virtual uint64_t late_events() const = 0;
};

// Sorts events in place by the sweep's order, setting each one's tie rank (Event::pad).
void SortEvents(std::vector<Event>* events);

template <typename Sink>
class SortedOrder : public EventOrder {
 public:
  explicit SortedOrder(Sink* sink) : sink_(sink) {}
  void AddEvents(const DecodedStream&, std::vector<Event>& events) override {
    events_.insert(events_.end(), events.begin(), events.end());
    events.clear();
  }
  // Shifted to CLOCK_REALTIME only now: the handshake may come after the first events.
  void DrainAll(const DecodedStream& s) override {
    if (s.realtime_offset_ns != 0) {
      for (Event& e : events_) ShiftEventToRealtime(s.realtime_offset_ns, &e);
    }
    SortEvents(&events_);
    for (const Event& e : events_) sink_->Sweep(e);
    std::vector<Event>().swap(events_);
  }
  uint64_t late_events() const override { return 0; }

 private:
  Sink* sink_;
  std::vector<Event> events_;
};

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


// The reorder window of one stream: events come in arrival order and leave, in the
// sweep's order, to sink->Sweep(event) once they are `window_ns` older than the newest.
template <typename Sink>
class ReorderWindow : public EventOrder {
 public:
  ReorderWindow(const StreamingOptions& streaming, Sink* sink, StreamingStats* stats)
      : streaming_(streaming), sink_(sink), stats_(*stats) {}

  uint64_t late_events() const override { return late_events_; }

  void AddEvents(const DecodedStream& s, std::vector<Event>& events) override {
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
  void DrainAll(const DecodedStream&) override { Drain(0, true); }

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
      if (Accountant::KeyBefore(x.second, y.second)) return true;
      if (Accountant::KeyBefore(y.second, x.second)) return false;
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


template <typename Sink>
std::unique_ptr<EventOrder> MakeOrder(bool sorted, const StreamingOptions& streaming, Sink* sink,
                                      StreamingStats* stats) {
  if (sorted) return std::make_unique<SortedOrder<Sink>>(sink);
  return std::make_unique<ReorderWindow<Sink>>(streaming, sink, stats);
}

}  // namespace cumemtrace::internal
