// Opt-in stacks of allocations (`run --stacks`, CUMEMTRACE_STACKS=python|native|all). The
// hook copies raw data only: Python (code key, line) pairs and native return addresses. The
// sender names the Python code objects and the modules; the collector symbolizes native
// addresses from the module files (design.md "Stacks").
#pragma once

#include <atomic>
#include <cstdint>

namespace cumemtrace::tracer {

enum StackMode : uint8_t {
  kStacksOff = 0,
  kStacksPython = 1,
  kStacksNative = 2,
  kStacksAll = 3,  // kStacksPython | kStacksNative
};

// "python", "native", "all"; anything else (unset, "0", "off") is off.
uint8_t ParseStackMode(const char* value);
// "python", "native", "all", or "" for off (Handshake.stacks).
const char* StackModeName(uint8_t mode);

extern std::atomic<uint8_t> g_stack_mode;
// What a hook pays with stacks off: one relaxed load.
inline uint8_t CurrentStackMode() { return g_stack_mode.load(std::memory_order_relaxed); }

// Bounds per stack (Stack.frame_ids allows MAX_STACK_FRAMES = 256 in all).
constexpr uint32_t kMaxPythonFrames = 64;
constexpr uint32_t kMaxNativeFrames = 64;

// A captured stack in the ring's layout (shared_ring.h StackHeader): a header word, then
// python_frames pairs of words, then native_frames addresses.
struct StackWords {
  const uint64_t* words = nullptr;
  uint32_t count = 0;
};

// The calling thread's stack per the mode, in a thread-local buffer valid until the thread's
// next capture; {nullptr, 0} when nothing was captured.
StackWords CaptureStack(uint8_t mode);

// Return addresses of the calling thread, innermost first (_Unwind_Backtrace of the
// statically linked libgcc); the frames of the tracer itself are left to the sender.
uint32_t CaptureNativeFrames(uint64_t* out, uint32_t max);

}  // namespace cumemtrace::tracer
