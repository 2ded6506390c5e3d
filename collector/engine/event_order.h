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
#include <tuple>
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
    if (free_.empty()) return all_.emplace_back(std::make_unique<Block>()).get();
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
  // (time, tie rank (Event::pad), arrival): a total order, KeyBefore's plus arrival.
  using Key = std::tuple<uint64_t, uint8_t, uint64_t>;

  explicit Run(BlockPool* pool) : pool_(pool) {}
  Run(Run&&) = default;
  Run& operator=(Run&&) = default;
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  bool empty() const { return blocks_.empty(); }
  const Event& front() const { return blocks_.front()->events[head_]; }
  Key front_key() const {
    const Event& e = front();
    return {e.timestamp_ns, e.pad, blocks_.front()->arrival[head_]};
  }
  // The key of the last event, without its arrival.
  std::pair<uint64_t, uint8_t> back() const { return back_; }
  // e goes in with `rank` as its tie rank (Event::pad).
  void Push(const Event& e, uint8_t rank, uint64_t arrival) {
    back_ = {e.timestamp_ns, rank};
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
  BlockPool* pool_;
  // The pool owns the blocks: a run gives each back once it is read, and one dropped with the
  // window leaks nothing.
  std::vector<Block*> blocks_;
  std::pair<uint64_t, uint8_t> back_;
  size_t head_ = 0;  // in the first block
  size_t tail_ = 0;  // in the last block
};

constexpr size_t kMaxRuns = 32;

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
    const std::pair<uint64_t, uint8_t> key{e.timestamp_ns, static_cast<uint8_t>(TieRank(e.type))};
    if (e.timestamp_ns > newest_ns_) {
      newest_ns_ = e.timestamp_ns;
    } else {
      stats_.max_lateness_ns = std::max(stats_.max_lateness_ns, newest_ns_ - e.timestamp_ns);
    }
    if (key < released_) {
      // Older than what was swept already: applied now, where it arrived, and counted.
      e.pad = key.second;
      ++late_events_;
      sink_->Sweep(e);
      return;
    }
    // The run whose last event is the latest one not after e; else a new run.
    Run* best = nullptr;
    for (Run& r : runs_) {
      if (r.back() <= key && (best == nullptr || best->back() < r.back())) best = &r;
    }
    if (best == nullptr && runs_.size() >= kMaxRuns) {
      Consolidate();
      if (runs_[0].back() <= key) best = &runs_[0];
    }
    if (best == nullptr) best = &runs_.emplace_back(&blocks_);
    best->Push(e, key.second, arrival);
    ++window_events_;
    if (window_events_ > streaming_.max_window_events) Drain(0, false);
  }

  // Too many runs (input far from sorted): merge them all into one.
  void Consolidate() {
    std::vector<std::pair<Run::Key, Event>> all;
    all.reserve(window_events_);
    for (Run& r : runs_) {
      for (; !r.empty(); r.Pop()) all.emplace_back(r.front_key(), r.front());
    }
    std::sort(all.begin(), all.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    runs_.erase(runs_.begin() + 1, runs_.end());
    for (const auto& [key, e] : all) runs_[0].Push(e, e.pad, std::get<2>(key));
  }

  // Sweeps, in order, every waiting event older than `below_ns`, and the oldest ones beyond
  // the window's size limit; with `all`, every waiting event.
  void Drain(uint64_t below_ns, bool all) {
    while (!runs_.empty()) {
      // The run with the first event, and the first key of all the others (read once: every
      // event is compared with it): events leave that run until they pass it.
      size_t next = 0;
      for (size_t i = 1; i < runs_.size(); ++i) {
        if (runs_[i].front_key() < runs_[next].front_key()) next = i;
      }
      Run::Key other{kNever, 0xFF, kNever};  // after every event
      for (size_t i = 0; i < runs_.size(); ++i) {
        if (i != next) other = std::min(other, runs_[i].front_key());
      }
      Run& run = runs_[next];
      do {
        const Event& e = run.front();
        if (!all && e.timestamp_ns >= below_ns && window_events_ <= streaming_.max_window_events) {
          return;
        }
        released_ = {e.timestamp_ns, e.pad};
        --window_events_;
        // The sink never touches the window, so the event is swept where it lies.
        sink_->Sweep(e);
        run.Pop();
      } while (!run.empty() && run.front_key() < other);
      if (run.empty()) {
        if (next != runs_.size() - 1) runs_[next] = std::move(runs_.back());
        runs_.pop_back();
      }
    }
  }

  const StreamingOptions& streaming_;
  Sink* sink_;
  StreamingStats& stats_;
  BlockPool blocks_;
  std::vector<Run> runs_;  // never empty ones
  size_t window_events_ = 0;
  uint64_t arrival_ = 0;
  uint64_t newest_ns_ = 0;
  // The key of the last event swept; (0, 0) before the first, which no event is before.
  std::pair<uint64_t, uint8_t> released_{0, 0};
  uint64_t late_events_ = 0;
};

template <typename Sink>
std::unique_ptr<EventOrder> MakeOrder(bool sorted, const StreamingOptions& streaming, Sink* sink,
                                      StreamingStats* stats) {
  if (sorted) return std::make_unique<SortedOrder<Sink>>(sink);
  return std::make_unique<ReorderWindow<Sink>>(streaming, sink, stats);
}

}  // namespace cumemtrace::internal
