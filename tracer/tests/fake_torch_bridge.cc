// A stand-in for the PyTorch bridge's shim (bridge_abi.h), built under a shim's name for the
// fake torch 9.9.0: attach keeps the tracer's emit function, and fake_torch_bridge_emit
// plays the caching allocator on several threads, each its own device (so each device's
// events come from one thread, in sequence, as under torch's device lock). Every field is a
// function of the device and the sequence, so that the test can check each event whole.
// With watch_ops (`run --ops`) its ALLOCs name operators, and with the tracer's
// cumemtrace_module_enter (`run --modules`) each thread says its module, changing every six
// events (FakeAttribution): the test checks every ALLOC's attribution too, and the autograd
// nodes it emits after every tenth event (fake_torch_bridge_node).
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace {

cumemtrace_torch_emit_fn g_emit = nullptr;
void* g_context = nullptr;

int Attach(const char* /*c10_cuda_path*/, cumemtrace_torch_emit_fn emit, void* context,
           char* allocator_name, size_t allocator_name_size, char* message, size_t message_size) {
  g_emit = emit;
  g_context = context;
  snprintf(allocator_name, allocator_name_size, "native");
  snprintf(message, message_size, "attached");
  return CUMEMTRACE_TORCH_ATTACHED;
}
void Probe() {}
void Stop() { g_emit = nullptr; }

bool g_watching = false;
int WatchOps(cumemtrace_torch_name_fn define, void* context, char* /*message*/,
             size_t /*message_size*/) {
  for (uint32_t id = 1; id <= 3; ++id) {
    const std::string name = "op." + std::to_string(id);
    define(CUMEMTRACE_TORCH_NAME_OPERATOR, id, name.c_str(), context);
  }
  g_watching = true;
  return 0;
}

const cumemtrace_torch_bridge kBridge = {
    CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION, "9.9.0", Attach, Probe, Stop, WatchOps};

}  // namespace

extern "C" {
// The attribution of the ALLOC with sequence `seq` on device `device` (cupti_mux_test.cc
// checks it): operators when watched, module when the tracer has module calls; the same for
// six events in a row.
__attribute__((visibility("default"))) void fake_torch_bridge_attribution(
    uint32_t device, uint64_t seq, uint32_t* module, cumemtrace_torch_event* e) {
  const uint64_t k = seq / 6;
  *module = static_cast<uint32_t>(k % 3);
  e->op = static_cast<uint32_t>(1 + k % 3);
  e->inner_op = k % 4 == 1 ? 0 : static_cast<uint32_t>(1 + (k + 1) % 3);
  e->autograd_sequence =
      k % 5 == 0 ? 0 : (k + 1) | (k % 7 == 0 ? CUMEMTRACE_TORCH_BACKWARD_BIT : 0);
  e->autograd_thread = e->autograd_sequence != 0 ? device + 1 : 0;
}

// The autograd node (a forward op that allocated nothing) the thread of `device` emits after
// its event `seq` when watched, every tenth event: its module is the one of the thread's last
// ALLOC (seq - 1).
__attribute__((visibility("default"))) void fake_torch_bridge_node(uint32_t device, uint64_t seq,
                                                                   cumemtrace_torch_event* e) {
  e->action = CUMEMTRACE_TORCH_AUTOGRAD_NODE;
  e->op = static_cast<uint32_t>(1 + seq % 3);
  e->inner_op = seq % 20 == 0 ? 0 : 3;
  e->autograd_sequence = 100000 + seq;
  e->autograd_thread = device + 1;
}

__attribute__((visibility("default"))) const cumemtrace_torch_bridge* cumemtrace_torch_bridge_v1() {
  return &kBridge;
}

// Emits `events` events on each of `threads` threads; returns how many the tracer refused.
// With work_kib, each thread stores into a program of its own of that many KiB between two
// events, as a program's own work leaves the caches to the hook, and with pace_ns starts an
// event no sooner than that after the last, at a program's rate rather than faster than
// the sender drains (benchmarks/hook_in_library.sh times the hook so).
__attribute__((visibility("default"))) int fake_torch_bridge_emit(int threads, int events,
                                                                  int work_kib, int pace_ns) {
  std::vector<std::thread> workers;
  std::vector<int> refused(static_cast<size_t>(threads), 0);
  using DefineModule = uint32_t (*)(uint32_t, const char*);
  using EnterModule = uint32_t (*)(uint32_t);
  auto define_module =
      reinterpret_cast<DefineModule>(dlsym(RTLD_DEFAULT, "cumemtrace_module_define"));
  auto enter_module = reinterpret_cast<EnterModule>(dlsym(RTLD_DEFAULT, "cumemtrace_module_enter"));
  if (define_module != nullptr) {
    define_module(1, "module.1");
    define_module(2, "module.2");
  }
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, events, work_kib, pace_ns, &refused, enter_module] {
      std::vector<uint64_t> program(static_cast<size_t>(work_kib) * 1024 / 8);
      size_t at = 0;
      auto last = std::chrono::steady_clock::now();
      for (int n = 1; n <= events; ++n) {
        for (int i = 0; i < 16 && !program.empty(); ++i) {
          at = (at + 4099) % program.size();  // a stride across lines and pages
          program[at] += static_cast<uint64_t>(n);
        }
        if (pace_ns > 0) {
          const auto next = last + std::chrono::nanoseconds(pace_ns);
          while (std::chrono::steady_clock::now() < next) {
          }
          last = next;
        }
        cumemtrace_torch_event e{};
        const auto seq = static_cast<uint64_t>(n);
        e.action = n % 2 == 1 ? CUMEMTRACE_TORCH_ALLOC : CUMEMTRACE_TORCH_FREE_REQUESTED;
        e.device = static_cast<uint32_t>(t);
        e.sequence = seq;
        e.address = 0x7f0000000000ull + (uint64_t(t) << 32) + seq * 512;
        e.requested_bytes = seq * 3 + uint64_t(t);
        e.stream = uint64_t(t) * 100 + seq / 7;
        if (n % 4 == 1) {
          e.allocated_bytes_total = seq * 5;
          e.allocated_bytes_current = seq * 7;
          e.reserved_bytes_current = seq * 11;
        }
#if defined(__x86_64__)
        e.tsc = __rdtsc();
#endif
        if (e.action == CUMEMTRACE_TORCH_ALLOC) {
          uint32_t module = 0;
          cumemtrace_torch_event attribution{};
          fake_torch_bridge_attribution(e.device, seq, &module, &attribution);
          if (g_watching) {
            e.op = attribution.op;
            e.inner_op = attribution.inner_op;
            e.autograd_sequence = attribution.autograd_sequence;
            e.autograd_thread = attribution.autograd_thread;
          }
          if (enter_module != nullptr) enter_module(module);
        }
        if (g_emit == nullptr || g_emit(&e, g_context) == 0) ++refused[static_cast<size_t>(t)];
        if (g_watching && n % 10 == 0 && g_emit != nullptr) {
          cumemtrace_torch_event node{};
          fake_torch_bridge_node(static_cast<uint32_t>(t), seq, &node);
          g_emit(&node, g_context);  // a view's node after every tenth event
        }
      }
    });
  }
  int total = 0;
  for (size_t t = 0; t < workers.size(); ++t) {
    workers[t].join();
    total += refused[t];
  }
  return total;
}
}
