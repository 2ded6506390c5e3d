// Length-prefixed frames: a varint32 byte count, then the bytes. Used on the live wire
// (one StreamMessage per frame) and in trace files (one TraceChunk per frame).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cumemtrace {

// Appends varint32(body.size()) and body to *out.
void AppendFrame(std::string_view body, std::string* out);

// Incremental decoder: feed it bytes as they arrive, take whole frames out.
// Never trusts a length before checking it against max_frame_bytes.
class FrameDecoder {
 public:
  enum class Status {
    kFrame,     // *frame holds one frame body
    kNeedMore,  // no whole frame buffered yet
    kError,     // the stream is broken (error() says how); no further frames
  };

  explicit FrameDecoder(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // A later frame may be larger or smaller than the first (the live wire allows a small
  // handshake, then full-size batches).
  void set_max_frame_bytes(size_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }

  void Append(const char* data, size_t size);
  // Takes frames out of `bytes` (all the input there will be, kept alive by the caller)
  // instead of a copy of them; Append() is then not used.
  void UseBytes(std::string_view bytes) { bytes_ = bytes; }
  // On kFrame, *frame views bytes owned by the decoder, valid until the next Append/Next.
  Status Next(std::string_view* frame);

  const std::string& error() const { return error_; }
  // Bytes received but not yet returned as frames (a partial frame at end of input).
  size_t pending_bytes() const { return Input().size() - read_pos_; }
  // Total bytes consumed as whole frames (length prefix included).
  uint64_t consumed_bytes() const { return consumed_; }
  // Length of the last frame's prefix: its bytes lie just before the frame's body, in the
  // same buffer (a checksum over the whole frame reads them there).
  size_t last_prefix_bytes() const { return last_prefix_bytes_; }

 private:
  std::string_view Input() const { return bytes_.data() != nullptr ? bytes_ : buffer_; }

  size_t max_frame_bytes_;
  std::string buffer_;
  std::string_view bytes_;  // UseBytes()
  size_t read_pos_ = 0;
  uint64_t consumed_ = 0;
  size_t last_prefix_bytes_ = 0;
  std::string error_;
};

}  // namespace cumemtrace
