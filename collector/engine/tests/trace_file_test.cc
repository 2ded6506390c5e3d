#include "collector/format/trace_file.h"

#include <gtest/gtest.h>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"

namespace cumemtrace {
namespace {

using testing::FileBytes;
using testing::StreamBuilder;
using testing::WriteTempFile;

std::vector<v1::TraceChunk> SmallTrace() {
  StreamBuilder s(1, 100);
  s.Device(0, "GPU", 1 << 30).Alloc(10, 0, 0x1000, 4096).Flush();
  s.Alloc(20, 0, 0x2000, 8192).Free(30, 0, 0x1000, 4096).Flush();
  s.Exit(40, 0);
  return s.Chunks();
}

TEST(TraceFile, ReaderReturnsEveryChunkThenEnd) {
  const auto chunks = SmallTrace();
  const std::string path = WriteTempFile("whole.cmtrace", FileBytes(chunks));
  TraceFileReader reader;
  ASSERT_TRUE(reader.Open(path)) << reader.error();
  v1::TraceChunk chunk;
  ASSERT_EQ(reader.Next(&chunk), TraceFileReader::Result::kChunk);
  EXPECT_TRUE(chunk.has_file_header());
  for (const auto& expected : chunks) {
    ASSERT_EQ(reader.Next(&chunk), TraceFileReader::Result::kChunk);
    EXPECT_EQ(chunk.SerializeAsString(), expected.SerializeAsString());
  }
  EXPECT_EQ(reader.Next(&chunk), TraceFileReader::Result::kEnd);
  EXPECT_EQ(reader.consumed_bytes(), reader.file_bytes());
}

TEST(TraceFile, CutAtEveryByteReadsWholeChunksThenTruncated) {
  const auto chunks = SmallTrace();
  const std::string bytes = FileBytes(chunks);
  // Chunk end offsets, to know how many whole chunks precede each cut (the closing FileEnd
  // is the reader's own, never returned).
  std::vector<size_t> ends;
  {
    std::string out(TraceFilePreamble());
    v1::TraceChunk header;
    header.mutable_file_header()->set_writer_version("test");
    header.mutable_file_header()->set_hostname("node1");
    AppendChunk(header, &out);
    ends.push_back(out.size());
    for (const auto& c : chunks) {
      AppendChunk(c, &out);
      ends.push_back(out.size());
    }
    AppendFileEnd(out.size(), &out);
    ASSERT_EQ(out, bytes);
  }
  for (size_t cut = 8; cut <= bytes.size(); ++cut) {
    const std::string path = WriteTempFile("cut.cmtrace", bytes.substr(0, cut));
    TraceFileReader reader;
    ASSERT_TRUE(reader.Open(path)) << "cut " << cut << ": " << reader.error();
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= cut) ++whole;
    v1::TraceChunk chunk;
    size_t got = 0;
    TraceFileReader::Result r;
    while ((r = reader.Next(&chunk)) == TraceFileReader::Result::kChunk) ++got;
    EXPECT_EQ(got, whole) << "cut " << cut;
    const bool complete = cut == bytes.size();
    EXPECT_EQ(r, complete ? TraceFileReader::Result::kEnd : TraceFileReader::Result::kTruncated)
        << "cut " << cut;

    // The analyzer still produces a report, marked truncated unless the file is whole: a cut
    // at a chunk boundary lacks the FileEnd.
    std::string error;
    auto report = testing::AnalyzeFile(path, AnalysisOptions(), &error);
    ASSERT_NE(report, nullptr) << "cut " << cut << ": " << error;
    EXPECT_EQ(report->truncated, !complete) << "cut " << cut;
    if (complete) continue;
    const size_t last_whole = whole == 0 ? 8 : ends[whole - 1];
    if (last_whole == cut) {
      EXPECT_EQ(report->truncation_reason,
                "the file ends after " + std::to_string(cut) +
                    " bytes, at a chunk boundary, without its end record (its writer "
                    "stopped before closing it, or the copy is incomplete)");
    } else {
      EXPECT_EQ(report->truncation_reason, "the file ends inside a chunk after " +
                                               std::to_string(last_whole) + " of " +
                                               std::to_string(cut) + " bytes")
          << report->truncation_reason;
    }
  }
}

TEST(TraceFile, WrongPreambleIsNotATraceFile) {
  const std::string path = WriteTempFile("notatrace.cmtrace", "HELLOWORLD and more");
  TraceFileReader reader;
  EXPECT_FALSE(reader.Open(path));
  EXPECT_NE(reader.error().find("not a cumemtrace trace file"), std::string::npos);
  std::string error;
  EXPECT_EQ(testing::AnalyzeFile(path, AnalysisOptions(), &error), nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
}

TEST(TraceFile, WrongVersionSaysWhichVersion) {
  const std::string path = WriteTempFile("v9.cmtrace", std::string("CMTRACE\x09", 8));
  TraceFileReader reader;
  EXPECT_FALSE(reader.Open(path));
  EXPECT_NE(reader.error().find("version 9"), std::string::npos) << reader.error();
  EXPECT_NE(reader.error().find(path), std::string::npos) << reader.error();
}

TEST(TraceFile, MissingFileNamesTheFile) {
  std::string error;
  EXPECT_EQ(testing::AnalyzeFile("/nonexistent/x.cmtrace", AnalysisOptions(), &error), nullptr);
  EXPECT_NE(error.find("/nonexistent/x.cmtrace"), std::string::npos) << error;
}

TEST(TraceFile, CorruptChunkAfterValidStartGivesTruncatedReport) {
  std::string bytes = FileBytes(SmallTrace());
  bytes += std::string("\x05\xff\xff\xff\xff\xff", 6);  // a 5-byte chunk after the end
  const std::string path = WriteTempFile("corrupt.cmtrace", bytes);
  std::string error;
  auto report = testing::AnalyzeFile(path, AnalysisOptions(), &error);
  ASSERT_NE(report, nullptr) << error;
  EXPECT_TRUE(report->truncated);
  EXPECT_NE(report->truncation_reason.find("damaged file: bytes follow its end record"),
            std::string::npos)
      << report->truncation_reason;
  ASSERT_EQ(report->processes.size(), 1u);
  EXPECT_EQ(report->processes[0].devices.at(0).peak.bytes, 4096u + 8192u);
}

TEST(TraceFile, WireFrameChunkParsesWithTheGeneratedParser) {
  for (uint32_t stream_id : {0u, 1u, 300u, 0xffffffffu}) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{70000}}) {
      std::string frame(size, '\0');
      for (size_t i = 0; i < size; ++i) frame[i] = static_cast<char>(i * 7);
      std::string out;
      AppendWireFrameChunk(stream_id, frame, &out);
      FrameDecoder decoder(v1::MAX_FILE_CHUNK_BYTES);
      decoder.Append(out.data(), out.size());
      std::string_view body;
      ASSERT_EQ(decoder.Next(&body), FrameDecoder::Status::kFrame);
      EXPECT_EQ(decoder.pending_bytes(), 0u);
      v1::TraceChunk chunk;
      ASSERT_TRUE(chunk.ParseFromArray(body.data(), static_cast<int>(body.size())));
      EXPECT_NE(chunk.checksum(), 0u);  // written last, where the reader looks for it
      EXPECT_EQ(chunk.stream_id(), stream_id);
      EXPECT_EQ(chunk.content_case(), v1::TraceChunk::kWireFrame);
      EXPECT_EQ(chunk.wire_frame(), frame);
    }
  }
}

}  // namespace
}  // namespace cumemtrace
