// Internal: a stream's stack table as the wire defined it (trace.proto StackFrame, Stack,
// NativeModule), and its resolution into the symbolized, deduplicated StackTable of the
// outputs (engine.h), with each stack's innermost frame of the program's own code.
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
  // "file:line" (the file's base name) of a resolved stack's innermost Python frame; "" when
  // it has none.
  std::string PythonLineText(int32_t stack) const;
  StackTable Take() { return std::move(table_); }

 private:
  uint32_t FrameIndex(uint32_t wire_frame_id);

  const DecodedStream& stream_;
  std::unique_ptr<NativeSymbolizer> symbolizer_;
  std::unordered_map<uint32_t, int32_t> stack_index_;
  std::unordered_map<uint32_t, uint32_t> frame_index_;
  std::vector<std::string> module_of_frame_;  // native frames' module path, "" for python
  StackTable table_;
};

}  // namespace cumemtrace::internal
