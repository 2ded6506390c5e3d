// The PyTorch bridge shim: built against one torch version's headers
// (CUMEMTRACE_TORCH_VERSION names it), dlopen'ed by the tracer only when that version's
// libc10_cuda is loaded. It attaches a trace tracker to the caching allocator and passes
// each entry on, converted to the plain struct of bridge_abi.h.
//
// It shares libstdc++ with torch (the tracker is a std::function torch stores and calls),
// so it is a separate library from the tracer, which links its C++ runtime statically.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <c10/cuda/CUDACachingAllocator.h>
#if __has_include(<ATen/record_function.h>)
#include <ATen/record_function.h>
#define CUMEMTRACE_HAVE_RECORD_FUNCTION 1
#else
#define CUMEMTRACE_HAVE_RECORD_FUNCTION 0
#endif

#include "tracer/sources/torch_bridge/bridge_abi.h"
#include "tracer/sources/torch_bridge/bridge_core.h"
#include "tracer/sources/torch_bridge/device_counters.h"
#include "tracer/sources/torch_bridge/op_context.h"

#ifndef CUMEMTRACE_TORCH_VERSION
#error "CUMEMTRACE_TORCH_VERSION must name the torch version whose headers are used"
#endif

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using cumemtrace::torch_bridge::AutogradNode;
using cumemtrace::torch_bridge::BridgeCore;
using cumemtrace::torch_bridge::DeviceCounters;
using cumemtrace::torch_bridge::OpFrame;
using cumemtrace::torch_bridge::OpNames;
using cumemtrace::torch_bridge::OpStack;

std::atomic<cca::CUDAAllocator*>* g_allocator = nullptr;

struct CounterReader {
  bool operator()(uint32_t device, DeviceCounters* out) const noexcept {
    return cumemtrace::torch_bridge::ReadDeviceCounters(g_allocator->load(), device, out);
  }
};

// Where torch times its entries with the TSC, the hook uses that time (bridge_core.h).
#if defined(C10_RDTSC)
constexpr bool kTorchTimeIsTsc = true;
#else
constexpr bool kTorchTimeIsTsc = false;
#endif
// The operators each thread runs (watch_ops), copied into its ALLOCs.
std::atomic<bool> g_watching_ops{false};
thread_local OpStack t_ops;
// at::sequence_number::peek(): the number autograd gives the thread's next node. Without it
// no autograd node is said (op_context.h's Exit cannot tell which ops recorded one), and an
// ALLOC takes its op's sequence whether or not the op recorded a node.
using SequencePeekFn = uint64_t (*)();
SequencePeekFn g_sequence_peek = nullptr;
// The thread's next autograd sequence, or `unknown` without peek().
uint64_t PeekSequence(uint64_t unknown) {
  return g_sequence_peek != nullptr ? g_sequence_peek() : unknown;
}
struct OpFiller {
  void operator()(cumemtrace_torch_event* alloc) const noexcept {
    if (!g_watching_ops.load(std::memory_order_relaxed)) return;
    t_ops.FillWith([] { return PeekSequence(OpStack::kUnknown); }, alloc);
  }
};

using Core =
    BridgeCore<CounterReader, kTorchTimeIsTsc, cumemtrace::torch_bridge::SmallPoolBlock, OpFiller>;
Core* g_core = nullptr;  // leaked: torch keeps calling the tracker until the process ends

void Copy(const std::string& text, char* out, size_t size) {
  if (out == nullptr || size == 0) return;
  snprintf(out, size, "%s", text.c_str());
}

