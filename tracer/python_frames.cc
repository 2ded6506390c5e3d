#include "tracer/python_frames.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <unordered_map>

namespace cumemtrace::tracer {
namespace {

// The few CPython calls the capture needs, by their stable C names (3.9 and later). Objects
// are opaque here: PyObject*, PyFrameObject*, PyThreadState* are all void*.
struct PythonApi {
  int (*IsInitialized)();
  int (*IsFinalizing)();  // Py_IsFinalizing (3.13), _Py_IsFinalizing before
  int (*GilStateCheck)();
  void* (*ThisThreadState)();  // PyGILState_GetThisThreadState
  void* (*CurrentThreadState)();  // PyThreadState_GetUnchecked (3.13), _PyThreadState_UncheckedGet
  void* (*GetFrame)();            // PyEval_GetFrame: borrowed
  void* (*FrameBack)(void*);      // PyFrame_GetBack: new reference
  void* (*FrameCode)(void*);      // PyFrame_GetCode: new reference
  int (*FrameLine)(void*);        // PyFrame_GetLineNumber
  int (*FrameLasti)(void*);       // PyFrame_GetLasti (3.11), optional
  void (*IncRef)(void*);
  void (*DecRef)(void*);
  void* (*GetAttr)(void*, const char*);
  const char* (*Utf8)(void*);
  void (*ErrFetch)(void**, void**, void**);
  void (*ErrRestore)(void*, void*, void*);
  int (*GcDisable)();  // PyGC_Disable (3.10), optional
  int (*GcEnable)();
};

template <typename T>
bool Find(const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
  return *out != nullptr;
}

// Resolved once; a program without Python gets the "none" marker and never asks again.
PythonApi* const kNoPython = reinterpret_cast<PythonApi*>(uintptr_t{1});
std::atomic<PythonApi*> g_api{nullptr};

const PythonApi* Api() {
  PythonApi* api = g_api.load(std::memory_order_acquire);
  if (api == kNoPython) return nullptr;
  if (api != nullptr) return api;
  PythonApi found{};
  bool ok = Find("Py_IsInitialized", &found.IsInitialized) &&
            Find("PyGILState_Check", &found.GilStateCheck) &&
            Find("PyGILState_GetThisThreadState", &found.ThisThreadState) &&
            Find("PyEval_GetFrame", &found.GetFrame) && Find("PyFrame_GetBack", &found.FrameBack) &&
            Find("PyFrame_GetCode", &found.FrameCode) &&
            Find("PyFrame_GetLineNumber", &found.FrameLine) && Find("Py_IncRef", &found.IncRef) &&
            Find("Py_DecRef", &found.DecRef) && Find("PyObject_GetAttrString", &found.GetAttr) &&
            Find("PyUnicode_AsUTF8", &found.Utf8) && Find("PyErr_Fetch", &found.ErrFetch) &&
            Find("PyErr_Restore", &found.ErrRestore);
  if (ok && !Find("Py_IsFinalizing", &found.IsFinalizing)) {
    ok = Find("_Py_IsFinalizing", &found.IsFinalizing);
  }
  if (!Find("PyFrame_GetLasti", &found.FrameLasti)) found.FrameLasti = nullptr;
  if (!Find("PyGC_Disable", &found.GcDisable) || !Find("PyGC_Enable", &found.GcEnable)) {
    found.GcDisable = nullptr;
    found.GcEnable = nullptr;
  }
  if (ok && !Find("PyThreadState_GetUnchecked", &found.CurrentThreadState)) {
    Find("_PyThreadState_UncheckedGet", &found.CurrentThreadState);  // optional
  }
  PythonApi* made = ok ? new PythonApi(found) : kNoPython;  // leaked with the tracer
  PythonApi* expected = nullptr;
  if (!g_api.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    if (made != kNoPython) delete made;  // another thread resolved it first
    made = expected;
  }
  return made == kNoPython ? nullptr : made;
}

// Names of the code objects seen, by key (from 1): appended by a thread that holds the GIL
// and the table lock, read by the sender without a lock (entries never change once counted).
struct CodeEntry {
  const char* function;
  const char* file;
};
constexpr uint32_t kChunkEntries = 4096;
constexpr uint32_t kMaxChunks = 1024;  // 4 M code objects; past that, frames have no name
std::atomic<CodeEntry*> g_chunks[kMaxChunks];
std::atomic<uint32_t> g_code_count{0};

// A try-lock, never a wait: a thread that finds it taken (a free-threaded interpreter, a
// fork in the middle) records no Python stack rather than blocking the program.
std::atomic<bool> g_table_busy{false};
// Code object -> key, touched only under the lock. The code objects are kept referenced
// (never decremented) so that an address can never be reused by another code object.
std::unordered_map<const void*, uint32_t>* g_keys = nullptr;
// (code key, instruction offset) -> line, under the same lock: PyFrame_GetLineNumber decodes
// the code object's line table from its start, on every call; a call site is decoded once.
std::unordered_map<uint64_t, uint32_t>* g_lines = nullptr;

thread_local bool t_capturing = false;

const char* CopyText(const char* text) {
  if (text == nullptr) return nullptr;
  const size_t n = strnlen(text, 4096);
  char* copy = new char[n + 1];
  memcpy(copy, text, n);
  copy[n] = '\0';
  return copy;
}

// The attribute's text, copied (first of `names` that exists), or nullptr.
const char* ReadName(const PythonApi& py, void* code, const char* first, const char* second) {
  for (const char* name : {first, second}) {
    if (name == nullptr) continue;
    void* value = py.GetAttr(code, name);
    if (value == nullptr) continue;
    const char* text = py.Utf8(value);
    const char* copy = CopyText(text);
    py.DecRef(value);
    if (copy != nullptr) return copy;
  }
  return nullptr;
}

uint32_t KeyOf(const PythonApi& py, void* code) {
  if (g_keys == nullptr) g_keys = new std::unordered_map<const void*, uint32_t>();
  const auto it = g_keys->find(code);
  if (it != g_keys->end()) return it->second;
  const uint32_t index = g_code_count.load(std::memory_order_relaxed);
  if (index >= kChunkEntries * kMaxChunks) return 0;
  std::atomic<CodeEntry*>& chunk = g_chunks[index / kChunkEntries];
  if (chunk.load(std::memory_order_relaxed) == nullptr) {
    chunk.store(new CodeEntry[kChunkEntries](), std::memory_order_release);
  }
  // Reading an attribute may fail and set an exception; the program's own pending one (an
  // allocation while an exception propagates) is put back untouched.
  void* type = nullptr;
  void* value = nullptr;
  void* traceback = nullptr;
  py.ErrFetch(&type, &value, &traceback);
  CodeEntry& entry = chunk.load(std::memory_order_relaxed)[index % kChunkEntries];
  entry.function = ReadName(py, code, "co_qualname", "co_name");
  entry.file = ReadName(py, code, "co_filename", nullptr);
  py.ErrRestore(type, value, traceback);
  py.IncRef(code);
  const uint32_t key = index + 1;
  g_keys->emplace(code, key);
  g_code_count.store(index + 1, std::memory_order_release);
  return key;
}

uint32_t LineOf(const PythonApi& py, void* frame, uint32_t key) {
  const int lasti = py.FrameLasti != nullptr && key != 0 ? py.FrameLasti(frame) : -1;
  if (lasti < 0) {
    const int line = py.FrameLine(frame);
    return line > 0 ? static_cast<uint32_t>(line) : 0;
  }
  if (g_lines == nullptr) g_lines = new std::unordered_map<uint64_t, uint32_t>();
  const uint64_t site = (uint64_t{key} << 32) | static_cast<uint32_t>(lasti);
  const auto it = g_lines->find(site);
  if (it != g_lines->end()) return it->second;
  const int line = py.FrameLine(frame);
  const uint32_t value = line > 0 ? static_cast<uint32_t>(line) : 0;
  g_lines->emplace(site, value);
  return value;
}

// True when this thread holds the GIL of a running interpreter.
bool HoldsGil(const PythonApi& py) {
  if (py.IsInitialized() == 0 || py.IsFinalizing() != 0) return false;
  // PyGILState_Check answers 1 whenever its check is off (subinterpreters, early start-up):
  // the thread's own state must also be the one running.
  if (py.GilStateCheck() == 0) return false;
  void* mine = py.ThisThreadState();
  if (mine == nullptr) return false;
  return py.CurrentThreadState == nullptr || py.CurrentThreadState() == mine;
}

}  // namespace

uint32_t CapturePythonFrames(uint64_t* out, uint32_t max) {
  const PythonApi* api = Api();
  if (api == nullptr || max == 0 || t_capturing) return 0;
  const PythonApi& py = *api;
  if (!HoldsGil(py)) return 0;
  if (g_table_busy.exchange(true, std::memory_order_acquire)) return 0;
  t_capturing = true;
  // Making a parent's frame object (3.11 and later do it lazily) allocates, and an allocation
  // may start the garbage collector, whose finalizers may free tensors while the allocator
  // is inside its own call: no collection during the walk.
  const bool collector_was_on = py.GcDisable != nullptr && py.GcDisable() != 0;
  uint32_t n = 0;
  void* frame = py.GetFrame();
  if (frame != nullptr) py.IncRef(frame);  // owned like the ones PyFrame_GetBack returns
  while (frame != nullptr && n < max) {
    void* code = py.FrameCode(frame);
    const uint32_t key = code != nullptr ? KeyOf(py, code) : 0;
    out[2 * n] = key;
    out[2 * n + 1] = LineOf(py, frame, key);
    ++n;
    if (code != nullptr) py.DecRef(code);
    void* back = py.FrameBack(frame);
    py.DecRef(frame);
    frame = back;
  }
  if (frame != nullptr) py.DecRef(frame);
  if (collector_was_on) py.GcEnable();
  t_capturing = false;
  g_table_busy.store(false, std::memory_order_release);
  return n;
}

bool PythonCodeNames(uint64_t key, std::string* function, std::string* file) {
  if (key == 0 || key > g_code_count.load(std::memory_order_acquire)) return false;
  const uint64_t index = key - 1;
  const CodeEntry& entry =
      g_chunks[index / kChunkEntries].load(std::memory_order_acquire)[index % kChunkEntries];
  function->assign(entry.function != nullptr ? entry.function : "?");
  file->assign(entry.file != nullptr ? entry.file : "?");
  return true;
}

void ResetPythonFramesInChildAfterFork() {
  t_capturing = false;
  // A parent thread may have been changing the map: the child leaks it and starts another
  // (code objects then get new keys; the names already counted stay valid).
  g_keys = nullptr;
  g_lines = nullptr;
  g_table_busy.store(false, std::memory_order_relaxed);
}

}  // namespace cumemtrace::tracer
