// The trace file: the preamble "CMTRACE" + format version byte, then length-prefixed
// TraceChunk messages (see proto/cumemtrace/v1/trace.proto). Encoding here, I/O by callers.
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

// Appends one length-prefixed chunk to *out.
void AppendChunk(const v1::TraceChunk& chunk, std::string* out);
// Appends a chunk that wraps a wire frame without building a TraceChunk (no copy of the
// frame into a message first): the hot path of the collector.
void AppendWireFrameChunk(uint32_t stream_id, std::string_view wire_frame, std::string* out);

// Streams chunks out of a trace file, or a whole trace held in memory, with bounded memory.
// A file cut at any byte yields every whole chunk before the cut, then kTruncated.
class TraceFileReader {
 public:
  enum class Result {
    kChunk,      // *chunk holds the next chunk
    kEnd,        // clean end of file
    kTruncated,  // the file ends inside a chunk (a crash or a copy in progress)
    kError,      // unreadable, not a trace file, or corrupt; error() says which
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

  const std::string& error() const { return error_; }
  // Bytes of the file consumed as whole chunks (preamble included).
  uint64_t consumed_bytes() const;
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  bool CheckPreamble(std::string_view preamble, const std::string& path);

  FILE* file_ = nullptr;
  FrameDecoder decoder_{v1::MAX_FILE_CHUNK_BYTES};
  uint64_t file_bytes_ = 0;
  bool eof_ = false;
  std::string error_;
};

}  // namespace cumemtrace
