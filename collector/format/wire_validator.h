// The rules a live connection's frames must follow, as a pure function of the bytes so the
// collector and the fuzzer run the very same code: the first frame is a Handshake with the
// right magic and protocol version, every later one an EventBatch. Framing (the length
// prefix and MAX_WIRE_FRAME_BYTES) is FrameDecoder's job; this sees one frame body at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
  // burst of NVTX records). Once the handshake has passed, the arena is remade on a first
  // block of its own, which Reset keeps: a batch then reuses the same memory, where blocks
  // freed at every Reset made malloc give the heap's top back and fault it in again (four
  // brk calls and about 200 page faults per batch). Before it, a connection that may never
  // identify itself holds no more than its frame needs. Reading google::protobuf::Arena's
  // header through trace.pb.h.
  std::unique_ptr<char[]> first_block_;
  std::optional<google::protobuf::Arena> arena_;
  v1::StreamMessage* message_ = nullptr;
  uint64_t frames_ = 0;
  bool handshake_done_ = false;
  bool refused_ = false;
};

}  // namespace cumemtrace
