// The rules a live connection's frames must follow, as a pure function of the bytes so the
// collector and the fuzzer run the very same code: the first frame is a Handshake with the
// right magic and protocol version, every later one an EventBatch. Framing (the length
// prefix and MAX_WIRE_FRAME_BYTES) is FrameDecoder's job; this sees one frame body at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

class WireStreamValidator {
 public:
  enum class Verdict {
    kHandshake,  // the valid first frame: message().handshake() is usable
    kBatch,      // a valid later frame
    kRefused,    // the connection must be closed; *error says why
  };

  WireStreamValidator();
  WireStreamValidator(const WireStreamValidator&) = delete;
  WireStreamValidator& operator=(const WireStreamValidator&) = delete;

  // Parses and checks the next frame of the connection. After kRefused the connection is
  // broken and further calls keep refusing.
  Verdict Check(std::string_view frame, std::string* error);
  // The last frame checked, parsed (valid until the next Check).
  const v1::StreamMessage& message() const { return *message_; }

 private:
  // Each frame is parsed onto an arena that the next Check resets: a batch's thousands of
  // events and their payloads cost a few block allocations, not two each (a reused message
  // still deletes and remakes a oneof's payload: a tenth of the collector's time in a
  // burst of NVTX records). Reading google::protobuf::Arena's header through trace.pb.h.
  google::protobuf::Arena arena_;
  v1::StreamMessage* message_ = nullptr;
  uint64_t frames_ = 0;
  bool handshake_done_ = false;
  bool refused_ = false;
};

}  // namespace cumemtrace