int Attach(const char* c10_cuda_path, cumemtrace_torch_emit_fn emit, void* context,
           char* allocator_name, size_t allocator_name_size, char* message,
           size_t message_size) noexcept {
  try {
    Copy("", allocator_name, allocator_name_size);
    Copy("", message, message_size);
    void* library = dlopen(c10_cuda_path, RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr) {
      Copy(std::string("libc10_cuda is not loaded: ") + c10_cuda_path, message, message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    // c10::cuda::CUDACachingAllocator::allocator, the definition libc10_cuda itself uses:
    // the global scope's comes first, as for the dynamic linker. A LibTorch program that
    // reads the allocator through an inline of CUDACachingAllocator.h holds a copy
    // relocation of it; libc10_cuda's static initializer then sets that copy, and the
    // library's own definition stays null forever.
    constexpr const char* kAllocator = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
    void* symbol = dlsym(RTLD_DEFAULT, kAllocator);
    if (symbol == nullptr) symbol = dlsym(library, kAllocator);
    if (symbol == nullptr) {
      Copy("libc10_cuda has no c10::cuda::CUDACachingAllocator::allocator", message,
           message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    g_allocator = static_cast<std::atomic<cca::CUDAAllocator*>*>(symbol);
    cca::CUDAAllocator* allocator = g_allocator->load();
    if (allocator == nullptr) {
      Copy("the CUDA caching allocator is not set yet", message, message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    const std::string name = allocator->name();
    Copy(name, allocator_name, allocator_name_size);
    if (name != "native") {
      Copy("the allocator is " + name + ", not the native caching allocator", message,
           message_size);
      return CUMEMTRACE_TORCH_NOT_NATIVE;
    }
    g_core = new Core(
        emit, context, CounterReader{},
        cumemtrace::torch_bridge::SmallPoolBlock{cumemtrace::torch_bridge::FindDivisions(library)},
        OpFiller{});
    Core* core = g_core;
    allocator->attachAllocatorTraceTracker(
        [core](const cca::TraceEntry& entry) { core->OnEntry(entry); });
    return CUMEMTRACE_TORCH_ATTACHED;
  } catch (const std::exception& error) {
    Copy(std::string("attachAllocatorTraceTracker failed: ") + error.what(), message,
         message_size);
  } catch (...) {
    Copy("attachAllocatorTraceTracker failed", message, message_size);
  }
  return CUMEMTRACE_TORCH_ATTACH_FAILED;
}

void Probe() noexcept {
  if (g_core != nullptr) g_core->Probe();
}

void Stop() noexcept {
  if (g_core != nullptr) g_core->Stop();
  g_watching_ops.store(false);
}

#if CUMEMTRACE_HAVE_RECORD_FUNCTION
// libtorch_cpu's functions, found in the loaded library: a Python program loads it with
// RTLD_LOCAL (through torch._C), so the shim cannot link against it by name.
using AddGlobalCallbackFn = at::CallbackHandle (*)(at::RecordFunctionCallback);
// RecordFunction::name() const, called with `this` as its first argument (the Itanium C++
// ABI's convention for a non-virtual member function).
using RecordFunctionNameFn = const char* (*)(const at::RecordFunction*);
RecordFunctionNameFn g_record_function_name = nullptr;
OpNames* g_op_names = nullptr;  // leaked: callbacks run until the process ends
thread_local OpNames::Cache t_op_name_cache;

std::unique_ptr<at::ObserverContext> OnOpStart(const at::RecordFunction& fn) {
  OpFrame frame;
  try {
    frame.op = g_op_names->IdOf(g_record_function_name(&fn), &t_op_name_cache);
  } catch (...) {
    frame.op = 0;  // no memory for a new name: the frame is kept, unnamed
  }
  const int64_t sequence = fn.seqNr();
  frame.sequence = sequence >= 0 ? static_cast<uint64_t>(sequence) + 1 : 0;
  frame.backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  frame.thread = static_cast<uint32_t>(frame.backward ? fn.forwardThreadId() : fn.threadId());
  t_ops.Enter(frame);
  return nullptr;
}

// A forward op that recorded an autograd node and allocated nothing (a view) is said as the
// node (CUMEMTRACE_TORCH_AUTOGRAD_NODE), so that its backward allocations name it. The common
// path reads the frame and, for a forward op no ALLOC named, autograd's thread-local counter:
// no lock, no allocation.
void OnOpEnd(const at::RecordFunction& /*fn*/, at::ObserverContext* /*context*/) {
  AutogradNode node;
  // Without peek() no op is known to have recorded a node (0: never one).
  if (!t_ops.ExitWith([] { return PeekSequence(0); }, &node) ||
      !g_watching_ops.load(std::memory_order_relaxed)) {
    return;
  }
  cumemtrace_torch_event event{};
  event.action = CUMEMTRACE_TORCH_AUTOGRAD_NODE;
  event.op = node.op;
  event.inner_op = node.inner_op;
  event.autograd_sequence = node.sequence;
  event.autograd_thread = node.thread;
  g_core->EmitOther(event);
}
#endif

int WatchOps(cumemtrace_torch_name_fn define, void* context, char* message,
             size_t message_size) noexcept {
  Copy("", message, message_size);
#if CUMEMTRACE_HAVE_RECORD_FUNCTION
  try {
    if (g_core == nullptr) {
      Copy("the bridge is not attached", message, message_size);
      return 1;
    }
    void* torch_cpu = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
    if (torch_cpu == nullptr) {
      Copy("libtorch_cpu is not loaded", message, message_size);
      return 1;
    }
    auto add = reinterpret_cast<AddGlobalCallbackFn>(
        dlsym(torch_cpu, "_ZN2at17addGlobalCallbackENS_22RecordFunctionCallbackE"));
    g_record_function_name =
        reinterpret_cast<RecordFunctionNameFn>(dlsym(torch_cpu, "_ZNK2at14RecordFunction4nameEv"));
    if (add == nullptr || g_record_function_name == nullptr) {
      Copy("libtorch_cpu has no at::addGlobalCallback or at::RecordFunction::name", message,
           message_size);
      return 1;
    }
    g_sequence_peek =
        reinterpret_cast<SequencePeekFn>(dlsym(torch_cpu, "_ZN2at15sequence_number4peekEv"));
    g_op_names = new OpNames(define, context);
    g_watching_ops.store(true);
    add(at::RecordFunctionCallback(OnOpStart, OnOpEnd)
            .needsInputs(false)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
    return 0;
  } catch (const std::exception& error) {
    Copy(std::string("at::addGlobalCallback failed: ") + error.what(), message, message_size);
  } catch (...) {
    Copy("at::addGlobalCallback failed", message, message_size);
  }
  g_watching_ops.store(false);
  return 1;
#else
  (void)define;
  (void)context;
  Copy("this bridge was built without torch's ATen/record_function.h", message, message_size);
  return 1;
#endif
}

const cumemtrace_torch_bridge kBridge = {
    CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION, CUMEMTRACE_TORCH_VERSION, Attach, Probe, Stop, WatchOps,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const cumemtrace_torch_bridge*
cumemtrace_torch_bridge_v1(void) {
  return &kBridge;
}
