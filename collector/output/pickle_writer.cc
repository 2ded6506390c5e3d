#include "collector/output/pickle_writer.h"

namespace cumemtrace::internal {
namespace {

constexpr uint32_t kBatch = 1000;  // container items per MARK, as pickle.py's _BATCHSIZE

}  // namespace

void PickleWriter::Little(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.put(static_cast<char>((value >> (8 * i)) & 0xff));
}

void PickleWriter::Put(char op, uint64_t value, int bytes) {
  out_.put(op);
  Little(value, bytes);
}

void PickleWriter::Memo(char short_op, char long_op, uint32_t index) {
  Put(index < 0x100 ? short_op : long_op, index, index < 0x100 ? 1 : 4);
}

void PickleWriter::ValueDone() {
  if (open_.empty()) return;
  Open& top = open_.back();
  ++top.pending;
  // A dict's batch counts keys and values; a tuple is built from one MARK.
  const uint32_t batch = top.type == Container::kDict ? 2 * kBatch : kBatch;
  if (top.type != Container::kTuple && top.pending == batch) {
    out_.put(top.type == Container::kDict ? 'u' : 'e');
    out_.put('(');
    top.pending = 0;
  }
}

void PickleWriter::Scalar(char op) {
  out_.put(op);
  ValueDone();
}

void PickleWriter::Begin(const char* ops, Container type) {
  out_ << ops;
  open_.push_back(Open{type, 0});
}

void PickleWriter::End(char op) {
  out_.put(op);
  open_.pop_back();
  ValueDone();
}

void PickleWriter::Int(int64_t value) {
  const auto bits = static_cast<uint64_t>(value);
  if (value >= 0 && value < 0x100) {
    Put('K', bits, 1);
  } else if (value >= 0 && value < 0x10000) {
    Put('M', bits, 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    Put('J', bits, 4);
  } else {
    // LONG1: little-endian two's complement in the fewest bytes that keep the sign.
    int bytes = 8;
    while (bytes > 1) {
      const int64_t shifted = value >> (8 * (bytes - 1) - 1);
      if (shifted != 0 && shifted != -1) break;
      --bytes;
    }
    Put('\x8a', static_cast<uint64_t>(bytes), 1);
    Little(bits, bytes);
  }
  ValueDone();
}

void PickleWriter::UInt(uint64_t value) {
  if (value <= static_cast<uint64_t>(INT64_MAX)) {
    Int(static_cast<int64_t>(value));
    return;
  }
  // 2^63 and above need a ninth byte, 0, so that the sign bit stays clear.
  Put('\x8a', 9, 1);
  Little(value, 8);
  Scalar('\0');
}

void PickleWriter::Str(const std::string& value) {
  auto it = memo_.find(value);
  if (it != memo_.end()) {
    Memo('h', 'j', it->second);
  } else {
    Put('X', value.size(), 4);
    out_.write(value.data(), static_cast<std::streamsize>(value.size()));
    const auto index = static_cast<uint32_t>(memo_.size());
    memo_.emplace(value, index);
    Memo('q', 'r', index);
  }
  ValueDone();
}

}  // namespace cumemtrace::internal
