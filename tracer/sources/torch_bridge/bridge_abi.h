/* The plain C interface between the tracer and the PyTorch bridge shim
   (libcumemtrace-torch-bridge-<torch version>.so).

   The tracer links its C++ runtime statically and hides every symbol; the shim is built
   against one torch version's headers and shares libstdc++ with torch, because torch hands
   it a std::function and a TraceEntry. So nothing of C++ crosses this line: plain structs,
   integers and function pointers only. */
#ifndef CUMEMTRACE_TORCH_BRIDGE_ABI_H_
#define CUMEMTRACE_TORCH_BRIDGE_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a struct below changes in a way an older tracer cannot read, or the shim
   sends what an older tracer does not know. 2: cumemtrace_torch_event.tsc; 3:
   CUMEMTRACE_TORCH_ALLOC_ROUNDED; 4: the emit function's result; 5: operators (watch_ops);
   6: CUMEMTRACE_TORCH_AUTOGRAD_NODE (the structs are 5's: a tracer loads a shim of 5 too,
   which never sends one). */
#define CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION 6u
/* The oldest shim version a tracer of this version loads: the structs are the same. */
#define CUMEMTRACE_TORCH_BRIDGE_OLDEST_ABI_VERSION 5u

/* Actions, numbered as cumemtrace.v1.TorchAllocatorAction. */
enum {
  CUMEMTRACE_TORCH_ALLOC = 1,
  CUMEMTRACE_TORCH_FREE_REQUESTED = 2,
  CUMEMTRACE_TORCH_FREE_COMPLETED = 3,
  CUMEMTRACE_TORCH_SEGMENT_ALLOC = 4,
  CUMEMTRACE_TORCH_SEGMENT_FREE = 5,
  CUMEMTRACE_TORCH_SEGMENT_MAP = 6,
  CUMEMTRACE_TORCH_SEGMENT_UNMAP = 7,
  CUMEMTRACE_TORCH_OOM = 8,
  CUMEMTRACE_TORCH_STATS_PROBE = 9,
  /* An ALLOC whose block is the request rounded up to 512 bytes (at least 512), which the
     shim knows without reading the counters: a block of the small pool that torch's
     roundup_power2_divisions does not round (bridge_core.h). No counters. */
  CUMEMTRACE_TORCH_ALLOC_ROUNDED = 10,
  /* Not the allocator's (once watch_ops was called): a forward op ended that recorded an
     autograd node and allocated no tensor (a view), so that the node's backward allocations
     name it (op_context.h). op, inner_op, autograd_sequence and autograd_thread as an
     ALLOC's; device, address, sizes, counters and sequence 0. Emitted from RecordFunction's
     end callback on the op's thread, under no allocator lock. */
  CUMEMTRACE_TORCH_AUTOGRAD_NODE = 11
};

/* One allocator event, as the wire's TorchAllocatorEvent (see trace.proto). */
typedef struct cumemtrace_torch_event {
  uint32_t action;
  uint32_t device;
  uint64_t address;
  uint64_t requested_bytes;
  uint64_t stream;
  uint64_t sequence;
  uint64_t allocated_bytes_total;
  uint64_t allocated_bytes_current;
  uint64_t reserved_bytes_current;
  uint64_t pool_id_first;
  uint64_t pool_id_second;
  /* torch's own TSC read for the entry (TraceEntry's time, where torch reads the TSC for
     it), or 0: the tracer then reads its clock. */
  uint64_t tsc;
  /* An ALLOC's operators once watch_ops was called (op_context.h), else 0: the outermost
     and innermost running (names defined through the name function), autograd's sequence
     number + 1 (bit 63: in backward) and RecordFunction's thread id that goes with it. */
  uint32_t op;
  uint32_t inner_op;
  uint64_t autograd_sequence;
  uint32_t autograd_thread;
  uint32_t reserved;
} cumemtrace_torch_event;

#define CUMEMTRACE_TORCH_BACKWARD_BIT (UINT64_C(1) << 63)

/* Kinds of names, numbered as cumemtrace.v1.AttributionKind. */
enum { CUMEMTRACE_TORCH_NAME_OPERATOR = 2 };

/* Defines `id` as `name` (NUL-terminated, valid only during the call), before the first
   event that uses it, on the thread of that event. */
typedef void (*cumemtrace_torch_name_fn)(uint32_t kind, uint32_t id, const char* name,
                                         void* context);

/* Called by the shim on the allocator's thread under the allocator's device lock, for a
   STATS_PROBE on the thread that called probe, and for an AUTOGRAD_NODE on the op's thread
   under no lock: it must only copy the event and return (no torch call, no lock the allocator
   might want). Returns 0 when the event was not written into the tracer's ring (no room, or
   no ring), else 1: the shim sends a STATS_PROBE that was not written again at the next probe
   call. */
typedef int (*cumemtrace_torch_emit_fn)(const cumemtrace_torch_event* event, void* context);

/* Result of attach. */
enum {
  CUMEMTRACE_TORCH_ATTACHED = 0,
  /* The loaded libc10_cuda has no allocator symbol, or the allocator is not set yet. */
  CUMEMTRACE_TORCH_NO_ALLOCATOR = 1,
  /* The allocator is not the native caching allocator (backend:cudaMallocAsync): the
     driver sees every tensor already. */
  CUMEMTRACE_TORCH_NOT_NATIVE = 2,
  /* attachAllocatorTraceTracker threw; the message says what. */
  CUMEMTRACE_TORCH_ATTACH_FAILED = 3
};

typedef struct cumemtrace_torch_bridge {
  /* CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION of the shim. */
  uint32_t abi_version;
  /* torch version whose headers the shim was built against, e.g. "2.11.0+cu130". */
  const char* torch_version;
  /* Attaches a trace tracker to the caching allocator of the libc10_cuda loaded from
     `c10_cuda_path`. Writes the allocator's name() into `allocator_name` and a reason into
     `message` (both NUL-terminated, truncated to their sizes). Never throws. Call once. */
  int (*attach)(const char* c10_cuda_path, cumemtrace_torch_emit_fn emit, void* context,
                char* allocator_name, size_t allocator_name_size, char* message,
                size_t message_size);
  /* From the tracer's sender thread: for each device whose last event was an allocation
     not yet followed by another event, reads the allocator's counters and emits a
     CUMEMTRACE_TORCH_STATS_PROBE (dropped when an event slipped in meanwhile; read and
     sent again at the next call when the emit function returned 0). Takes the allocator's
     device lock briefly; never call it with a lock the allocator may wait on. */
  void (*probe)(void);
  /* Stops emitting (process exit, forked child). */
  void (*stop)(void);
  /* After a successful attach: watches the operators every thread runs (a global
     RecordFunction callback of FUNCTION and BACKWARD_FUNCTION scope, without inputs) and
     names them in each ALLOC. 0 on success, else writes the reason into `message`. */
  int (*watch_ops)(cumemtrace_torch_name_fn define, void* context, char* message,
                   size_t message_size);
} cumemtrace_torch_bridge;

/* The shim's one exported symbol. */
#define CUMEMTRACE_TORCH_BRIDGE_ENTRY "cumemtrace_torch_bridge_v1"
typedef const cumemtrace_torch_bridge* (*cumemtrace_torch_bridge_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* CUMEMTRACE_TORCH_BRIDGE_ABI_H_ */
