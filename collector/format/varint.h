// Base-128 varints (protobuf's encoding): the frame length prefix, the hand-encoded chunk
// header, and the decoder's fast path all read and write them here, and nowhere else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cumemtrace {

// One varint at *p, which moves past it. False, *p unchanged, for a truncated varint or
// one longer than ten bytes, or with a tenth byte above 1 (left to protobuf's judgment).
inline bool ReadVarint(const uint8_t** p, const uint8_t* end, uint64_t* value) {
  const uint8_t* q = *p;
  if (end - q >= 10) {
    // No bounds checks: ten bytes are there. Each byte is added whole and its continuation
    // bit taken off again once it is known to be set (unsigned arithmetic wraps).
    uint64_t byte = *q++;
    uint64_t result = byte;
    if (byte < 0x80) goto done;
    for (int shift = 7; shift < 63; shift += 7) {
      result -= uint64_t{0x80} << (shift - 7);
      byte = *q++;
      result += byte << shift;
      if (byte < 0x80) goto done;
    }
    result -= uint64_t{0x80} << 56;
    byte = *q++;
    if (byte > 1) return false;
    result += byte << 63;
  done:
    *p = q;
    *value = result;
    return true;
  }
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (q == end) return false;
    const uint8_t byte = *q++;
    if (shift == 63 && byte > 1) return false;
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) {
      *p = q;
      *value = result;
      return true;
    }
  }
  return false;
}

inline void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

inline size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

}  // namespace cumemtrace
