#include "collector/format/wire_validator.h"

#include <cstdio>

namespace cumemtrace {
namespace {

// The stack table (`run --stacks`): ids from 1, a stack of 1 to MAX_STACK_FRAMES frames.
// What an id refers to is not checked here: a reference to a definition lost with a dropped
// batch is data loss, which the analysis shows, not a protocol error.
bool CheckStacks(const v1::EventBatch& batch, std::string* why) {
  for (const v1::Event& event : batch.events()) {
    if (event.has_stack_frame() && event.stack_frame().id() == 0) {
      return *why = "a stack frame has id 0", false;
    }
    if (event.has_native_module() && event.native_module().id() == 0) {
      return *why = "a native module has id 0", false;
    }
    if (!event.has_stack()) continue;
    const v1::Stack& stack = event.stack();
    if (stack.id() == 0) return *why = "a stack has id 0", false;
    if (stack.frame_ids_size() == 0 ||
        stack.frame_ids_size() > static_cast<int>(v1::MAX_STACK_FRAMES)) {
      *why = "stack " + std::to_string(stack.id()) + " has " +
             std::to_string(stack.frame_ids_size()) + " frames (1 to " +
             std::to_string(v1::MAX_STACK_FRAMES) + " allowed)";
      return false;
    }
    for (uint32_t id : stack.frame_ids()) {
      if (id == 0) return *why = "a stack names frame 0", false;
    }
  }
  return true;
}

std::string Hex32(uint32_t value) {
  char text[16];
  snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

}  // namespace

namespace {

// The size of the tracer's own first block (event_encoder.cc): a batch it encoded in that
// much parses back into about as much.
constexpr size_t kFirstBlockBytes = 512 * 1024;

google::protobuf::ArenaOptions FrameArenaOptions(char* first_block) {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 * 1024;
  options.max_block_size = 1024 * 1024;
  if (first_block != nullptr) {
    options.initial_block = first_block;
    options.initial_block_size = kFirstBlockBytes;
  }
  return options;
}

}  // namespace

WireStreamValidator::WireStreamValidator() {
  arena_.emplace(FrameArenaOptions(nullptr));
  message_ = google::protobuf::Arena::CreateMessage<v1::StreamMessage>(&*arena_);
}

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
  message_ = nullptr;
  if (handshake_done_ && first_block_ == nullptr) {
    first_block_ = std::make_unique<char[]>(kFirstBlockBytes);
    arena_.emplace(FrameArenaOptions(first_block_.get()));
  } else {
    arena_->Reset();
  }
  message_ = google::protobuf::Arena::CreateMessage<v1::StreamMessage>(&*arena_);
  if (!message_->ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return refuse("frame " + std::to_string(index) + " is not a StreamMessage");
  }
  if (handshake_done_) {
    if (!message_->has_batch()) {
      return refuse("frame " + std::to_string(index) +
                    " after the handshake is not an event batch");
    }
    std::string why;
    if (!CheckStacks(message_->batch(), &why)) {
      return refuse("frame " + std::to_string(index) + ": " + why);
    }
    return Verdict::kBatch;
  }
  if (!message_->has_handshake()) return refuse("the first frame is not a handshake");
  const v1::Handshake& handshake = message_->handshake();
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
