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
  explicit PickleWriter(std::ostream& out);

  void None();
  void Bool(bool value);
  void Int(int64_t value);
  void UInt(uint64_t value);
  void Str(const std::string& value);
  void BeginDict();
  void EndDict();
  void BeginList();
  void EndList();
  void BeginTuple();
  void EndTuple();
  // Writes STOP; exactly one top-level value must have been written.
  void Finish();

 private:
  enum class Container : uint8_t { kDict, kList, kTuple };
  struct Open {
    Container type;
    uint32_t pending;  // values written since the last MARK
  };
  void ValueDone();
  void Put(char op) { out_.put(op); }
  void Little(uint64_t value, int bytes);

  std::ostream& out_;
  std::vector<Open> open_;
  std::unordered_map<std::string, uint32_t> memo_;
};

}  // namespace cumemtrace::internal
