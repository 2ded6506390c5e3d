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

uint32_t EventEncoder::Intern(std::string_view value) {
  // std::string key: C++17 unordered_map has no heterogeneous lookup; this runs on the
  // sender thread, never in the traced program's threads.
  auto [it, inserted] = string_ids_.try_emplace(std::string(value), next_string_id_);
  if (inserted) {
    ++next_string_id_;
    v1::Event* event = batch_.add_events();
    auto* interned = event->mutable_interned_string();
    interned->set_id(it->second);
    interned->set_value(it->first);
  }
  return it->second;
}

v1::Event* EventEncoder::AddEvent(uint64_t timestamp_ns) {
  v1::Event* event = batch_.add_events();
  event->set_timestamp_ns(timestamp_ns);
  return event;
}

size_t EventEncoder::FlushBatch(std::string* out) {
  const size_t n = pending_events();
  if (n == 0) return 0;
  v1::StreamMessage message;
  batch_.set_sequence(next_sequence_++);
  batch_.set_ring_position(ring_position_);
  batch_.set_ring_dropped(ring_dropped_);
  message.mutable_batch()->Swap(&batch_);
  AppendFramedMessage(message, out);
  batch_.Clear();
  return n;
}

size_t EventEncoder::DiscardBatch(uint64_t* first_ns, uint64_t* last_ns) {
  const size_t n = pending_events();
  uint64_t first = 0;
  uint64_t last = 0;
  for (const v1::Event& event : batch_.events()) {
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
  batch_.Clear();
  return n;
}

}  // namespace cumemtrace::tracer
