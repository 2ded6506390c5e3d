#include "collector/engine/framing.h"

namespace cumemtrace {

void AppendFrame(std::string_view body, std::string* out) {
  uint32_t n = static_cast<uint32_t>(body.size());
  while (n >= 0x80) {
    out->push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out->push_back(static_cast<char>(n));
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
  const size_t available = buffer_.size() - read_pos_;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(buffer_.data()) + read_pos_;
  uint64_t length = 0;
  size_t header = 0;
  for (;; ++header) {
    if (header == available) return Status::kNeedMore;
    if (header == 5) {
      error_ = "frame length prefix longer than 5 bytes";
      return Status::kError;
    }
    length |= static_cast<uint64_t>(p[header] & 0x7f) << (7 * header);
    if ((p[header] & 0x80) == 0) break;
  }
  ++header;
  if (length > max_frame_bytes_) {
    error_ = "frame of " + std::to_string(length) + " bytes exceeds the limit of " +
             std::to_string(max_frame_bytes_) + " bytes";
    return Status::kError;
  }
  if (available - header < length) return Status::kNeedMore;
  *frame = std::string_view(buffer_.data() + read_pos_ + header, static_cast<size_t>(length));
  read_pos_ += header + static_cast<size_t>(length);
  consumed_ += header + length;
  return Status::kFrame;
}

}  // namespace cumemtrace
