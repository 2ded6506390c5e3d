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

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// How the allocation was seen rather than who made it: the tracer's modules (the PyTorch
// bridge's libcumemtrace-torch-bridge-*.so among them) and CUPTI's.
bool IsObserverModule(const std::string& name) {
  return StartsWith(name, "libcumemtrace") || StartsWith(name, "libcupti");
}

// The tracer's Python hooks (`run --phase` wraps the methods it names).
bool IsTracerPythonFile(const std::string& file) {
  return file.find("/share/cumemtrace/python/") != std::string::npos;
}

bool IsEvalLoop(const FrameFacts& frame) {
  // GCC may name a split-off part "_PyEval_EvalFrameDefault.cold".
  return !frame.python && StartsWith(frame.function, "_PyEval_EvalFrameDefault");
}

// A trace's value as the engine keeps it: one it does not know is unknown.
uint8_t EntryOf(int value) {
  return value == v1::PYTHON_FRAME_ENTRY_YES || value == v1::PYTHON_FRAME_ENTRY_NO
             ? static_cast<uint8_t>(value)
             : static_cast<uint8_t>(v1::PYTHON_FRAME_ENTRY_UNKNOWN);
}

// "python", "python3", "python3.12": the interpreter's own executable.
bool IsPythonExecutable(const std::string& name) {
  if (!StartsWith(name, "python")) return false;
  return std::all_of(name.begin() + 6, name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

std::vector<size_t> MergedFrames(const std::vector<FrameFacts>& frames) {
  std::vector<size_t> native;
  std::vector<size_t> python;
  bool leading = true;        // no frame of the program's side kept yet
  bool under_bridge = false;  // a leading frame was the PyTorch bridge's: a tensor's stack
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].python) {
      python.push_back(i);
      continue;
    }
    const std::string name = BaseName(frames[i].module);
    if (IsObserverModule(name)) {
      under_bridge = under_bridge || (leading && StartsWith(name, "libcumemtrace-torch-bridge"));
      continue;
    }
    if (leading && under_bridge && StartsWith(name, "libc10_cuda")) continue;
    leading = false;
    native.push_back(i);
  }
  std::vector<size_t> shown;
  shown.reserve(native.size() + python.size());
  const auto eval_loops = static_cast<size_t>(
      std::count_if(native.begin(), native.end(), [&](size_t i) { return IsEvalLoop(frames[i]); }));
  const bool entries_known = std::all_of(python.begin(), python.end(), [&](size_t i) {
    return frames[i].python_entry != v1::PYTHON_FRAME_ENTRY_UNKNOWN;
  });
  // The interpreter's modules: those of its eval loop's frames, libpython, a python
  // executable.
  std::vector<std::string> interpreter;
  for (size_t i : native) {
    if (IsEvalLoop(frames[i])) interpreter.push_back(frames[i].module);
  }
  const auto is_interpreter = [&](const FrameFacts& frame) {
    const std::string name = BaseName(frame.module);
    return StartsWith(name, "libpython") || IsPythonExecutable(name) ||
           std::find(interpreter.begin(), interpreter.end(), frame.module) != interpreter.end();
  };
  // A native stack cut at its bound may stop in the interpreter before its first eval loop:
  // with the entries known, its Python frames all follow.
  const bool in_interpreter =
      eval_loops > 0 || (entries_known && std::any_of(native.begin(), native.end(), [&](size_t i) {
                           return is_interpreter(frames[i]);
                         }));
  if (!in_interpreter || python.empty() || (!entries_known && eval_loops != python.size())) {
    shown = native;
    shown.insert(shown.end(), python.begin(), python.end());
    return shown;
  }
  size_t next_python = 0;
  for (size_t i : native) {
    if (IsEvalLoop(frames[i])) {
      // This loop's Python frames: up to and including its entry frame (each its own entry
      // where the entries are unknown and the counts agree). None left: a frame cut at the
      // Python bound, or not yet running.
      while (next_python < python.size()) {
        const FrameFacts& frame = frames[python[next_python]];
        shown.push_back(python[next_python++]);
        if (!entries_known || frame.python_entry == v1::PYTHON_FRAME_ENTRY_YES) break;
      }
      continue;
    }
    if (!is_interpreter(frames[i])) shown.push_back(i);
  }
  shown.insert(shown.end(), python.begin() + static_cast<std::ptrdiff_t>(next_python),
               python.end());
  return shown;
}

}  // namespace

