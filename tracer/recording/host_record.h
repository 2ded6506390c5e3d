// What program threads hand to the sender thread. Filled in hooks, so it is cheap to build:
// plain fields, and a std::string that stays in its small-string buffer for short names.
// It travels through the shared ring (record_queue.cc, proto/cumemtrace/v1/shared_ring.h),
// which the collector reads after a crash: a new field or type goes into both.
#pragma once

#include <cstdint>
#include <string>

namespace cumemtrace::v1 {
class TorchBridgeState;
}

namespace cumemtrace::tracer {

struct NvtxDomain;  // nvtx_injection.cc; leaked, so pointers stay valid

// API calls the tracer recognises, by a small stable index (names in api_names.cc).
enum class ApiId : uint16_t;

struct HostRecord {
  enum class Type : uint8_t {
    kCorrelation,       // an API call began: correlation id -> thread, api
    kMemory,            // an allocation call returned memory, or a release call began
    kNvtx,              // NVTX push/pop/start/end/mark
    kFailedAllocation,  // an allocation call returned an error
    kThreadName,        // nvtxNameOsThread
    kDeviceSeen,        // a context was created on `device`
    kProcessExit,       // exit() with `exit_code`
    kTorchAllocator,    // an event of PyTorch's caching allocator (torch_bridge/)
    kTorchBridgeState,  // the bridge attached, or why not (torch_bridge_state)
    kLaunch,            // a kernel launch call began (kernels recorded at their launch)
    kTensorCategory,    // the Python side named a storage (device, address, bytes, category)
    kAttributionName,   // a module path or operator name: category = v1::AttributionKind,
                        // range_id = its id, text = the name
  };  // numbered as v1::ring::RecordType, below its own records (128 on): append only

  // kTorchAllocator, besides device, address and bytes (the entry's size).
  struct TorchFields {
    uint8_t action = 0;  // v1::TorchAllocatorAction
    uint64_t stream = 0;
    uint64_t sequence = 0;
    uint64_t allocated_total = 0;
    uint64_t allocated_current = 0;
    uint64_t reserved_current = 0;
    uint64_t pool_first = 0;
    uint64_t pool_second = 0;
    // An ALLOC's module and operators (`run --modules`, `--ops`), as ring::TorchAttribution.
    uint32_t module = 0;
    uint32_t op = 0;
    uint32_t inner_op = 0;
    uint32_t autograd_thread = 0;
    uint64_t autograd_sequence = 0;  // seqNr + 1; bit 63: in backward
  };

  Type type = Type::kCorrelation;
  uint8_t nvtx_operation = 0;  // v1::NvtxOperation
  uint16_t api = 0;            // ApiId for correlation / failed allocation
  uint32_t thread_id = 0;
  uint64_t timestamp_ns = 0;
  uint32_t correlation_id = 0;
  uint32_t device = 0;
  uint64_t range_id = 0;         // NVTX start/end
  uint32_t category = 0;         // NVTX; kTensorCategory: its v1::Category
  uint32_t color = 0;            // NVTX
  const NvtxDomain* domain = nullptr;
  // kMemory: what the call made or gave back. A release's size, kind and device are those of
  // the allocation it ends (the translator knows them); bytes is set for cuMemUnmap only.
  // kFailedAllocation: bytes is what the call asked for.
  bool release = false;
  bool is_async = false;
  uint8_t memory_kind = 0;  // v1::MemoryKind
  uint32_t stream_id = 0;   // CUPTI's stream id, as in kernel records
  uint64_t address = 0;
  uint64_t bytes = 0;
  int32_t error_code = 0;        // failed allocation; exit code for kProcessExit
  uint64_t device_free_bytes = 0;
  uint64_t device_total_bytes = 0;
  std::string text;              // NVTX message or thread name
  std::string caller;            // calling module of a synchronous allocation call, or ""
  TorchFields torch;
  // kTorchBridgeState: owned by the record, deleted by the translator once encoded (sent
  // once per process; a record dropped from a full queue leaks it).
  v1::TorchBridgeState* torch_bridge_state = nullptr;
  // kLaunch: the kernel's name as CUPTI gives it (owned by the driver); `text` holds a copy
  // the first time a thread launches it, the sender maps the pointer to that name after.
  const char* symbol = nullptr;
  // Allocations with `run --stacks` (kMemory, kTorchAllocator ALLOC): the thread's stack in
  // the ring's layout (shared_ring.h StackHeader and its words). Borrowed: in a hook, the
  // capture's thread-local buffer; after RecordQueue::TakeAll, the queue's, valid until the
  // next TakeAll. nullptr: none.
  const uint64_t* stack = nullptr;
  uint32_t stack_words = 0;
};

}  // namespace cumemtrace::tracer
