#include "tracer/sources/python/python_frames.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/code_names.h"
#include "tracer/sources/stacks/stack_capture.h"

namespace cumemtrace::tracer {
namespace {

// The few CPython calls the capture needs, by their stable C names (3.9 and later). Objects
// are opaque here: PyObject*, PyFrameObject*, PyThreadState* are all void*.
struct PythonApi {
  int (*IsInitialized)();
  int (*IsFinalizing)();  // Py_IsFinalizing (3.13), _Py_IsFinalizing before
  int (*GilStateCheck)();
  void* (*ThisThreadState)();     // PyGILState_GetThisThreadState
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
  // For reading a thread's frames without the GIL (FrameLayout); all optional.
  int (*Addr2Line)(void*, int);  // PyCode_Addr2Line: reads the code object's line table only
  const void* code_type;         // &PyCode_Type
  const void* str_type;          // &PyUnicode_Type
  unsigned version;              // Py_Version >> 16: 0x030C for 3.12
  bool loop_per_frame;           // no Py_Version: before 3.11, one eval loop per frame
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
  const unsigned long* version = nullptr;  // Py_Version: 3.11 and later
  found.loop_per_frame = !Find("Py_Version", &version);
  if (!found.loop_per_frame && Find("PyCode_Addr2Line", &found.Addr2Line) &&
      Find("PyCode_Type", &found.code_type) && Find("PyUnicode_Type", &found.str_type)) {
    found.version = static_cast<unsigned>(*version >> 16);
  }
  PythonApi* made = ok ? new PythonApi(found) : kNoPython;  // leaked with the tracer
  PythonApi* expected = nullptr;
  if (!g_api.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    if (made != kNoPython) delete made;  // another thread resolved it first
    made = expected;
  }
  return made == kNoPython ? nullptr : made;
}

// Where CPython 3.11 to 3.13 keep a thread's frames (Include/internal/pycore_frame.h,
// cpython/pystate.h, cpython/code.h and cpython/unicodeobject.h of each version, LP64 builds
// with the GIL). PyTorch lets go of the GIL inside its operators, where tensors are
// allocated, so the frames are read directly, as py-spy and memray do: they cannot change
// while their own thread is inside this call.
struct FrameLayout {
  unsigned version;
  uint16_t tstate_frame;  // PyThreadState.cframe (3.11, 3.12) or .current_frame (3.13)
  int16_t cframe_frame;   // _PyCFrame.current_frame; -1: tstate_frame is the frame itself
  uint16_t frame_code;    // _PyInterpreterFrame.f_code (f_executable in 3.13)
  uint16_t frame_previous;
  uint16_t frame_instr;  // prev_instr (3.11, 3.12), instr_ptr (3.13)
  uint16_t frame_owner;
  int16_t frame_is_entry;  // _PyInterpreterFrame.is_entry (3.11); -1: an entry shim precedes
  uint16_t code_filename;
  uint16_t code_qualname;
  uint16_t code_firsttraceable;
  uint16_t code_instructions;  // co_code_adaptive
  uint16_t ascii_text;         // sizeof(PyASCIIObject): a compact ASCII string's text
  uint16_t compact_utf8;       // PyCompactUnicodeObject.utf8, utf8_length just before it
};
constexpr FrameLayout kFrameLayouts[] = {
    {0x030B, 56, 8, 32, 48, 56, 69, 68, 112, 128, 168, 184, 48, 56},
    {0x030C, 56, 0, 0, 8, 56, 70, -1, 112, 128, 176, 192, 40, 48},
    {0x030D, 72, -1, 0, 8, 56, 70, -1, 112, 128, 184, 200, 40, 48},
};
constexpr size_t kObjectType = 8;  // PyObject.ob_type
constexpr size_t kStrLength = 16;  // PyASCIIObject.length
constexpr size_t kStrState = 32;   // PyASCIIObject.state: interned:2 kind:3 compact:1 ascii:1
constexpr char kOwnedByGenerator = 1;
// 3.12 and later: the shim frame that _PyEval_EvalFrameDefault pushes on entry, just outside
// the frame it was called for (_PyFrame_IsEntryFrame reads it so).
constexpr char kOwnedByCStack = 3;
// A line word's entry bits (shared_ring.h).
constexpr uint64_t kEntryYes = v1::ring::kPythonEntryYes << v1::ring::kPythonEntryShift;
constexpr uint64_t kEntryNo = v1::ring::kPythonEntryNo << v1::ring::kPythonEntryShift;

const FrameLayout* LayoutOf(unsigned version) {
  for (const FrameLayout& layout : kFrameLayouts) {
    if (layout.version == version) return &layout;
  }
  return nullptr;
}

// A layout is used without the GIL only once walks read with process_vm_readv (an error where
// a plain read would fault) found code and str objects where the layout says: a debug or
// free-threaded build, or a release that moved a field, then has no stacks for threads
// without the GIL, and nothing worse. While the GIL is held the walk is also compared with
// the API's.
enum LayoutState : int { kLayoutUnusable, kLayoutChecking, kLayoutTrusted };
constexpr int kChecksBeforeTrust = 8;
std::atomic<int> g_layout_state{kLayoutChecking};
int g_layout_checks = 0;  // walks that passed, under the table lock

// Why a thread without the GIL got no Python stack, for the tracer's one notice
// (TakePythonFramesNotice); the first reason is kept.
enum Refusal : int { kNoRefusal, kNoLayout, kLayoutRefused, kCannotCheck, kRefusalTold };
std::atomic<int> g_refusal{kNoRefusal};
std::atomic<int> g_unusable_because{kLayoutRefused};  // why the check failed

// A try-lock, never a wait: a thread that finds it taken (another thread capturing, a fork
// in the middle) records no Python stack rather than blocking the program.
std::atomic<bool> g_table_busy{false};
// Code object -> key, touched only under the lock.
std::unordered_map<const void*, uint32_t>* g_keys = nullptr;
// (code key, instruction offset) -> line, under the same lock: the line table is decoded from
// its start on every call; a call site is decoded once.
std::unordered_map<uint64_t, uint32_t>* g_lines = nullptr;

thread_local bool t_capturing = false;

// A frame of a thread's previous walk through a layout, by depth: the same code object (its
// address and names, as the table checks them) at the same instruction has the same key and
// line. Keys stay valid for the life of the process, a forked child's included.
struct MemoFrame {
  uintptr_t code = 0;
  uintptr_t instr = 0;
  uintptr_t qualname = 0;
  uintptr_t filename = 0;
  uint32_t key = 0;
  uint32_t line = 0;
};
thread_local MemoFrame t_memo[kMaxPythonFrames];

const char* CopyText(const char* text, size_t max) {
  if (text == nullptr) return nullptr;
  const size_t n = strnlen(text, max);
  char* copy = new char[n + 1];
  memcpy(copy, text, n);
  copy[n] = '\0';
  return copy;
}

// The attribute's text, copied (first of `names` that exists), or nullptr. With the GIL.
const char* ReadName(const PythonApi& py, void* code, const char* first, const char* second) {
  for (const char* name : {first, second}) {
    if (name == nullptr) continue;
    void* value = py.GetAttr(code, name);
    if (value == nullptr) continue;
    const char* copy = CopyText(py.Utf8(value), 4096);
    py.DecRef(value);
    if (copy != nullptr) return copy;
  }
  return nullptr;
}

// Names a new entry through the API and keeps its code object referenced. With the GIL.
void NameWithTheGil(const PythonApi& py, void* code, CodeEntry* entry) {
  // Reading an attribute may fail and set an exception; the program's own pending one (an
  // allocation while an exception propagates) is put back untouched.
  void* type = nullptr;
  void* value = nullptr;
  void* traceback = nullptr;
  py.ErrFetch(&type, &value, &traceback);
  entry->function = ReadName(py, code, "co_qualname", "co_name");
  entry->file = ReadName(py, code, "co_filename", nullptr);
  py.ErrRestore(type, value, traceback);
  py.IncRef(code);
  entry->pinned = true;
}

std::unordered_map<const void*, uint32_t>& Keys() {
  if (g_keys == nullptr) g_keys = new std::unordered_map<const void*, uint32_t>();
  return *g_keys;
}

// A new code object's entry, under the table lock: `name` fills it (false: leave it out),
// then it is counted and found by the object's address. Returns its key; 0 when the table
// is full or `name` failed.
template <typename Name>
uint32_t AddCode(const void* code, Name name) {
  uint32_t key = 0;
  CodeEntry* entry = NextCodeEntry(&key);
  if (entry == nullptr) return 0;
  if (!name(entry)) return 0;
  Keys()[code] = key;
  CountCodeEntry(key);
  return key;
}

// The line of an instruction offset (bytes; negative before the first instruction), decoded
// once per call site.
template <typename Decode>
uint32_t CachedLine(uint32_t key, int offset, Decode decode) {
  if (key == 0 || offset < 0) {
    const int line = decode();
    return line > 0 ? static_cast<uint32_t>(line) : 0;
  }
  if (g_lines == nullptr) g_lines = new std::unordered_map<uint64_t, uint32_t>();
  const uint64_t site = (uint64_t{key} << 32) | static_cast<uint32_t>(offset);
  const auto it = g_lines->find(site);
  if (it != g_lines->end()) return it->second;
  const int line = decode();
  const uint32_t value = line > 0 ? static_cast<uint32_t>(line) : 0;
  g_lines->emplace(site, value);
  return value;
}

// Reads this process's memory: checked until the layout is trusted, with process_vm_readv,
// or where a seccomp filter forbids it, by writing the bytes into a pipe (write fails with
// EFAULT where a plain read would fault). The pipe lives for one walk only.
class MemoryReader {
 public:
  explicit MemoryReader(bool checked) : checked_(checked) {}
  ~MemoryReader() {
    if (pipe_[0] >= 0) close(pipe_[0]);
    if (pipe_[1] >= 0) close(pipe_[1]);
  }
  MemoryReader(const MemoryReader&) = delete;
  MemoryReader& operator=(const MemoryReader&) = delete;

