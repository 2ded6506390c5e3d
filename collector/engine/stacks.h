// Internal: a stream's stack table as the wire defined it (trace.proto StackFrame, Stack,
// NativeModule), and its resolution into the symbolized, deduplicated StackTable of the
// outputs (engine.h): the frames of the tracer, CUPTI and PyTorch's allocator left out, the
// interpreter's native frames replaced by the Python frames they ran, and each stack's
// innermost frame of the program's own code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/engine/engine.h"

namespace cumemtrace::v1 {
class StackFrame;
class Stack;
class NativeModule;
}  // namespace cumemtrace::v1

namespace cumemtrace::internal {

struct DecodedStream;
class NativeSymbolizer;

struct WireFrame {
  bool native = false;
  uint32_t function_id = 0;  // python: interned ids
  uint32_t file_id = 0;
  uint32_t line = 0;
  uint64_t pc = 0;  // native
  uint32_t module_id = 0;
  uint8_t python_entry = 0;  // v1::PythonFrameEntry
};

struct WireModule {
  std::string path;
  uint64_t load_bias = 0;
};

struct WireStacks {
  std::unordered_map<uint32_t, WireFrame> frames;
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks;
  std::unordered_map<uint32_t, WireModule> modules;
  bool empty() const { return stacks.empty(); }

  void Add(const v1::StackFrame& frame);
  void Add(const v1::Stack& stack);
  void Add(const v1::NativeModule& module);
};

// What ShownFrames needs of a frame.
struct FrameFacts {
  bool python = false;
  std::string module;        // native: the module's path ("" when unknown)
  std::string function;      // native: its symbol ("" or "0x..." when unknown)
  std::string file;          // python: its file (only a Python frame's is read)
  uint8_t python_entry = 0;  // python: v1::PythonFrameEntry
};

// The frames of one wire stack (native frames innermost first, then the Python frames of the
// same thread innermost first) as the outputs show them, as indices into `frames`, innermost
// first:
// - never a frame of the tracer (modules libcumemtrace*, the PyTorch bridge's included; its
//   Python hooks, files in share/cumemtrace/python/, as `run --phase` wraps a method) or of
//   CUPTI (libcupti*): they are how the allocation was seen, not who made it;
// - under the bridge's frames (a tensor's stack), not PyTorch's caching allocator's own
//   frames (the libc10_cuda frames up to the first frame of another module, its caller);
// - where the native frames hold the interpreter's eval loop (_PyEval_EvalFrameDefault) and
//   there are Python frames, one merged stack, as py-spy --native and memray --native show
//   it: each eval loop's frame is replaced by the Python frames it ran (from the innermost
//   Python frame not yet placed up to and including the next entry frame, or, where the
//   entries are unknown, one each when there are exactly as many as eval loops), the
//   interpreter's other native frames (its module's, libpython's, a python* executable's) are
//   left out, and the
//   Python frames left over (outer ones whose native frames were cut at the bound, even
//   before the first eval loop) follow.
//   Where the entries are unknown and the counts differ, the native frames come first, then
//   the Python frames, as recorded.
std::vector<size_t> ShownFrames(const std::vector<FrameFacts>& frames);

// Resolves the wire stacks of one stream into a StackTable, on demand: only the stacks
// asked for are symbolized.
class StackResolver {
 public:
  explicit StackResolver(const DecodedStream& stream);
  ~StackResolver();

  // Index into table().stacks of a wire stack id; -1 for 0 or an id never defined.
  int32_t Resolve(uint32_t wire_stack_id);
  // "file:line in function" of a resolved stack's innermost frame of the program's own code.
  std::string UserFrameText(int32_t stack) const;
  // "file:line" (the file's base name) of a resolved stack's innermost Python frame of the
  // program's own code (not site-packages nor the standard library), else of its innermost
  // Python frame; "" when it has none.
  std::string PythonLineText(int32_t stack) const;
  StackTable Take() { return std::move(table_); }

 private:
  // A wire frame, named: its index in resolved_.
  uint32_t FrameIndex(uint32_t wire_frame_id);
  // Its index in table_, added when first shown.
  uint32_t TableIndex(uint32_t resolved);

  struct ResolvedFrame {
    FrameFacts facts;  // its kind, function, file and module as the table shows them
    uint32_t line = 0;
    int32_t table_index = -1;
  };

  const DecodedStream& stream_;
  std::unique_ptr<NativeSymbolizer> symbolizer_;
  std::unordered_map<uint32_t, int32_t> stack_index_;
  std::unordered_map<uint32_t, uint32_t> frame_index_;  // wire frame id -> resolved_
  std::vector<ResolvedFrame> resolved_;
  std::vector<std::string> module_of_frame_;  // per table_ frame: native module path, or ""
  StackTable table_;
};

}  // namespace cumemtrace::internal
