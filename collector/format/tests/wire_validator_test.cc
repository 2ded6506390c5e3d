#include "collector/format/wire_validator.h"

#include <gtest/gtest.h>

#include <string>

namespace cumemtrace {
namespace {

std::string Handshake() {
  v1::StreamMessage m;
  m.mutable_handshake()->set_magic(v1::HANDSHAKE_MAGIC);
  m.mutable_handshake()->set_protocol_version(v1::PROTOCOL_VERSION);
  return m.SerializeAsString();
}

// A batch with a stack of `frames` frame ids (first id `first_frame`), stack id `stack_id`.
std::string StackBatch(uint32_t stack_id, int frames, uint32_t first_frame = 1) {
  v1::StreamMessage m;
  v1::EventBatch* batch = m.mutable_batch();
  v1::StackFrame* frame = batch->add_events()->mutable_stack_frame();
  frame->set_id(1);
  frame->set_kind(v1::STACK_FRAME_KIND_PYTHON);
  v1::Stack* stack = batch->add_events()->mutable_stack();
  stack->set_id(stack_id);
  for (int i = 0; i < frames; ++i) stack->add_frame_ids(first_frame);
  return m.SerializeAsString();
}

WireStreamValidator::Verdict After(const std::string& batch, std::string* error) {
  WireStreamValidator validator;
  EXPECT_EQ(validator.Check(Handshake(), error), WireStreamValidator::Verdict::kHandshake);
  return validator.Check(batch, error);
}

TEST(WireStreamValidator, AcceptsAStackTable) {
  std::string error;
  EXPECT_EQ(After(StackBatch(1, 3), &error), WireStreamValidator::Verdict::kBatch) << error;
  EXPECT_EQ(After(StackBatch(2, v1::MAX_STACK_FRAMES), &error),
            WireStreamValidator::Verdict::kBatch)
      << error;
}

TEST(WireStreamValidator, RefusesStacksThatBreakTheRules) {
  std::string error;
  EXPECT_EQ(After(StackBatch(0, 3), &error), WireStreamValidator::Verdict::kRefused);
  EXPECT_NE(error.find("stack has id 0"), std::string::npos) << error;
  EXPECT_EQ(After(StackBatch(1, 0), &error), WireStreamValidator::Verdict::kRefused);
  EXPECT_EQ(After(StackBatch(1, v1::MAX_STACK_FRAMES + 1), &error),
            WireStreamValidator::Verdict::kRefused);
  EXPECT_NE(error.find("257 frames"), std::string::npos) << error;
  EXPECT_EQ(After(StackBatch(1, 2, 0), &error), WireStreamValidator::Verdict::kRefused);
  v1::StreamMessage m;
  m.mutable_batch()->add_events()->mutable_native_module()->set_path("/lib/x.so");
  EXPECT_EQ(After(m.SerializeAsString(), &error), WireStreamValidator::Verdict::kRefused);
}

// Batches of a few events and of more than the arena's first block, one after the other on
// one connection: each parses whole, whatever the one before it left in the arena's blocks.
TEST(WireStreamValidator, ParsesEachBatchWholeAcrossSizes) {
  WireStreamValidator validator;
  std::string error;
  ASSERT_EQ(validator.Check(Handshake(), &error), WireStreamValidator::Verdict::kHandshake);
  for (int events : {3, 40000, 1, 40000, 7}) {
    v1::StreamMessage m;
    v1::EventBatch* batch = m.mutable_batch();
    batch->set_sequence(static_cast<uint64_t>(events));
    for (int i = 0; i < events; ++i) {
      v1::Event* event = batch->add_events();
      event->set_timestamp_ns(static_cast<uint64_t>(i) * 3 + 1);
      event->mutable_interned_string()->set_value("s" + std::to_string(i));
    }
    ASSERT_EQ(validator.Check(m.SerializeAsString(), &error), WireStreamValidator::Verdict::kBatch)
        << error;
    const v1::EventBatch& parsed = validator.message().batch();
    ASSERT_EQ(parsed.events_size(), events);
    EXPECT_EQ(parsed.sequence(), static_cast<uint64_t>(events));
    EXPECT_EQ(parsed.events(events - 1).timestamp_ns(), static_cast<uint64_t>(events - 1) * 3 + 1);
    EXPECT_EQ(parsed.events(events - 1).interned_string().value(),
              "s" + std::to_string(events - 1));
  }
}

}  // namespace
}  // namespace cumemtrace
