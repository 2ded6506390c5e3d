// Internal: TraceChunks in file order -> one DecodedStream per stream id.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "collector/engine/decoded.h"
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
  std::map<uint32_t, DecodedStream>& streams() { return streams_; }

 private:
  DecodedStream& Stream(uint32_t stream_id);
  void AddWireFrame(DecodedStream& stream, const std::string& frame);
  void AddHandshake(DecodedStream& stream, const v1::Handshake& handshake);
  void AddBatch(DecodedStream& stream, const v1::EventBatch& batch);
  void AddEvent(DecodedStream& stream, const v1::Event& event);
  void AddCollectorRecord(DecodedStream& stream, const v1::CollectorRecord& record);

  std::map<uint32_t, DecodedStream> streams_;
  // Frames are parsed into an arena that is reset after each one: without it protobuf frees
  // and reallocates every event's oneof payload, a malloc/free pair per event.
  std::unique_ptr<char[]> arena_block_;
  std::unique_ptr<google::protobuf::Arena> arena_;
};

}  // namespace cumemtrace::internal
