// Internal: TraceChunks in file order -> one DecodedStream per stream id.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collector/engine/decoded_stream.h"
#include "cumemtrace/v1/trace.pb.h"

namespace google::protobuf {
class Arena;
}  // namespace google::protobuf

namespace cumemtrace::internal {

class StreamDecoder {
 public:
  StreamDecoder();
  ~StreamDecoder();
  void AddChunk(const v1::TraceChunk& chunk);
  // The same for a chunk that wraps a wire frame, without copying the frame first.
  void AddWireFrame(uint32_t stream_id, std::string_view frame);
  std::map<uint32_t, DecodedStream>& streams() { return streams_; }

 private:
  DecodedStream& Stream(uint32_t stream_id);
  // The hot path for EventBatch frames: reads the bytes straight into compact events.
  // Returns false, having changed nothing, for any frame it cannot vouch for (a repeated
  // oneof, a malformed varint...); AddWireFrame then parses it with protobuf.
  bool AddBatchFrameFast(DecodedStream& stream, std::string_view frame);

  std::map<uint32_t, DecodedStream> streams_;
  // Frames are parsed into an arena that is reset after each one: without it protobuf frees
  // and reallocates every event's oneof payload, a malloc/free pair per event.
  std::unique_ptr<char[]> arena_block_;
  std::unique_ptr<google::protobuf::Arena> arena_;
  // Scratch of the fast path, kept between frames so that it allocates nothing per frame.
  std::vector<const v1::Event*> fast_strings_;
  std::vector<const v1::Event*> fast_other_events_;
};

}  // namespace cumemtrace::internal