  bool Bytes(uintptr_t address, void* out, size_t size) {
    if (!checked_) {
      memcpy(out, reinterpret_cast<const void*>(address), size);
      return true;
    }
    if (!through_pipe_) {
      iovec local{out, size};
      iovec remote{reinterpret_cast<void*>(address), size};
      const ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
      if (n >= 0 || (errno != EPERM && errno != ENOSYS)) return n == static_cast<ssize_t>(size);
      through_pipe_ = true;
    }
    if (pipe_[0] < 0 && pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    return write(pipe_[1], reinterpret_cast<const void*>(address), size) ==
               static_cast<ssize_t>(size) &&
           read(pipe_[0], out, size) == static_cast<ssize_t>(size);
  }
  template <typename T>
  bool Read(uintptr_t address, T* out) {
    if (!checked_) {  // a trusted layout's walk: one plain load, inlined
      memcpy(out, reinterpret_cast<const void*>(address), sizeof(T));
      return true;
    }
    return Bytes(address, out, sizeof(T));
  }

 private:
  bool checked_;
  bool through_pipe_ = false;
  int pipe_[2] = {-1, -1};
};

// One walk of the calling thread's frames through a FrameLayout, under the table lock.
class FrameWalk {
 public:
  FrameWalk(const PythonApi& py, const FrameLayout& layout, bool checked, bool gil)
      : py_(py), layout_(layout), memory_(checked), gil_(gil), memo_(!checked) {}

