#include "collector/output/pickle_writer.h"

namespace cumemtrace::internal {
namespace {

constexpr uint32_t kBatch = 1000;  // container items per MARK, as pickle.py's _BATCHSIZE

}  // namespace

PickleWriter::PickleWriter(std::ostream& out) : out_(out) {
  Put('\x80');
  Put('\x02');
}

void PickleWriter::Little(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.put(static_cast<char>((value >> (8 * i)) & 0xff));
}

void PickleWriter::ValueDone() {
  if (open_.empty()) return;
  Open& top = open_.back();
  ++top.pending;
  // A dict's batch counts keys and values; a tuple is built from one MARK.
  const uint32_t batch = top.type == Container::kDict ? 2 * kBatch : kBatch;
  if (top.type != Container::kTuple && top.pending == batch) {
    Put(top.type == Container::kDict ? 'u' : 'e');
    Put('(');
    top.pending = 0;
  }
}

void PickleWriter::None() {
  Put('N');
  ValueDone();
}

void PickleWriter::Bool(bool value) {
  Put(value ? '\x88' : '\x89');
  ValueDone();
}

void PickleWriter::Int(int64_t value) {
  if (value >= 0 && value < 0x100) {
    Put('K');
    Little(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 0x10000) {
    Put('M');
    Little(static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    Put('J');
    Little(static_cast<uint64_t>(value), 4);
  } else {
    // LONG1: little-endian two's complement in the fewest bytes that keep the sign.
    int bytes = 8;
    while (bytes > 1) {
      const int64_t shifted = value >> (8 * (bytes - 1) - 1);
      if (shifted != 0 && shifted != -1) break;
      --bytes;
    }
    Put('\x8a');
    Put(static_cast<char>(bytes));
    Little(static_cast<uint64_t>(value), bytes);
  }
  ValueDone();
}

void PickleWriter::UInt(uint64_t value) {
  if (value <= static_cast<uint64_t>(INT64_MAX)) {
    Int(static_cast<int64_t>(value));
    return;
  }
  // 2^63 and above need a ninth byte so that the sign bit stays clear.
  Put('\x8a');
  Put(9);
  Little(value, 8);
  Put('\0');
  ValueDone();
}

void PickleWriter::Str(const std::string& value) {
  auto it = memo_.find(value);
  if (it != memo_.end()) {
    if (it->second < 0x100) {
      Put('h');
      Little(it->second, 1);
    } else {
      Put('j');
      Little(it->second, 4);
    }
  } else {
    Put('X');
    Little(value.size(), 4);
    out_.write(value.data(), static_cast<std::streamsize>(value.size()));
    const auto index = static_cast<uint32_t>(memo_.size());
    memo_.emplace(value, index);
    if (index < 0x100) {
      Put('q');
      Little(index, 1);
    } else {
      Put('r');
      Little(index, 4);
    }
  }
  ValueDone();
}

void PickleWriter::BeginDict() {
  Put('}');
  Put('(');
  open_.push_back(Open{Container::kDict, 0});
}

void PickleWriter::EndDict() {
  Put('u');
  open_.pop_back();
  ValueDone();
}

void PickleWriter::BeginList() {
  Put(']');
  Put('(');
  open_.push_back(Open{Container::kList, 0});
}

void PickleWriter::EndList() {
  Put('e');
  open_.pop_back();
  ValueDone();
}

void PickleWriter::BeginTuple() {
  Put('(');
  open_.push_back(Open{Container::kTuple, 0});
}

void PickleWriter::EndTuple() {
  Put('t');
  open_.pop_back();
  ValueDone();
}

void PickleWriter::Finish() { Put('.'); }

}  // namespace cumemtrace::internal
