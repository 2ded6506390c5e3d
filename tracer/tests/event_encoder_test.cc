#include "tracer/sending/event_encoder.h"

#include <gtest/gtest.h>

#include <google/protobuf/io/coded_stream.h>

namespace cumemtrace::tracer {
namespace {

std::vector<v1::StreamMessage> Parse(const std::string& wire) {
  std::vector<v1::StreamMessage> out;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                                            static_cast<int>(wire.size()));
  uint32_t size = 0;
  while (in.ReadVarint32(&size)) {
    std::string body;
    EXPECT_TRUE(in.ReadString(&body, static_cast<int>(size)));
    out.emplace_back();
    EXPECT_TRUE(out.back().ParseFromString(body));
  }
  return out;
}

TEST(EventEncoder, FramesBatchesWithConsecutiveSequenceNumbers) {
  EventEncoder encoder(/*max_events_per_batch=*/2);
  std::string wire;
  encoder.AddEvent(1)->mutable_process_exit()->set_exit_code(1);
  EXPECT_FALSE(encoder.batch_full());
  encoder.AddEvent(2)->mutable_process_exit()->set_exit_code(2);
  EXPECT_TRUE(encoder.batch_full());
  EXPECT_EQ(encoder.FlushBatch(&wire), 2u);
  EXPECT_EQ(encoder.FlushBatch(&wire), 0u);  // empty batches are not sent
  encoder.AddEvent(3)->mutable_process_exit()->set_exit_code(3);
  EXPECT_EQ(encoder.FlushBatch(&wire), 1u);
  const auto messages = Parse(wire);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].batch().sequence(), 0u);
  EXPECT_EQ(messages[0].batch().events_size(), 2);
  EXPECT_EQ(messages[1].batch().sequence(), 1u);
  EXPECT_EQ(messages[1].batch().events(0).timestamp_ns(), 3u);
}

TEST(EventEncoder, ThreadBufferPositionsGoWithTheNextBatchSentAndOnlyOnce) {
  EventEncoder encoder;
  std::string wire;
  encoder.AddEvent(1)->mutable_process_exit()->set_exit_code(0);
  encoder.AddThreadBufferPositions({{3, 40, 0, 0, 0, {}}, {5, 7, 0, 0, 0, {}}});
  encoder.AddThreadBufferPositions({{3, 52, 0, 0, 0, {}}});  // the later position of slot 3
  // A discarded batch never reached the collector: the positions wait for the next one.
  EXPECT_EQ(encoder.DiscardBatch(), 1u);
  encoder.AddEvent(2)->mutable_process_exit()->set_exit_code(0);
  encoder.FlushBatch(&wire);
  encoder.AddEvent(3)->mutable_process_exit()->set_exit_code(0);
  encoder.FlushBatch(&wire);
  const auto messages = Parse(wire);
  ASSERT_EQ(messages.size(), 2u);
  const auto& positions = messages[0].batch().thread_buffer_positions();
  ASSERT_EQ(positions.size(), 2);
  EXPECT_EQ(positions[0].slot(), 3u);
  EXPECT_EQ(positions[0].position(), 52u);
  EXPECT_EQ(positions[1].slot(), 5u);
  EXPECT_EQ(positions[1].position(), 7u);
  EXPECT_EQ(messages[1].batch().thread_buffer_positions_size(), 0);
}

TEST(EventEncoder, LargeFramesUseMultiByteLengthPrefix) {
  EventEncoder encoder;
  std::string wire;
  const std::string long_name(100000, 'k');
  encoder.Intern(long_name);
  encoder.FlushBatch(&wire);
  const auto messages = Parse(wire);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].batch().events(0).interned_string().value(), long_name);
}

TEST(EventEncoder, InternsOnceAndRedefinesAfterADiscardedBatch) {
  EventEncoder encoder;
  std::string wire;
  const uint32_t first = encoder.Intern("forward");
  EXPECT_EQ(encoder.Intern("forward"), first);
  EXPECT_EQ(encoder.pending_events(), 1u);
  EXPECT_EQ(encoder.DiscardBatch(), 1u);  // the definition never reached the collector
  const uint32_t second = encoder.Intern("forward");
  EXPECT_NE(second, first);  // ids are never reused
  encoder.FlushBatch(&wire);
  const auto messages = Parse(wire);
  ASSERT_EQ(messages.size(), 1u);
  // The discarded batch still used sequence 0: the collector sees the gap.
  EXPECT_EQ(messages[0].batch().sequence(), 1u);
  EXPECT_EQ(messages[0].batch().events(0).interned_string().id(), second);
}

}  // namespace
}  // namespace cumemtrace::tracer