  // Frames as CapturePythonFrames writes them; wrong() says the layout is not this build's.
  uint32_t Run(uint64_t* out, uint32_t max) {
    const auto thread = reinterpret_cast<uintptr_t>(py_.ThisThreadState());
    if (thread == 0) return 0;
    uintptr_t frame = 0;
    // The thread state is certainly mapped: a checked read that fails there says the check
    // itself cannot be made (no process_vm_readv and no descriptor for the pipe).
    if (!memory_.Read(thread, &frame)) {
      cannot_check_ = true;
      return Wrong();
    }
    if (!memory_.Read(thread + layout_.tstate_frame, &frame)) return Wrong();
    if (layout_.cframe_frame >= 0 && frame != 0 &&
        !memory_.Read(frame + static_cast<uint16_t>(layout_.cframe_frame), &frame)) {
      return Wrong();
    }
    uint32_t n = 0;
    // Whether the frame visited last was written as out[n - 1]: an entry shim just outside
    // it makes it its eval loop's entry frame (3.12 and later).
    bool last_written = false;
    // A chain longer than any interpreter allows is not a chain of frames.
    for (int steps = 0; frame != 0 && n < max; ++steps) {
      uintptr_t code = 0;
      uintptr_t previous = 0;
      uintptr_t instr = 0;
      char owner = 0;
      if (steps > (1 << 20) || !memory_.Read(frame + layout_.frame_code, &code) ||
          !memory_.Read(frame + layout_.frame_previous, &previous) ||
          !memory_.Read(frame + layout_.frame_instr, &instr) ||
          !memory_.Read(frame + layout_.frame_owner, &owner)) {
        return Wrong();
      }
      const uintptr_t here = frame;
      frame = previous;
      if (owner == kOwnedByCStack && last_written) {
        out[2 * n - 1] = v1::ring::PythonFrameLine(out[2 * n - 1]) | kEntryYes;
      }
      last_written = false;
      if (owner >= kOwnedByCStack || owner < 0) continue;
      // 3.11 says it in the frame; later ones by the shim that follows, if any.
      uint64_t entry = kEntryNo;
      if (layout_.frame_is_entry >= 0) {
        char is_entry = 0;
        if (!memory_.Read(here + static_cast<uint16_t>(layout_.frame_is_entry), &is_entry)) {
          return Wrong();
        }
        entry = is_entry != 0 ? kEntryYes : kEntryNo;
      }
      if (!IsA(code, py_.code_type)) return Wrong();
      // A frame still being set up (PyEval_GetFrame and PyFrame_GetBack skip it too).
      int first_traceable = 0;
      if (!memory_.Read(code + layout_.code_firsttraceable, &first_traceable)) return Wrong();
      const uintptr_t instructions = code + layout_.code_instructions;
      if (owner != kOwnedByGenerator && instr < instructions + 2 * uintptr_t(first_traceable)) {
        continue;
      }
      uintptr_t qualname = 0;
      uintptr_t filename = 0;
      if (!memory_.Read(code + layout_.code_qualname, &qualname) ||
          !memory_.Read(code + layout_.code_filename, &filename)) {
        return Wrong();
      }
      // This depth's frame of the thread's previous walk: a settling loop allocates from the
      // same few call sites over and over, and the two table lookups of a frame cost more
      // than the rest of its walk in a program whose own data keeps them out of the caches.
      MemoFrame* memo = memo_ && n < kMaxPythonFrames ? &t_memo[n] : nullptr;
      if (memo != nullptr && memo->code == code && memo->instr == instr &&
          memo->qualname == qualname && memo->filename == filename) {
        out[2 * n] = memo->key;
        out[2 * n + 1] = memo->line | entry;
        ++n;
        last_written = true;
        continue;
      }
      const uint32_t key = KeyOf(code, qualname, filename);
      if (wrong_) return 0;
      const auto offset = static_cast<int64_t>(instr - instructions);  // bytes, as f_lasti
      const uint32_t line = LineOf(code, key, offset < 0 ? -1 : static_cast<int>(offset));
      out[2 * n] = key;
      out[2 * n + 1] = line | entry;
      if (memo != nullptr) {
        *memo = key != 0 ? MemoFrame{code, instr, qualname, filename, key, line} : MemoFrame{};
      }
      ++n;
      last_written = true;
    }
    return n;
  }

