#include "tracer/sending/stack_interner.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstring>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/code_names.h"

namespace cumemtrace::tracer {
namespace {

void* OwnBase() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&OwnBase), &info) != 0 ? info.dli_fbase : nullptr;
}

std::string ExecutablePath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

}  // namespace

bool ModuleLookup::Find(uint64_t pc, std::string* path, uint64_t* load_bias, bool* own) const {
  static void* const own_base = OwnBase();
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(static_cast<uintptr_t>(pc)), &info,
              reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr) {
    return false;
  }
  *own = info.dli_fbase == own_base;
  *load_bias = map->l_addr;
  // The main program's link map has no name.
  if (map->l_name != nullptr && map->l_name[0] != '\0') {
    *path = map->l_name;
  } else {
    static const std::string executable = ExecutablePath();
    *path = executable.empty() && info.dli_fname != nullptr ? info.dli_fname : executable;
  }
  return true;
}

void StackInterner::ForgetIfBatchesWereLost() {
  // A thrown-away batch may have held definitions: make them again (with new ids, as ids
  // are never reused).
  if (encoder_->discarded_batches() == discarded_seen_) return;
  discarded_seen_ = encoder_->discarded_batches();
  python_frames_.clear();
  native_frames_.clear();
  module_ids_.clear();
  stacks_.clear();
}

uint32_t StackInterner::PythonFrame(uint64_t code_key, uint64_t line_word) {
  auto [it, inserted] = python_frames_.try_emplace({code_key, line_word}, 0);
  if (!inserted) return it->second;
  std::string function;
  std::string file;
  if (!PythonCodeNames(code_key, &function, &file)) {
    function = "?";
    file = "?";
  }
  const uint32_t function_id = encoder_->Intern(function);
  const uint32_t file_id = encoder_->Intern(file);
  it->second = next_frame_id_++;
  v1::StackFrame* frame = encoder_->AddEvent(0)->mutable_stack_frame();
  frame->set_id(it->second);
  frame->set_kind(v1::STACK_FRAME_KIND_PYTHON);
  frame->set_function_name_id(function_id);
  frame->set_file_name_id(file_id);
  frame->set_line(v1::ring::PythonFrameLine(line_word));
  // The ring's values are the wire's (PythonFrameEntry).
  frame->set_python_entry(static_cast<v1::PythonFrameEntry>(v1::ring::PythonFrameEntry(line_word)));
  return it->second;
}

uint32_t StackInterner::NativeFrame(uint64_t pc, bool* own) {
  *own = false;
  const auto known = native_frames_.find(pc);
  if (known != native_frames_.end()) {
    *own = known->second == 0;
    return known->second;
  }
  std::string path;
  uint64_t load_bias = 0;
  uint32_t module_id = 0;
  if (modules_->Find(pc, &path, &load_bias, own)) {
    if (*own) {
      native_frames_.emplace(pc, 0);
      return 0;
    }
    auto [module, inserted] = module_ids_.try_emplace(path, 0);
    if (inserted) {
      module->second = next_module_id_++;
      v1::NativeModule* m = encoder_->AddEvent(0)->mutable_native_module();
      m->set_id(module->second);
      m->set_path(path);
      m->set_load_bias(load_bias);
    }
    module_id = module->second;
  }
  const uint32_t id = next_frame_id_++;
  native_frames_.emplace(pc, id);
  v1::StackFrame* frame = encoder_->AddEvent(0)->mutable_stack_frame();
  frame->set_id(id);
  frame->set_kind(v1::STACK_FRAME_KIND_NATIVE);
  frame->set_pc(pc);
  frame->set_module_id(module_id);
  return id;
}

uint32_t StackInterner::Intern(const uint64_t* words, uint32_t count) {
  if (words == nullptr || count == 0) return 0;
  v1::ring::StackHeader header{};
  memcpy(&header, &words[0], sizeof(header));
  const uint64_t python = header.python_frames;
  const uint64_t native = header.native_frames;
  if (1 + 2 * python + native > count) return 0;  // not a whole stack
  ForgetIfBatchesWereLost();
  std::vector<uint32_t> frames;
  frames.reserve(native + python);
  // Native frames first (innermost), then the Python frames of the same thread.
  const uint64_t* pcs = words + 1 + 2 * python;
  bool leading = true;
  for (uint64_t i = 0; i < native; ++i) {
    bool own = false;
    const uint32_t id = NativeFrame(pcs[i], &own);
    if (own && leading) continue;  // the tracer's own frames (the hook and the capture)
    leading = false;
    if (id != 0) frames.push_back(id);
  }
  for (uint64_t i = 0; i < python; ++i) {
    frames.push_back(PythonFrame(words[1 + 2 * i], words[2 + 2 * i]));
  }
  if (frames.empty()) return 0;
  if (frames.size() > static_cast<size_t>(v1::MAX_STACK_FRAMES)) {
    frames.resize(static_cast<size_t>(v1::MAX_STACK_FRAMES));
  }
  auto [it, inserted] = stacks_.try_emplace(frames, 0);
  if (!inserted) return it->second;
  it->second = next_stack_id_++;
  v1::Stack* stack = encoder_->AddEvent(0)->mutable_stack();
  stack->set_id(it->second);
  for (uint32_t id : frames) stack->add_frame_ids(id);
  return it->second;
}

}  // namespace cumemtrace::tracer
