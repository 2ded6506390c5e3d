// The trace file: the preamble "CMTRACE" + format version byte, then length-prefixed
// TraceChunk messages (see proto/cumemtrace/v1/trace.proto), each ending with its CRC-32,
// and a closing FileEnd chunk. Encoding here, I/O by callers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "collector/format/framing.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

// The 8 bytes every trace file starts with.
std::string_view TraceFilePreamble();

// Appends one length-prefixed chunk, with its checksum, to *out.
void AppendChunk(const v1::TraceChunk& chunk, std::string* out);
// Appends a chunk that wraps a wire frame without building a TraceChunk (no copy of the
// frame into a message first): the hot path of the collector.
void AppendWireFrameChunk(uint32_t stream_id, std::string_view wire_frame, std::string* out);
// Appends the FileEnd chunk that closes a file; `bytes_before` is the size of the file
// before it, preamble included. Nothing may be written after it.
void AppendFileEnd(uint64_t bytes_before, std::string* out);

// Streams chunks out of a trace file, or a whole trace held in memory, with bounded memory.
// A file cut at any byte yields every whole chunk before the cut, then kTruncated; a damaged
// one every chunk before the damage, then kError. Either way error() says what and where.
// Reads format versions 1 (no checksums, no FileEnd) and 2.
class TraceFileReader {
 public:
  enum class Result {
    kChunk,      // *chunk holds the next chunk
    kEnd,        // clean end of file: after its FileEnd (version 2), at a chunk boundary (1)
    kTruncated,  // cut short: the file ends inside a chunk, or without its FileEnd
    kError,      // unreadable, not a trace file, or damaged; error() says which and where
  };

  TraceFileReader() = default;
  ~TraceFileReader();
  TraceFileReader(const TraceFileReader&) = delete;
  TraceFileReader& operator=(const TraceFileReader&) = delete;

  // Opens the file and checks the preamble. False with error() set on failure.
  bool Open(const std::string& path);
  // The same for a trace's bytes in memory (not copied: they must outlive the reader);
  // `name` stands for the path in messages.
  bool OpenBytes(std::string_view bytes, const std::string& name);
  Result Next(v1::TraceChunk* chunk) { return NextView(chunk, nullptr, nullptr, nullptr); }
  // Like Next(), but a chunk that only wraps a wire frame (what the collector writes) comes
  // back without a copy: *is_wire set, *stream_id and *wire_frame (a view valid until the
  // next call) filled, *chunk untouched. Any other chunk comes in *chunk.
  Result NextView(v1::TraceChunk* chunk, bool* is_wire, uint32_t* stream_id,
                  std::string_view* wire_frame);

  // After kError or kTruncated: what is wrong and at which byte.
  const std::string& error() const { return error_; }
  // Bytes of the file consumed as whole chunks (preamble included).
  uint64_t consumed_bytes() const;
  uint64_t file_bytes() const { return file_bytes_; }
  // The format version from the preamble (after a successful Open).
  int version() const { return version_; }

 private:
  bool CheckPreamble(std::string_view preamble, const std::string& path);
  // Checks and strips a version 2 chunk's checksum; false with error_ set when damaged.
  bool VerifyChunk(std::string_view frame, std::string_view* payload);
  Result Fail(Result result, std::string error);

  FILE* file_ = nullptr;
  FrameDecoder decoder_{v1::MAX_FILE_CHUNK_BYTES};
  uint64_t file_bytes_ = 0;
  bool eof_ = false;
  int version_ = 0;
  uint64_t chunks_ = 0;    // whole chunks read
  bool ended_ = false;     // the FileEnd was read
  bool finished_ = false;  // kEnd, kTruncated or kError was returned: result_ repeats
  Result result_ = Result::kEnd;
  std::string error_;
};

}  // namespace cumemtrace