  bool wrong() const { return wrong_; }
  bool cannot_check() const { return cannot_check_; }

 private:
  uint32_t Wrong() {
    wrong_ = true;
    return 0;
  }

  bool IsA(uintptr_t object, const void* type) {
    uintptr_t actual = 0;
    return object != 0 && memory_.Read(object + kObjectType, &actual) &&
           actual == reinterpret_cast<uintptr_t>(type);
  }

  // A str's UTF-8 text, copied: compact ASCII directly, others when CPython already made
  // their UTF-8 form (making it allocates, which needs the GIL).
  const char* Text(uintptr_t str) {
    uint32_t state = 0;
    int64_t length = 0;
    uintptr_t text = 0;
    if (!IsA(str, py_.str_type) || !memory_.Read(str + kStrState, &state)) {
      wrong_ = true;
      return nullptr;
    }
    const bool compact = (state >> 5) & 1;
    const bool ascii = (state >> 6) & 1;
    if (compact && ascii) {
      text = str + layout_.ascii_text;
      if (!memory_.Read(str + kStrLength, &length)) return nullptr;
    } else if (compact) {
      if (!memory_.Read(str + layout_.compact_utf8, &text) ||
          !memory_.Read(str + layout_.compact_utf8 - 8, &length)) {
        return nullptr;
      }
    }
    if (text == 0 || length < 0) return nullptr;
    char buffer[4096];
    const size_t n = std::min<size_t>(static_cast<size_t>(length), sizeof(buffer) - 1);
    if (!memory_.Bytes(text, buffer, n)) return nullptr;
    buffer[n] = '\0';
    return CopyText(buffer, n);
  }

