// The trace file's integrity: every chunk's checksum, the closing FileEnd, zeros where a
// chunk should begin, and version 1 files (no checksums) still read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collector/format/framing.h"
#include "collector/format/trace_file.h"

namespace cumemtrace {
namespace {

using Result = TraceFileReader::Result;

std::vector<v1::TraceChunk> SomeChunks() {
  std::vector<v1::TraceChunk> chunks(4);
  chunks[0].mutable_file_header()->set_writer_version("test");
  chunks[0].mutable_file_header()->set_hostname("node1");
  chunks[1].set_stream_id(1);
  chunks[1].mutable_collector()->mutable_opened()->set_peer_pid(4242);
  chunks[2].set_stream_id(1);
  chunks[2].set_wire_frame(std::string("\x12\x04\x0a\x02\x08\x01", 6));
  chunks[3].set_stream_id(1);
  chunks[3].mutable_collector()->mutable_closed()->set_reason(v1::CLOSE_REASON_EOF);
  return chunks;
}

// The file as a writer makes it; *ends gets the end offset of each chunk (FileEnd excluded).
std::string CurrentFile(const std::vector<v1::TraceChunk>& chunks,
                        std::vector<size_t>* ends = nullptr) {
  std::string out(TraceFilePreamble());
  for (const v1::TraceChunk& chunk : chunks) {
    if (chunk.content_case() == v1::TraceChunk::kWireFrame) {
      AppendWireFrameChunk(chunk.stream_id(), chunk.wire_frame(), &out);
    } else {
      AppendChunk(chunk, &out);
    }
    if (ends != nullptr) ends->push_back(out.size());
  }
  AppendFileEnd(out.size(), &out);
  return out;
}

// A version 1 file: the same chunks, framed without checksums, no FileEnd.
std::string Version1File(const std::vector<v1::TraceChunk>& chunks) {
  std::string out("CMTRACE\x01", 8);
  for (const v1::TraceChunk& chunk : chunks) AppendFrame(chunk.SerializeAsString(), &out);
  return out;
}

struct ReadBack {
  bool opened = false;
  std::vector<std::string> chunks;  // serialized
  Result end = Result::kError;
  std::string error;
};

ReadBack Read(const std::string& bytes) {
  ReadBack r;
  TraceFileReader reader;
  r.opened = reader.OpenBytes(bytes, "t");
  if (!r.opened) {
    r.error = reader.error();
    return r;
  }
  v1::TraceChunk chunk;
  while ((r.end = reader.Next(&chunk)) == Result::kChunk) {
    r.chunks.push_back(chunk.SerializeAsString());
  }
  r.error = reader.error();
  return r;
}

std::vector<std::string> Serialized(const std::vector<v1::TraceChunk>& chunks) {
  std::vector<std::string> out;
  for (const v1::TraceChunk& chunk : chunks) out.push_back(chunk.SerializeAsString());
  return out;
}

TEST(TraceFileFormat, WholeFileReadsEveryChunkThenEndWithoutTheFileEnd) {
  const auto chunks = SomeChunks();
  const ReadBack r = Read(CurrentFile(chunks));
  ASSERT_TRUE(r.opened) << r.error;
  EXPECT_EQ(r.chunks, Serialized(chunks));
  EXPECT_EQ(r.end, Result::kEnd) << r.error;
}

TEST(TraceFileFormat, WireFrameChunkIsWhatTheGeneratedSerializerMakesPlusItsChecksum) {
  v1::TraceChunk chunk;
  chunk.set_stream_id(300);
  chunk.set_wire_frame(std::string(200, 'w'));
  std::string by_hand;
  std::string generated;
  AppendWireFrameChunk(chunk.stream_id(), chunk.wire_frame(), &by_hand);
  AppendChunk(chunk, &generated);
  EXPECT_EQ(by_hand, generated);
}

// CRC-32 finds every error of up to 3 bits in messages this short; a flip in a length prefix
// moves the checksum itself. No single flip anywhere may read back as a whole, clean file.
TEST(TraceFileFormat, EverySingleBitFlipIsDetectedAndSaysWhere) {
  const std::string bytes = CurrentFile(SomeChunks());
  const std::vector<std::string> whole = Serialized(SomeChunks());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      const ReadBack r = Read(damaged);
      const std::string at = "byte " + std::to_string(i) + " bit " + std::to_string(bit);
      if (!r.opened) {
        EXPECT_LT(i, TraceFilePreamble().size()) << at << ": " << r.error;
        continue;
      }
      EXPECT_NE(r.end, Result::kEnd) << at;
      EXPECT_NE(r.error.find("byte"), std::string::npos) << at << ": " << r.error;
      // What came back is a prefix of the chunks written, each intact.
      ASSERT_LE(r.chunks.size(), whole.size()) << at;
      for (size_t c = 0; c < r.chunks.size(); ++c) EXPECT_EQ(r.chunks[c], whole[c]) << at;
    }
  }
}