std::vector<size_t> ShownFrames(const std::vector<FrameFacts>& frames) {
  // The hooks' Python frames go after the merge: an entry frame among them still ends its
  // eval loop's run of frames.
  std::vector<size_t> shown = MergedFrames(frames);
  shown.erase(std::remove_if(
                  shown.begin(), shown.end(),
                  [&](size_t i) { return frames[i].python && IsTracerPythonFile(frames[i].file); }),
              shown.end());
  return shown;
}

void WireStacks::Add(const v1::StackFrame& frame) {
  if (frame.id() == 0) return;
  frames[frame.id()] = WireFrame{frame.kind() == v1::STACK_FRAME_KIND_NATIVE,
                                 frame.function_name_id(),
                                 frame.file_name_id(),
                                 frame.line(),
                                 frame.pc(),
                                 frame.module_id(),
                                 EntryOf(frame.python_entry())};
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
  ResolvedFrame r;
  FrameFacts& facts = r.facts;
  facts.python = true;  // an undefined frame shows as a Python one, "?"
  facts.function = "?";
  facts.file = "?";
  const auto found = stream_.stacks.frames.find(wire_frame_id);
  if (found != stream_.stacks.frames.end()) {
    const WireFrame& f = found->second;
    if (!f.native) {
      facts.python_entry = f.python_entry;
      facts.function = stream_.Resolve(f.function_id);
      facts.file = stream_.Resolve(f.file_id);
      r.line = f.line;
    } else {
      facts.python = false;
      facts.function = Hex(f.pc);
      const auto m = stream_.stacks.modules.find(f.module_id);
      if (m != stream_.stacks.modules.end()) {
        facts.module = m->second.path;
        facts.file = facts.module;
        // The tracer's and CUPTI's frames are never shown: not worth reading their files.
        if (!IsObserverModule(BaseName(facts.module))) {
          if (symbolizer_ == nullptr) symbolizer_ = std::make_unique<NativeSymbolizer>();
          NativeSymbol symbol;
          symbolizer_->Symbolize(m->second.path, m->second.load_bias, f.pc, &symbol);
          if (!symbol.function.empty()) facts.function = symbol.function;
          if (!symbol.file.empty()) {
            facts.file = symbol.file;
            r.line = symbol.line;
          }
        }
      }
    }
  }
  it->second = static_cast<uint32_t>(resolved_.size());
  resolved_.push_back(std::move(r));
  return it->second;
}

uint32_t StackResolver::TableIndex(uint32_t resolved) {
  ResolvedFrame& r = resolved_[resolved];
  if (r.table_index >= 0) return static_cast<uint32_t>(r.table_index);
  r.table_index = static_cast<int32_t>(table_.function.size());
  table_.function.push_back(r.facts.function);
  table_.file.push_back(r.facts.file);
  table_.line.push_back(r.line);
  table_.kind.push_back(r.facts.python ? "python" : "native");
  module_of_frame_.push_back(r.facts.module);
  return static_cast<uint32_t>(r.table_index);
}

int32_t StackResolver::Resolve(uint32_t wire_stack_id) {
  if (wire_stack_id == 0) return -1;
  auto [it, inserted] = stack_index_.try_emplace(wire_stack_id, -1);
  if (!inserted) return it->second;
  const auto found = stream_.stacks.stacks.find(wire_stack_id);
  if (found == stream_.stacks.stacks.end() || found->second.empty()) return -1;
  std::vector<uint32_t> recorded;
  std::vector<FrameFacts> facts;
  recorded.reserve(found->second.size());
  facts.reserve(found->second.size());
  for (uint32_t id : found->second) {
    recorded.push_back(FrameIndex(id));
    facts.push_back(resolved_[recorded.back()].facts);
  }
  // Only the frames shown enter the table: the page's and memory_viz's frame lists never
  // hold the tracer's either.
  std::vector<uint32_t> frames;
  for (size_t shown : ShownFrames(facts)) frames.push_back(TableIndex(recorded[shown]));
  // Only the tracer's and CUPTI's frames: nothing of the program to show.
  if (frames.empty()) return -1;
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
  // The program's own line (`loss = F.cross_entropy(...)`) before torch's inside the call.
  const std::vector<uint32_t>& frames = table_.stacks[static_cast<size_t>(stack)];
  for (const bool own_only : {true, false}) {
    for (const uint32_t f : frames) {
      if (std::string(table_.kind[f]) != "python") continue;
      if (own_only && !IsUserPythonFile(table_.file[f])) continue;
      std::string text = BaseName(table_.file[f]);
      if (table_.line[f] != 0) text += ":" + std::to_string(table_.line[f]);
      return text;
    }
  }
  return {};
}

}  // namespace cumemtrace::internal
