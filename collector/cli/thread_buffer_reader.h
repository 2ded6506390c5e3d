// The collector's side of a traced process's per-thread buffers of tensor events
// (proto/cumemtrace/v1/thread_buffers.h), which the tracer carves from its shared ring's memfd
// after the ring's data area: read once when the stream ends, for the events no frame
// carried. Every field was written by the traced process: each count, position and unit is
// checked before it is used and copied out of the mapping before it is decoded, and a unit
// past a slot's commit is never read. Reading can be done in slices, as the ring's is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace cumemtrace {

struct ThreadBufferRead {
  // The events, their times converted to CLOCK_MONOTONIC with the map the tracer's sender
  // wrote last.
  std::vector<v1::ring::TorchRecord> events;
  // Beside events, one each: what was running at an ALLOC's birth (layout 2's kAttribution
  // units), all zero when nothing was.
  std::vector<v1::ring::TorchAttribution> attributions;
  uint64_t fallbacks = 0;  // events the tracer wrote into the ring instead
  // Units that could not be read as events (an unknown kind, a TSC time with no map): a
  // damaged slot stops there.
  uint64_t rejected = 0;
};

// Walks `area` (`bytes` long: a copy or a read-only view that outlives the walk): of each
// slot, the units from the later of its `freed` position and `received[slot]` (how far the
// received batches reach, EventBatch.thread_buffer_positions) up to its commit.
class ThreadBufferWalk {
 public:
  ThreadBufferWalk(const unsigned char* area, uint64_t bytes,
                   const std::unordered_map<uint32_t, uint64_t>& received);
  // Appends up to `max_events` events to read->events (and counts into *read); false once
  // every slot has been read.
  bool Next(size_t max_events, ThreadBufferRead* read);

 private:
  bool OpenSlot();

  const unsigned char* area_;
  std::unordered_map<uint32_t, uint64_t> received_;
  bool valid_ = false;
  uint32_t slot_count_ = 0;
  uint64_t slot_units_ = 0;
  uint64_t table_end_ = 0;
  v1::thread_buffers::ClockMap clock_{};
  bool have_clock_ = false;
  // The slot being read.
  uint32_t slot_ = 0;
  bool in_slot_ = false;
  uint32_t thread_id_ = 0;
  uint64_t at_ = 0, from_ = 0, committed_ = 0;
  uint32_t layout_ = 0;
  uint64_t stream_ = 0, pool_first_ = 0, pool_second_ = 0;
  uint64_t attribution_a_ = 0, attribution_b_ = 0, attribution_c_ = 0;
  bool counters_ = false;
  uint64_t allocated_total_ = 0, allocated_current_ = 0, reserved_current_ = 0;
};

// Everything at once (tests, small areas).
ThreadBufferRead ReadThreadBuffers(const unsigned char* area, uint64_t bytes,
                                   const std::unordered_map<uint32_t, uint64_t>& received);

// The same from the memfd `fd`, whose per-thread buffers start at `offset` (the ring's
// kHeaderBytes + capacity) and take `bytes`, as EventBatch frames (serialized
// StreamMessages) numbered from `sequence`.
class ThreadBufferRecovery {
 public:
  ThreadBufferRecovery(int fd, uint64_t offset, uint64_t bytes,
                       const std::unordered_map<uint32_t, uint64_t>& received, uint64_t sequence);
  ~ThreadBufferRecovery();
  ThreadBufferRecovery(const ThreadBufferRecovery&) = delete;
  ThreadBufferRecovery& operator=(const ThreadBufferRecovery&) = delete;
  // Reads on for about `budget_ns` (< 0: until the end), appending the frames completed to
  // *frames; true once every slot is read (the mapping is then gone).
  bool Continue(int64_t budget_ns, std::vector<std::string>* frames);
  uint64_t events() const { return events_; }

 private:
  void Finish(std::vector<std::string>* frames);

  void* view_ = nullptr;
  uint64_t view_bytes_ = 0;
  std::unique_ptr<ThreadBufferWalk> walk_;
  ThreadBufferRead read_;
  v1::StreamMessage message_;
  uint64_t sequence_;
  uint64_t events_ = 0;
};

}  // namespace cumemtrace
