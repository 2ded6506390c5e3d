#include "tracer/sources/stacks/stack_capture.h"

#include <unwind.h>

#include <cstring>

#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/sources/python/python_frames.h"

namespace cumemtrace::tracer {

std::atomic<uint8_t> g_stack_mode{kStacksOff};

uint8_t ParseStackMode(const char* value) {
  if (value == nullptr) return kStacksOff;
  if (strcmp(value, "python") == 0) return kStacksPython;
  if (strcmp(value, "native") == 0) return kStacksNative;
  if (strcmp(value, "all") == 0) return kStacksAll;
  return kStacksOff;
}

const char* StackModeName(uint8_t mode) {
  switch (mode) {
    case kStacksPython: return "python";
    case kStacksNative: return "native";
    case kStacksAll: return "all";
    default: return "";
  }
}

namespace {

struct UnwindState {
  uint64_t* out;
  uint32_t max;
  uint32_t count;
};

_Unwind_Reason_Code OnFrame(struct _Unwind_Context* context, void* arg) {
  auto* state = static_cast<UnwindState*>(arg);
  const uintptr_t pc = _Unwind_GetIP(context);
  if (pc == 0) return _URC_END_OF_STACK;
  state->out[state->count++] = pc;
  return state->count < state->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

constexpr uint32_t kHeaderWords = 1;
constexpr uint32_t kBufferWords = kHeaderWords + 2 * kMaxPythonFrames + kMaxNativeFrames;

}  // namespace

uint32_t CaptureNativeFrames(uint64_t* out, uint32_t max) {
  if (max == 0) return 0;
  UnwindState state{out, max, 0};
  _Unwind_Backtrace(OnFrame, &state);
  return state.count;
}

StackWords CaptureStack(uint8_t mode) {
  thread_local uint64_t buffer[kBufferWords];
  uint32_t python = 0;
  uint32_t native = 0;
  if ((mode & kStacksPython) != 0) {
    python = CapturePythonFrames(buffer + kHeaderWords, kMaxPythonFrames);
  }
  if ((mode & kStacksNative) != 0) {
    native = CaptureNativeFrames(buffer + kHeaderWords + 2 * python, kMaxNativeFrames);
  }
  if (python == 0 && native == 0) return {};
  v1::ring::StackHeader header{};
  header.python_frames = static_cast<uint16_t>(python);
  header.native_frames = static_cast<uint16_t>(native);
  memcpy(&buffer[0], &header, sizeof(header));
  return StackWords{buffer, kHeaderWords + 2 * python + native};
}

}  // namespace cumemtrace::tracer
