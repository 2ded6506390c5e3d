// Internal: TraceChunks in file order -> one DecodedStream per stream id.
#pragma once

#include <map>
#include <string>

#include "collector/engine/decoded.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {

class StreamDecoder {
 public:
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
  v1::StreamMessage message_;  // reused: one allocation set for the whole trace
};

}  // namespace cumemtrace::internal
