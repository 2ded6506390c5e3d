// Builds EventBatches, interns repeated strings, and frames StreamMessages for the wire.
// Used by the sender thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

// Also google::protobuf::Arena's header, which it includes from a system include path:
// included here directly, protobuf's own -Wshadow warnings would stop the build.
#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/thread_buffers.h"

namespace cumemtrace::tracer {

// Appends varint32(size) + the serialized message to *out.
void AppendFramedMessage(const v1::StreamMessage& message, std::string* out);

class EventEncoder {
 public:
  explicit EventEncoder(size_t max_events_per_batch = 4096);
  EventEncoder(const EventEncoder&) = delete;
  EventEncoder& operator=(const EventEncoder&) = delete;

  // Id of `value`; the first use emits an InternedString event into the current batch.
  uint32_t Intern(std::string_view value);
  // Appends an event with that timestamp to the current batch.
  v1::Event* AddEvent(uint64_t timestamp_ns);

  size_t pending_events() const { return static_cast<size_t>(batch_->events_size()); }
  bool batch_full() const { return pending_events() >= max_events_per_batch_; }

  // Frames the current batch (if it has events) onto *out and starts a new one. Returns the
  // number of events framed.
  size_t FlushBatch(std::string* out);
  // Throws the current batch away (the caller counts its events as dropped). Interned ids
  // defined in it are forgotten so later uses define them again. When given, *first_ns and
  // *last_ns receive the time span of the discarded events (0 when none had a timestamp).
  size_t DiscardBatch(uint64_t* first_ns = nullptr, uint64_t* last_ns = nullptr);

  uint64_t next_sequence() const { return next_sequence_; }
  // Batches thrown away so far: definitions made by other interners (stacks) before a
  // change of this count may have been lost and are made again.
  uint64_t discarded_batches() const { return discarded_batches_; }
  // Copied into each batch flushed from now on (EventBatch.ring_position, ring_dropped): how
  // far in the shared ring the events added so far reach.
  void set_ring_cursor(uint64_t position, uint64_t dropped) {
    ring_position_ = position;
    ring_dropped_ = dropped;
  }
  // Carried by the next batch flushed (EventBatch.thread_buffer_positions): how far the
  // events added so far reach into each per-thread buffer named. Kept across a discarded
  // batch: a later one still says it.
  void AddThreadBufferPositions(const std::vector<ThreadBuffers::SlotPosition>& positions) {
    for (const ThreadBuffers::SlotPosition& p : positions) {
      bool found = false;
      for (auto& [slot, position] : buffer_positions_) {
        if (slot == p.slot) {
          position = std::max(position, p.position);
          found = true;
        }
      }
      if (!found) buffer_positions_.emplace_back(p.slot, p.position);
    }
  }

 private:
  // The batch lives, inside the StreamMessage that frames it, on an arena that is reset once
  // it is framed or discarded: its events cost no allocation of their own (a freed and
  // remade Event and payload per event were a fifth of the sender's time in a burst), and
  // the arena's first block, which Reset keeps, holds a whole batch of small events.
  void ResetBatch();
  size_t max_events_per_batch_;
  std::unique_ptr<char[]> first_block_;
  google::protobuf::Arena arena_;
  v1::StreamMessage* message_ = nullptr;
  v1::EventBatch* batch_ = nullptr;  // message_'s
  // Intern's key, reused: a lookup of a string already interned allocates nothing.
  std::string lookup_;
  uint64_t next_sequence_ = 0;
  uint64_t discarded_batches_ = 0;
  uint64_t ring_position_ = 0;
  uint64_t ring_dropped_ = 0;
  std::vector<std::pair<uint32_t, uint64_t>> buffer_positions_;
  uint32_t next_string_id_ = 1;
  std::unordered_map<std::string, uint32_t> string_ids_;
};

}  // namespace cumemtrace::tracer
