#include "collector/format/wire_validator.h"

#include <cstdio>

namespace cumemtrace {
namespace {

std::string Hex32(uint32_t value) {
  char text[16];
  snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

}  // namespace

WireStreamValidator::Verdict WireStreamValidator::Check(std::string_view frame,
                                                        std::string* error) {
  if (refused_) {
    *error = "the connection already broke the protocol";
    return Verdict::kRefused;
  }
  const uint64_t index = frames_++;
  auto refuse = [&](std::string why) {
    *error = std::move(why);
    refused_ = true;
    return Verdict::kRefused;
  };
  if (!message_.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return refuse("frame " + std::to_string(index) + " is not a StreamMessage");
  }
  if (handshake_done_) {
    if (!message_.has_batch()) {
      return refuse("frame " + std::to_string(index) +
                    " after the handshake is not an event batch");
    }
    return Verdict::kBatch;
  }
  if (!message_.has_handshake()) return refuse("the first frame is not a handshake");
  const v1::Handshake& handshake = message_.handshake();
  if (handshake.magic() != static_cast<uint32_t>(v1::HANDSHAKE_MAGIC)) {
    return refuse("handshake magic " + Hex32(handshake.magic()) + " is not " +
                  Hex32(static_cast<uint32_t>(v1::HANDSHAKE_MAGIC)));
  }
  if (handshake.protocol_version() != static_cast<uint32_t>(v1::PROTOCOL_VERSION)) {
    return refuse("protocol version " + std::to_string(handshake.protocol_version()) +
                  " is not supported (this collector speaks " +
                  std::to_string(v1::PROTOCOL_VERSION) + ")");
  }
  handshake_done_ = true;
  return Verdict::kHandshake;
}

}  // namespace cumemtrace
