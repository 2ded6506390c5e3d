#include "collector/format/framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cumemtrace {
namespace {

std::vector<std::string> DecodeAll(FrameDecoder& decoder) {
  std::vector<std::string> frames;
  std::string_view frame;
  while (decoder.Next(&frame) == FrameDecoder::Status::kFrame) frames.emplace_back(frame);
  return frames;
}

TEST(Framing, RoundTripsFramesOfEverySizeClass) {
  // 0, 1-byte, 2-byte and 3-byte length prefixes.
  const std::vector<std::string> bodies{"", "x", std::string(127, 'a'), std::string(128, 'b'),
                                        std::string(20000, 'c')};
  std::string wire;
  for (const auto& body : bodies) AppendFrame(body, &wire);
  FrameDecoder decoder(1 << 20);
  decoder.Append(wire.data(), wire.size());
  EXPECT_EQ(DecodeAll(decoder), bodies);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.consumed_bytes(), wire.size());
}

TEST(Framing, SplitDeliveryByteByByteGivesTheSameFrames) {
  const std::vector<std::string> bodies{"hello", std::string(300, 'z'), "", "end"};
  std::string wire;
  for (const auto& body : bodies) AppendFrame(body, &wire);
  FrameDecoder decoder(1 << 20);
  std::vector<std::string> got;
  for (char byte : wire) {
    decoder.Append(&byte, 1);
    for (const auto& f : DecodeAll(decoder)) got.push_back(f);
  }
  EXPECT_EQ(got, bodies);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

TEST(Framing, RejectsALengthAboveTheLimitBeforeBufferingIt) {
  std::string wire;
  AppendFrame(std::string(101, 'x'), &wire);
  FrameDecoder decoder(100);
  decoder.Append(wire.data(), 2);  // only the prefix: the limit check must not wait for data
  std::string_view frame;
  EXPECT_EQ(decoder.Next(&frame), FrameDecoder::Status::kError);
  EXPECT_NE(decoder.error().find("exceeds"), std::string::npos);
  // Broken for good.
  decoder.Append(wire.data() + 2, wire.size() - 2);
  EXPECT_EQ(decoder.Next(&frame), FrameDecoder::Status::kError);
}

TEST(Framing, AcceptsAFrameExactlyAtTheLimit) {
  std::string wire;
  AppendFrame(std::string(100, 'x'), &wire);
  FrameDecoder decoder(100);
  decoder.Append(wire.data(), wire.size());
  std::string_view frame;
  ASSERT_EQ(decoder.Next(&frame), FrameDecoder::Status::kFrame);
  EXPECT_EQ(frame.size(), 100u);
}

TEST(Framing, RejectsASixByteVarint) {
  const std::string wire("\x80\x80\x80\x80\x80\x01", 6);
  FrameDecoder decoder(~size_t{0});
  decoder.Append(wire.data(), wire.size());
  std::string_view frame;
  EXPECT_EQ(decoder.Next(&frame), FrameDecoder::Status::kError);
}

TEST(Framing, IncompletePrefixAsksForMore) {
  FrameDecoder decoder(1 << 20);
  decoder.Append("\x80", 1);
  std::string_view frame;
  EXPECT_EQ(decoder.Next(&frame), FrameDecoder::Status::kNeedMore);
  EXPECT_EQ(decoder.pending_bytes(), 1u);
}

}  // namespace
}  // namespace cumemtrace
