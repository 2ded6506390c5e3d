// Builds EventBatches, interns repeated strings, and frames StreamMessages for the wire.
// Used by the sender thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::tracer {

// Appends varint32(size) + the serialized message to *out.
void AppendFramedMessage(const v1::StreamMessage& message, std::string* out);

class EventEncoder {
 public:
  explicit EventEncoder(size_t max_events_per_batch = 4096)
      : max_events_per_batch_(max_events_per_batch) {}

  // Id of `value`; the first use emits an InternedString event into the current batch.
  uint32_t Intern(std::string_view value);
  // Appends an event with that timestamp to the current batch.
  v1::Event* AddEvent(uint64_t timestamp_ns);

  size_t pending_events() const { return static_cast<size_t>(batch_.events_size()); }
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

 private:
  size_t max_events_per_batch_;
  v1::EventBatch batch_;
  uint64_t next_sequence_ = 0;
  uint64_t discarded_batches_ = 0;
  uint64_t ring_position_ = 0;
  uint64_t ring_dropped_ = 0;
  uint32_t next_string_id_ = 1;
  std::unordered_map<std::string, uint32_t> string_ids_;
};

}  // namespace cumemtrace::tracer
