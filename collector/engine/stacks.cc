#include "collector/engine/stacks.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "collector/engine/decoded_stream.h"
#include "collector/engine/native_symbolizer.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {
namespace {

std::string Hex(uint64_t value) {
  char text[32];
  snprintf(text, sizeof(text), "0x%" PRIx64, value);
  return text;
}

// Whether a frame is the program's own code rather than a library's: Python files outside
// site-packages, dist-packages and the standard library; native frames outside the CUDA,
// PyTorch, C and C++ runtime libraries (by module file name).
bool IsUserPythonFile(const std::string& file) {
  if (file.empty() || file.rfind("<frozen", 0) == 0) return false;
  for (const char* library : {"/site-packages/", "/dist-packages/", "/lib/python3"}) {
    if (file.find(library) != std::string::npos) return false;
  }
  return true;
}

bool IsUserNativeModule(const std::string& module_path) {
  const std::string name = BaseName(module_path);
  for (const char* library :
       {"libcuda.", "libcudart", "libcupti", "libcublas", "libcudnn", "libnccl", "libc10",
        "libtorch", "libc.so", "libstdc++", "libgcc", "libpython", "libcumemtrace", "ld-linux"}) {
    if (name.rfind(library, 0) == 0) return false;
  }
  return !name.empty();
}

}  // namespace

void WireStacks::Add(const v1::StackFrame& frame) {
  if (frame.id() == 0) return;
  frames[frame.id()] = WireFrame{frame.kind() == v1::STACK_FRAME_KIND_NATIVE,
                                 frame.function_name_id(), frame.file_name_id(), frame.line(),
                                 frame.pc(), frame.module_id()};
}

void WireStacks::Add(const v1::Stack& stack) {
  if (stack.id() == 0) return;
  std::vector<uint32_t>& ids = stacks[stack.id()];
  const int n = std::min(stack.frame_ids_size(), static_cast<int>(v1::MAX_STACK_FRAMES));
  ids.assign(stack.frame_ids().begin(), stack.frame_ids().begin() + n);
}

void WireStacks::Add(const v1::NativeModule& module) {
  if (module.id() == 0) return;
  modules[module.id()] = WireModule{module.path(), module.load_bias()};
}

StackResolver::StackResolver(const DecodedStream& stream) : stream_(stream) {}
StackResolver::~StackResolver() = default;

uint32_t StackResolver::FrameIndex(uint32_t wire_frame_id) {
  auto [it, inserted] = frame_index_.try_emplace(wire_frame_id, 0);
  if (!inserted) return it->second;
  std::string function = "?";
  std::string file = "?";
  uint32_t line = 0;
  const char* kind = "python";
  std::string module;
  const auto found = stream_.stacks.frames.find(wire_frame_id);
  if (found != stream_.stacks.frames.end()) {
    const WireFrame& f = found->second;
    if (!f.native) {
      function = stream_.Resolve(f.function_id);
      file = stream_.Resolve(f.file_id);
      line = f.line;
    } else {
      kind = "native";
      function = Hex(f.pc);
      const auto m = stream_.stacks.modules.find(f.module_id);
      if (m != stream_.stacks.modules.end()) {
        module = m->second.path;
        file = module;
        if (symbolizer_ == nullptr) symbolizer_ = std::make_unique<NativeSymbolizer>();
        NativeSymbol symbol;
        symbolizer_->Symbolize(m->second.path, m->second.load_bias, f.pc, &symbol);
        if (!symbol.function.empty()) function = symbol.function;
        if (!symbol.file.empty()) {
          file = symbol.file;
          line = symbol.line;
        }
      }
    }
  }
  it->second = static_cast<uint32_t>(table_.function.size());
  table_.function.push_back(std::move(function));
  table_.file.push_back(std::move(file));
  table_.line.push_back(line);
  table_.kind.push_back(kind);
  module_of_frame_.push_back(std::move(module));
  return it->second;
}

int32_t StackResolver::Resolve(uint32_t wire_stack_id) {
  if (wire_stack_id == 0) return -1;
  auto [it, inserted] = stack_index_.try_emplace(wire_stack_id, -1);
  if (!inserted) return it->second;
  const auto found = stream_.stacks.stacks.find(wire_stack_id);
  if (found == stream_.stacks.stacks.end() || found->second.empty()) return -1;
  std::vector<uint32_t> frames;
  frames.reserve(found->second.size());
  for (uint32_t id : found->second) frames.push_back(FrameIndex(id));
  // The innermost Python frame of the program's own files; else the innermost Python frame;
  // else the innermost native frame outside the runtime libraries; else the innermost.
  uint32_t user = frames[0];
  for (int pass = 0; pass < 3; ++pass) {
    const auto chosen = std::find_if(frames.begin(), frames.end(), [&](uint32_t f) {
      const bool python = table_.kind[f][0] == 'p';
      return pass == 0   ? python && IsUserPythonFile(table_.file[f])
             : pass == 1 ? python
                         : !python && IsUserNativeModule(module_of_frame_[f]);
    });
    if (chosen != frames.end()) {
      user = *chosen;
      break;
    }
  }
  it->second = static_cast<int32_t>(table_.stacks.size());
  table_.stacks.push_back(std::move(frames));
  table_.user_frame.push_back(user);
  return it->second;
}

std::string StackResolver::UserFrameText(int32_t stack) const {
  if (stack < 0 || static_cast<size_t>(stack) >= table_.stacks.size()) return {};
  const uint32_t f = table_.user_frame[static_cast<size_t>(stack)];
  std::string text = table_.file[f];
  if (table_.line[f] != 0) text += ":" + std::to_string(table_.line[f]);
  return text + " in " + table_.function[f];
}

std::string StackResolver::PythonLineText(int32_t stack) const {
  if (stack < 0 || static_cast<size_t>(stack) >= table_.stacks.size()) return {};
  for (const uint32_t f : table_.stacks[static_cast<size_t>(stack)]) {
    if (std::string(table_.kind[f]) != "python") continue;
    std::string text = BaseName(table_.file[f]);
    if (table_.line[f] != 0) text += ":" + std::to_string(table_.line[f]);
    return text;
  }
  return {};
}

}  // namespace cumemtrace::internal
