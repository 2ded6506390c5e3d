#include "collector/format/framing.h"

#include <algorithm>

#include "collector/format/varint.h"

namespace cumemtrace {

void AppendFrame(std::string_view body, std::string* out) {
  AppendVarint(static_cast<uint32_t>(body.size()), out);
  out->append(body.data(), body.size());
}

void FrameDecoder::Append(const char* data, size_t size) {
  if (!error_.empty()) return;
  // Compact before growing so a long stream never keeps consumed bytes around.
  if (read_pos_ > 0 && read_pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, read_pos_);
    read_pos_ = 0;
  }
  buffer_.append(data, size);
}

FrameDecoder::Status FrameDecoder::Next(std::string_view* frame) {
  if (!error_.empty()) return Status::kError;
  const std::string_view input = Input();
  const size_t available = input.size() - read_pos_;
  // The length is a varint32: at most 5 bytes.
  const auto* begin = reinterpret_cast<const uint8_t*>(input.data()) + read_pos_;
  const uint8_t* p = begin;
  uint64_t length = 0;
  if (!ReadVarint(&p, begin + std::min<size_t>(available, 5), &length)) {
    if (available < 5) return Status::kNeedMore;
    error_ = "frame length prefix longer than 5 bytes";
    return Status::kError;
  }
  const auto header = static_cast<size_t>(p - begin);
  if (length > max_frame_bytes_) {
    error_ = "frame of " + std::to_string(length) + " bytes exceeds the limit of " +
             std::to_string(max_frame_bytes_) + " bytes";
    return Status::kError;
  }
  if (available - header < length) return Status::kNeedMore;
  *frame = std::string_view(input.data() + read_pos_ + header, static_cast<size_t>(length));
  last_prefix_bytes_ = header;
  read_pos_ += header + static_cast<size_t>(length);
  consumed_ += header + length;
  return Status::kFrame;
}

}  // namespace cumemtrace
