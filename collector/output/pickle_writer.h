// Internal: a minimal streaming writer of Python pickles (protocol 2), for the memory_viz
// export (PyTorch's memory viewer loads its snapshots with pickle). It writes only dict, list,
// tuple, str, int, bool and None: the types of a snapshot. No C++ pickle library is packaged
// for Debian, and these few opcodes are stable across every Python 3 version:
//   PROTO 2 (0x80 0x02), EMPTY_DICT '}', EMPTY_LIST ']', MARK '(', SETITEMS 'u', APPENDS 'e',
//   TUPLE 't', BININT1 'K', BININT2 'M', BININT 'J', LONG1 0x8a, BINUNICODE 'X', NONE 'N',
//   NEWTRUE 0x88, NEWFALSE 0x89, BINPUT 'q' / LONG_BINPUT 'r', BINGET 'h' / LONG_BINGET 'j',
//   STOP '.'.
// Strings are memoized (each distinct string is written once, then referred to), because a
// snapshot repeats the same keys millions of times. Containers are filled in batches of 1000
// items, as Python's own pickler does, so the unpickler's stack stays small.
//
// Usage: BeginDict(); Str("key"); Int(1); ... EndDict(); then Finish() once.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace cumemtrace::internal {

class PickleWriter {
 public:
  explicit PickleWriter(std::ostream& out) : out_(out) { out_.write("\x80\x02", 2); }

  void None() { Scalar('N'); }
  void Bool(bool value) { Scalar(value ? '\x88' : '\x89'); }
  void Int(int64_t value);
  void UInt(uint64_t value);
  void Str(const std::string& value);
  void BeginDict() { Begin("}(", Container::kDict); }
  void EndDict() { End('u'); }
  void BeginList() { Begin("](", Container::kList); }
  void EndList() { End('e'); }
  void BeginTuple() { Begin("(", Container::kTuple); }
  void EndTuple() { End('t'); }
  // Writes STOP; exactly one top-level value must have been written.
  void Finish() { out_.put('.'); }

 private:
  enum class Container : uint8_t { kDict, kList, kTuple };
  struct Open {
    Container type;
    uint32_t pending;  // values written since the last MARK
  };
  void Begin(const char* ops, Container type);
  void End(char op);
  void Scalar(char op);
  void ValueDone();
  // `op`, then `value` in `bytes` little-endian bytes.
  void Put(char op, uint64_t value, int bytes);
  void Little(uint64_t value, int bytes);
  // A memo opcode: `short_op` for the first 256 entries, else `long_op`.
  void Memo(char short_op, char long_op, uint32_t index);

  std::ostream& out_;
  std::vector<Open> open_;
  std::unordered_map<std::string, uint32_t> memo_;
};

}  // namespace cumemtrace::internal