  uint32_t KeyOf(uintptr_t code, uintptr_t qualname, uintptr_t filename) {
    const auto* object = reinterpret_cast<const void*>(code);
    const auto it = Keys().find(object);
    if (it != Keys().end()) {
      const CodeEntry& known = CodeEntryAt(it->second - 1);
      if (known.pinned ||
          (known.qualname_object == qualname && known.filename_object == filename)) {
        return it->second;
      }
    }
    return AddCode(object, [&](CodeEntry* entry) {
      entry->qualname_object = qualname;
      entry->filename_object = filename;
      if (gil_) {
        NameWithTheGil(py_, reinterpret_cast<void*>(code), entry);
      } else {
        entry->function = Text(qualname);
        entry->file = Text(filename);
      }
      return !wrong_;
    });
  }

  uint32_t LineOf(uintptr_t code, uint32_t key, int offset) {
    return CachedLine(key, offset,
                      [&] { return py_.Addr2Line(reinterpret_cast<void*>(code), offset); });
  }

  const PythonApi& py_;
  const FrameLayout& layout_;
  MemoryReader memory_;
  bool gil_;
  // Only a trusted layout's walk: a checked one compares its keys with the API's, which may
  // have made a new key for a code object the previous walk named without the GIL.
  bool memo_;
  bool wrong_ = false;
  bool cannot_check_ = false;
};

// The API's walk, for the versions without a known layout. With the GIL.
uint32_t KeyThroughApi(const PythonApi& py, void* code) {
  const auto it = Keys().find(code);
  // An entry made without the GIL is not referenced: its code object may be another now.
  if (it != Keys().end() && CodeEntryAt(it->second - 1).pinned) return it->second;
  return AddCode(code, [&](CodeEntry* entry) {
    NameWithTheGil(py, code, entry);
    return true;
  });
}

// Before 3.11 each Python frame had its own call of the eval loop: every one is an entry.
// From 3.11 the API does not say (the caller copies what a checked direct walk found).
uint32_t WalkThroughApi(const PythonApi& py, uint64_t* out, uint32_t max) {
  const uint64_t entry =
      (py.loop_per_frame ? v1::ring::kPythonEntryYes : v1::ring::kPythonEntryUnknown)
      << v1::ring::kPythonEntryShift;
  // Making a parent's frame object (3.11 and later do it lazily) allocates, and an allocation
  // may start the garbage collector, whose finalizers may free tensors while the allocator
  // is inside its own call: no collection during the walk.
  const bool collector_was_on = py.GcDisable != nullptr && py.GcDisable() != 0;
  uint32_t n = 0;
  void* frame = py.GetFrame();
  if (frame != nullptr) py.IncRef(frame);  // owned like the ones PyFrame_GetBack returns
  while (frame != nullptr && n < max) {
    void* code = py.FrameCode(frame);
    const uint32_t key = code != nullptr ? KeyThroughApi(py, code) : 0;
    const int offset = py.FrameLasti != nullptr ? py.FrameLasti(frame) : -1;
    out[2 * n] = key;
    out[2 * n + 1] = CachedLine(key, offset, [&] { return py.FrameLine(frame); }) | entry;
    ++n;
    if (code != nullptr) py.DecRef(code);
    void* back = py.FrameBack(frame);
    py.DecRef(frame);
    frame = back;
  }
  if (frame != nullptr) py.DecRef(frame);
  if (collector_was_on) py.GcEnable();
  return n;
}

// True when this thread holds the GIL of a running interpreter.
bool HoldsGil(const PythonApi& py) {
  // PyGILState_Check answers 1 whenever its check is off (subinterpreters, early start-up):
  // the thread's own state must also be the one running.
  if (py.GilStateCheck() == 0) return false;
  void* mine = py.ThisThreadState();
  if (mine == nullptr) return false;
  return py.CurrentThreadState == nullptr || py.CurrentThreadState() == mine;
}

// A walk through the layout with checked reads; with the GIL also the API's walk, which must
// name the same code objects. Gives the API's frames when it ran, else the layout's.
uint32_t CheckLayout(const PythonApi& py, const FrameLayout& layout, bool gil, uint64_t* out,
                     uint32_t max) {
  // The API's walk first: it names (and pins) code objects the direct walk then finds.
  const uint32_t through_api = gil ? WalkThroughApi(py, out, max) : 0;
  constexpr uint32_t kMaxChecked = 256;
  uint64_t direct[2 * kMaxChecked];
  FrameWalk walk(py, layout, /*checked=*/true, gil);
  const uint32_t n = walk.Run(direct, std::min(max, kMaxChecked));
  bool agrees = !walk.wrong();
  if (gil) {
    agrees = agrees && through_api == n;
    for (uint32_t i = 0; agrees && i < n; ++i) agrees = out[2 * i] == direct[2 * i];
    // The same frames: the API's lines, the direct walk's entries.
    for (uint32_t i = 0; agrees && i < n; ++i) {
      out[2 * i + 1] = v1::ring::PythonFrameLine(out[2 * i + 1]) |
                       (direct[2 * i + 1] - v1::ring::PythonFrameLine(direct[2 * i + 1]));
    }
  } else if (agrees) {
    std::copy(direct, direct + 2 * n, out);
  }
  if (!agrees) {
    g_unusable_because.store(walk.cannot_check() ? kCannotCheck : kLayoutRefused,
                             std::memory_order_relaxed);
    g_layout_state.store(kLayoutUnusable, std::memory_order_release);
  } else if (n > 0 && ++g_layout_checks >= kChecksBeforeTrust) {
    g_layout_state.store(kLayoutTrusted, std::memory_order_release);
  }
  return gil ? through_api : agrees ? n : 0;
}

}  // namespace

uint32_t CapturePythonFrames(uint64_t* out, uint32_t max) {
  const PythonApi* api = Api();
  if (api == nullptr || max == 0 || t_capturing) return 0;
  const PythonApi& py = *api;
  if (py.IsInitialized() == 0 || py.IsFinalizing() != 0) return 0;
  const FrameLayout* layout = LayoutOf(py.version);
  const bool gil = HoldsGil(py);
  if (!gil &&
      (layout == nullptr || g_layout_state.load(std::memory_order_acquire) == kLayoutUnusable)) {
    int none = kNoRefusal;
    g_refusal.compare_exchange_strong(
        none, layout == nullptr ? kNoLayout : g_unusable_because.load(std::memory_order_relaxed),
        std::memory_order_relaxed);
    return 0;
  }
  if (g_table_busy.exchange(true, std::memory_order_acquire)) return 0;
  t_capturing = true;
  const int state =
      layout != nullptr ? g_layout_state.load(std::memory_order_acquire) : int{kLayoutUnusable};
  uint32_t n = 0;
  if (state == kLayoutTrusted) {
    n = FrameWalk(py, *layout, /*checked=*/false, gil).Run(out, max);
  } else if (state == kLayoutChecking) {
    n = CheckLayout(py, *layout, gil, out, max);
  } else if (gil) {
    n = WalkThroughApi(py, out, max);
  }
  t_capturing = false;
  g_table_busy.store(false, std::memory_order_release);
  return n;
}

bool TakePythonFramesNotice(std::string* text) {
  int why = g_refusal.load(std::memory_order_relaxed);
  if (why == kNoRefusal || why == kRefusalTold ||
      !g_refusal.compare_exchange_strong(why, kRefusalTold, std::memory_order_relaxed)) {
    return false;
  }
  const PythonApi* api = Api();
  const unsigned version = api != nullptr ? api->version : 0;
  *text = version == 0
              ? std::string("Python before 3.11")
              : "Python " + std::to_string(version >> 8) + "." + std::to_string(version & 0xff);
  switch (why) {
    case kNoLayout:
      *text += ": no frame layout is known for this version";
      break;
    case kCannotCheck:
      *text += ": its frame layout cannot be checked (no process_vm_readv, no pipe)";
      break;
    default:
      *text +=
          ": its frames are not laid out as this version's are (a debug or free-threaded "
          "build?)";
  }
  *text +=
      ", so a thread that let go of the GIL (as PyTorch's operators do around their "
      "allocations) has no Python stack; a thread that holds it still has one";
  return true;
}

void ResetPythonFrameLayoutForTesting(bool usable) {
  g_layout_state.store(usable ? kLayoutChecking : kLayoutUnusable, std::memory_order_relaxed);
  g_unusable_because.store(kLayoutRefused, std::memory_order_relaxed);
  g_layout_checks = 0;
  g_refusal.store(kNoRefusal, std::memory_order_relaxed);
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
