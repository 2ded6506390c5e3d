#include "tracer/sending/event_encoder.h"

#include <google/protobuf/io/coded_stream.h>

namespace cumemtrace::tracer {

void AppendFramedMessage(const v1::StreamMessage& message, std::string* out) {
  const size_t body = message.ByteSizeLong();
  const size_t header = google::protobuf::io::CodedOutputStream::VarintSize32(
      static_cast<uint32_t>(body));
  const size_t start = out->size();
  out->resize(start + header + body);
  auto* p = reinterpret_cast<uint8_t*>(&(*out)[start]);
  p = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(body),
                                                                    p);
  message.SerializeWithCachedSizesToArray(p);
}

namespace {

constexpr size_t kFirstBlockBytes = 512 * 1024;

google::protobuf::ArenaOptions ArenaOptionsFor(char* first_block) {
  google::protobuf::ArenaOptions options;
  options.initial_block = first_block;
  options.initial_block_size = kFirstBlockBytes;
  options.start_block_size = 64 * 1024;
  options.max_block_size = 1024 * 1024;
  return options;
}

}  // namespace

EventEncoder::EventEncoder(size_t max_events_per_batch)
    : max_events_per_batch_(max_events_per_batch),
      first_block_(new char[kFirstBlockBytes]),
      arena_(ArenaOptionsFor(first_block_.get())) {
  ResetBatch();
}

void EventEncoder::ResetBatch() {
  message_ = nullptr;
  batch_ = nullptr;
  arena_.Reset();
  message_ = google::protobuf::Arena::CreateMessage<v1::StreamMessage>(&arena_);
  batch_ = message_->mutable_batch();
}

uint32_t EventEncoder::Intern(std::string_view value) {
  // A std::string key (C++17's unordered_map has no lookup by string_view), reused so that
  // only a new string allocates; this runs on the sender thread only.
  lookup_.assign(value.data(), value.size());
  auto [it, inserted] = string_ids_.try_emplace(lookup_, next_string_id_);
  if (inserted) {
    ++next_string_id_;
    v1::Event* event = batch_->add_events();
    auto* interned = event->mutable_interned_string();
    interned->set_id(it->second);
    interned->set_value(it->first);
  }
  return it->second;
}

v1::Event* EventEncoder::AddEvent(uint64_t timestamp_ns) {
  v1::Event* event = batch_->add_events();
  event->set_timestamp_ns(timestamp_ns);
  return event;
}

size_t EventEncoder::FlushBatch(std::string* out) {
  const size_t n = pending_events();
  if (n == 0) return 0;
  batch_->set_sequence(next_sequence_++);
  batch_->set_ring_position(ring_position_);
  batch_->set_ring_dropped(ring_dropped_);
  for (const auto& [slot, position] : buffer_positions_) {
    v1::ThreadBufferPosition* p = batch_->add_thread_buffer_positions();
    p->set_slot(slot);
    p->set_position(position);
  }
  buffer_positions_.clear();
  AppendFramedMessage(*message_, out);
  ResetBatch();
  return n;
}

size_t EventEncoder::DiscardBatch(uint64_t* first_ns, uint64_t* last_ns) {
  const size_t n = pending_events();
  uint64_t first = 0;
  uint64_t last = 0;
  for (const v1::Event& event : batch_->events()) {
    if (event.has_interned_string()) string_ids_.erase(event.interned_string().value());
    const uint64_t t = event.timestamp_ns();
    if (t == 0) continue;
    if (first == 0 || t < first) first = t;
    if (t > last) last = t;
  }
  if (first_ns != nullptr) *first_ns = first;
  if (last_ns != nullptr) *last_ns = last;
  // The sequence number still advances: the collector sees the gap.
  if (n > 0) {
    ++next_sequence_;
    ++discarded_batches_;
  }
  ResetBatch();
  return n;
}

}  // namespace cumemtrace::tracer
