// The decoder reads EventBatch frames on a fast path and hands anything it cannot vouch for
// to protobuf (stream_decoder.h). These tests make the fast path decline, frame by frame,
// and check that the summary does not change: which path ran must never show.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendLengthDelimited(uint32_t field, const std::string& bytes, std::string* out) {
  AppendVarint(field << 3 | 2, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes);
}

// Re-encodes each batch frame by hand, appending `extra` to every event's bytes.
std::vector<v1::TraceChunk> WithExtraEventBytes(std::vector<v1::TraceChunk> chunks,
                                                const std::string& extra) {
  for (v1::TraceChunk& chunk : chunks) {
    v1::StreamMessage message;
    if (!chunk.has_wire_frame() || !message.ParseFromString(chunk.wire_frame()) ||
        !message.has_batch()) {
      continue;
    }
    std::string batch;
    AppendVarint(1 << 3 | 0, &batch);
    AppendVarint(message.batch().sequence(), &batch);
    for (const v1::Event& event : message.batch().events()) {
      AppendLengthDelimited(2, event.SerializeAsString() + extra, &batch);
    }
    std::string frame;
    AppendLengthDelimited(2, batch, &frame);
    chunk.set_wire_frame(frame);
  }
  return chunks;
}

std::vector<v1::TraceChunk> TrainingLikeTrace() {
  testing::StreamBuilder s(1, 100);
  s.String(1, "forward").String(2, "cudaMallocAsync").String(3, "gemm");
  s.Device(0, "GPU", 80ull << 30);
  s.Push(1000, 7, 1);
  s.Alloc(1100, 0, 0x1000, 4096, testing::kDevice, 7, 2);
  s.Kernel(1200, 1500, 0, 7, 3);
  s.Alloc(1300, 0, 0x9000, 8192, testing::kDevice, 7, 2);
  s.Flush();
  s.Free(1400, 0, 0x1000, 4096, testing::kDevice, 7);
  s.Pop(1600, 7);
  s.Mark(1700, 7, 1);
  s.Exit(2000, 0);
  return s.Chunks();
}

TEST(FastDecode, UnknownEventFieldGivesTheSameSummaryThroughProtobuf) {
  const std::vector<v1::TraceChunk> plain = TrainingLikeTrace();
  // Field 15 (varint): unknown to this reader, skipped by protobuf, declined by the fast path.
  const std::string unknown_field = std::string("\x78\x01", 2);
  const auto expected = testing::Analyze(plain);
  const auto declined = testing::Analyze(WithExtraEventBytes(plain, unknown_field));
  EXPECT_EQ(SummaryJson(*declined), SummaryJson(*expected));
  EXPECT_GT(expected->processes.at(0).events, 0u);
}

TEST(FastDecode, HandEncodedBatchesReadAsTheGeneratedEncodersDo) {
  const std::vector<v1::TraceChunk> plain = TrainingLikeTrace();
  const auto expected = testing::Analyze(plain);
  const auto reencoded = testing::Analyze(WithExtraEventBytes(plain, std::string()));
  EXPECT_EQ(SummaryJson(*reencoded), SummaryJson(*expected));
}

// Sets fields the decoder does not use but the tracer sends: the shared ring's position on
// every batch and launch_only on every kernel (kernels recorded at their launch).
std::vector<v1::TraceChunk> WithRingAndLaunchOnlyFields(std::vector<v1::TraceChunk> chunks) {
  for (v1::TraceChunk& chunk : chunks) {
    v1::StreamMessage message;
    if (!chunk.has_wire_frame() || !message.ParseFromString(chunk.wire_frame()) ||
        !message.has_batch()) {
      continue;
    }
    message.mutable_batch()->set_ring_position(1u << 20);
    message.mutable_batch()->set_ring_dropped(3);
    for (v1::Event& event : *message.mutable_batch()->mutable_events()) {
      if (event.has_kernel()) event.mutable_kernel()->set_launch_only(true);
    }
    chunk.set_wire_frame(message.SerializeAsString());
  }
  return chunks;
}

TEST(FastDecode, UnusedRingAndLaunchOnlyFieldsReadTheSameOnBothPaths) {
  const std::vector<v1::TraceChunk> plain = TrainingLikeTrace();
  const std::vector<v1::TraceChunk> flagged = WithRingAndLaunchOnlyFields(plain);
  const std::string unknown_field = std::string("\x78\x01", 2);
  const auto expected = testing::Analyze(plain);
  const auto fast = testing::Analyze(flagged);
  const auto slow = testing::Analyze(WithExtraEventBytes(flagged, unknown_field));
  EXPECT_EQ(SummaryJson(*fast), SummaryJson(*expected));
  EXPECT_EQ(SummaryJson(*slow), SummaryJson(*expected));
  EXPECT_GT(expected->processes.at(0).events, 0u);
}

TEST(FastDecode, SecondPayloadInOneEventIsLeftToProtobuf) {
  const std::vector<v1::TraceChunk> plain = TrainingLikeTrace();
  // Every event also carries an empty Nvtx payload after its own. protobuf replaces another
  // oneof member (memory, kernel: an Nvtx with no operation, which accounts for nothing) but
  // merges into an Nvtx of the same member (push, pop, mark survive).
  std::string empty_nvtx;
  AppendLengthDelimited(8, std::string(), &empty_nvtx);
  const auto merged = testing::Analyze(WithExtraEventBytes(plain, empty_nvtx));
  ASSERT_EQ(merged->processes.size(), 1u);
  EXPECT_EQ(merged->processes[0].events, 3u);
  EXPECT_EQ(merged->processes[0].nvtx_marks, 1u);
}

TEST(FastDecode, LongAndPaddedVarintsReadAsProtobufReadsThem) {
  const std::vector<v1::TraceChunk> plain = TrainingLikeTrace();
  const std::string unknown_field = std::string("\x78\x01", 2);
  // A second timestamp field after each event's own (the last one counts): ten-byte
  // encodings, canonical or padded with continuation bytes.
  const std::vector<std::string> timestamps = {
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11),  // 2^64 - 1
      std::string("\x08\x81\x80\x80\x80\x80\x80\x80\x80\x80\x00", 11),  // 1, padded
      std::string("\x08\xe8\x87\x80\x00", 5),                            // 1000, padded
      std::string("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 11),  // 2^63
  };
  for (const std::string& timestamp : timestamps) {
    const auto fast = testing::Analyze(WithExtraEventBytes(plain, timestamp));
    const auto slow = testing::Analyze(WithExtraEventBytes(plain, timestamp + unknown_field));
    EXPECT_EQ(SummaryJson(*fast), SummaryJson(*slow));
    EXPECT_FALSE(fast->processes.at(0).damaged);
  }
  // Beyond what a varint holds (a tenth byte above 1, eleven bytes): the fast path declines
  // them, so the outcome is protobuf's either way (the damage notes name frame sizes, which
  // the unknown field changes).
  const std::vector<std::string> invalid = {
      std::string("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 11),
      std::string("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 12),
  };
  for (const std::string& timestamp : invalid) {
    const auto fast = testing::Analyze(WithExtraEventBytes(plain, timestamp));
    const auto slow = testing::Analyze(WithExtraEventBytes(plain, timestamp + unknown_field));
    EXPECT_EQ(fast->processes.at(0).damage.size(), slow->processes.at(0).damage.size());
    EXPECT_EQ(fast->processes.at(0).events, slow->processes.at(0).events);
  }
}

}  // namespace
}  // namespace cumemtrace