TEST(TraceFileFormat, DamagedChunkIsNamedByItsOffsetAndNumber) {
  std::vector<size_t> ends;
  std::string bytes = CurrentFile(SomeChunks(), &ends);
  bytes[ends[1] + 3] ^= 0x20;  // inside the third chunk
  const ReadBack r = Read(bytes);
  EXPECT_EQ(r.end, Result::kError);
  EXPECT_EQ(r.chunks.size(), 2u);
  EXPECT_NE(r.error.find("damaged chunk at byte " + std::to_string(ends[1]) + " of " +
                         std::to_string(bytes.size()) + " (chunk 3, "),
            std::string::npos)
      << r.error;
}

TEST(TraceFileFormat, CutAtAChunkBoundaryIsCutShortNotClean) {
  std::vector<size_t> ends;
  const std::string bytes = CurrentFile(SomeChunks(), &ends);
  for (size_t n = 0; n < ends.size(); ++n) {
    const ReadBack r = Read(bytes.substr(0, ends[n]));
    EXPECT_EQ(r.chunks.size(), n + 1);
    EXPECT_EQ(r.end, Result::kTruncated) << "cut after chunk " << n + 1;
    EXPECT_EQ(r.error, "the file ends after " + std::to_string(ends[n]) +
                           " bytes, at a chunk boundary, without its end record (its "
                           "writer stopped before closing it, or the copy is incomplete)");
  }
}

TEST(TraceFileFormat, ZerosAfterTheEndOrInsteadOfChunksAreDamage) {
  const auto chunks = SomeChunks();
  const std::string current = CurrentFile(chunks);
  const std::string zeros(1 << 20, '\0');
  const ReadBack after_end = Read(current + zeros);
  EXPECT_EQ(after_end.end, Result::kError);
  EXPECT_EQ(after_end.chunks, Serialized(chunks));
  EXPECT_EQ(after_end.error, "damaged file: bytes follow its end record, from byte " +
                                 std::to_string(current.size()) + " of " +
                                 std::to_string(current.size() + zeros.size()));
  // A version 1 file has no end record: the first zero-length chunk stops it.
  const std::string old = Version1File(chunks);
  const ReadBack padded = Read(old + zeros);
  EXPECT_EQ(padded.end, Result::kError);
  EXPECT_EQ(padded.chunks, Serialized(chunks));
  EXPECT_EQ(padded.error.rfind("damaged file at byte " + std::to_string(old.size()) + " of " +
                                   std::to_string(old.size() + zeros.size()) +
                                   ": zero bytes where a chunk should begin",
                               0),
            0u)
      << padded.error;
}

TEST(TraceFileFormat, MissingOrRepeatedWholeChunksAreFoundByTheFileEnd) {
  std::vector<size_t> ends;
  const std::string bytes = CurrentFile(SomeChunks(), &ends);
  const std::string third = bytes.substr(ends[1], ends[2] - ends[1]);
  std::string missing = bytes;
  missing.erase(ends[1], third.size());
  std::string repeated = bytes;
  repeated.insert(ends[2], third);
  for (const std::string& damaged : {missing, repeated}) {
    const ReadBack r = Read(damaged);
    EXPECT_EQ(r.end, Result::kError);
    EXPECT_NE(r.error.find("whole chunks are missing or repeated"), std::string::npos) << r.error;
  }
}

TEST(TraceFileFormat, Version1FilesStillReadAndEndAtAnyChunkBoundary) {
  const auto chunks = SomeChunks();
  const std::string old = Version1File(chunks);
  TraceFileReader reader;
  ASSERT_TRUE(reader.OpenBytes(old, "old"));
  EXPECT_EQ(reader.version(), 1);
  const ReadBack r = Read(old);
  EXPECT_EQ(r.chunks, Serialized(chunks));
  EXPECT_EQ(r.end, Result::kEnd) << r.error;
  const ReadBack cut = Read(old.substr(0, old.size() - 1));
  EXPECT_EQ(cut.end, Result::kTruncated);
  EXPECT_EQ(cut.chunks.size(), chunks.size() - 1);
}

TEST(TraceFileFormat, VersionsOutsideOneAndTwoAreRefused) {
  for (const char version : {'\0', '\3', '\x81'}) {
    TraceFileReader reader;
    EXPECT_FALSE(reader.OpenBytes(std::string("CMTRACE", 7) + version, "t"));
    EXPECT_NE(reader.error().find("reads versions 1 to 2"), std::string::npos) << reader.error();
  }
}

}  // namespace
}  // namespace cumemtrace
