// Internal: a stream's events decoded into compact POD records (no proto objects kept, strings
// by interned id), plus what the stream said about itself. Produced by StreamDecoder, consumed
// by the per-process sweep (accountant.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/stacks.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {

enum class EventType : uint8_t {
  kRangeOpen,  // NVTX push or start
  kAllocate,
  kRelease,
  kFailedAllocation,
  kKernel,
  kMark,
  kRangeClose,  // NVTX pop or end
  // A TensorCategory: what the live allocation at an address is. It sorts with the memory
  // events (rank 1), so that at an equal timestamp arrival decides, as the program said it.
  kCategory,
};

// Order at equal timestamps (design.md "Phases"): openings first, closings last.
inline int TieRank(EventType type) {
  return type == EventType::kRangeOpen ? 0 : type == EventType::kRangeClose ? 2 : 1;
}

// names[value] of an enum's names; names[0] for a value not listed (unspecified, or a newer
// writer's).
inline const char* Named(int value, std::initializer_list<const char*> names) {
  return value > 0 && static_cast<size_t>(value) < names.size() ? names.begin()[value]
                                                                : *names.begin();
}

// A device (or device slot) and an address as one key: device addresses are 49-bit virtual
// addresses, so the device in the top bits cannot collide in practice.
inline uint64_t AddressKey(uint32_t device, uint64_t address) {
  return address ^ (static_cast<uint64_t>(device) << 56);
}

// One timed event; field meaning depends on `type` (see stream_decoder.cc).
struct Event {
  uint64_t timestamp_ns;
  // kAllocate/kRelease/kCategory: address. kKernel: end_ns. kRange*: range_id.
  // kFailedAllocation: requested bytes.
  uint64_t a;
  // kAllocate/kRelease/kCategory: bytes. kFailedAllocation: device free bytes.
  uint64_t b;
  // kFailedAllocation: device total bytes, or for PyTorch's OOM (kind TORCH_ALLOCATED) the
  // index of its TorchOomRecord. kKernel, kAllocate, kRelease: CUPTI stream id.
  uint64_t c;
  uint32_t thread_id;
  // Interned ids: api name (memory, failed), kernel name, NVTX message.
  uint32_t name_id;
  // Interned ids: NVTX domain, failed allocation's error name. A tensor's kAllocate: its
  // attribution, an index into DecodedStream::attribution.births (0: none).
  uint32_t aux_id;
  int32_t code;  // failed allocation's error code
  uint32_t caller_id;  // interned calling module (allocation, failed allocation), 0 if unknown
  uint32_t device;
  EventType type;
  uint8_t kind;     // v1::MemoryKind; kCategory: v1::Category
  uint8_t nvtx_op;  // v1::NvtxOperation
  uint8_t pad = 0;
  uint32_t stack_id = 0;  // kAllocate: wire stack id (`run --stacks`), 0 if none
};

struct DeviceInfoRecord {
  std::string name;
  std::string uuid;
  uint64_t total_memory_bytes = 0;
};

struct DropRecord {
  int source = 0;
  uint64_t count = 0;
  uint64_t first_ns = 0;  // absolute
  uint64_t last_ns = 0;
};

struct TracerMemoryRecord {
  uint64_t bytes = 0;
  std::string description;
};

// The PyTorch bridge's events of one stream, while they are turned into tensor
// allocations (torch_layers.h).
struct TorchPendingAlloc {
  bool set = false;
  uint64_t timestamp_ns = 0;
  uint64_t address = 0;
  uint64_t requested = 0;
  uint64_t sequence = 0;
  uint64_t allocated_total = 0;
  // allocated_bytes.current before its increase, and the bytes of blocks freed since: the
  // size when the program reset the cumulative counter in between (Settle). Usable only
  // while the rebuilt blocks agreed with that counter at the ALLOC, every free since was of
  // one of them, and no probe that a later event overtook is settling it.
  uint64_t allocated_current = 0;
  uint64_t released_since = 0;
  bool current_usable = false;
  // Rounded blocks (ALLOC_ROUNDED) allocated since, which later counters include, and the
  // sequence of the last of them.
  uint64_t rounded_since = 0;
  uint64_t rounded_last_sequence = 0;
  uint32_t thread_id = 0;
  uint32_t stack_id = 0;
  uint32_t attribution = 0;  // index into AttributionDecode::births
  bool gap = false;  // an event of the device was lost since: the block size is estimated
  // Freed (FREE_REQUESTED without counters) before its size was settled.
  bool freed = false;
  uint64_t free_timestamp_ns = 0;
  uint32_t free_thread_id = 0;
};

// An allocator event that came before one it follows (torch_layers.cc's reordering).
struct WaitingTorchEvent {
  uint64_t timestamp_ns = 0;
  v1::TorchAllocatorEvent event;
};

struct TorchDeviceDecode {
  TorchPendingAlloc pending;  // an ALLOC whose block size the next event settles
  uint64_t last_sequence = 0;
  // Events that arrived before the events they follow, by (sequence, 1 for a probe): a
  // device's events come from the program's threads' own buffers and from the ring, drained
  // in turn, so a probe (always the ring's) can arrive before the buffered event it read.
  std::multimap<std::pair<uint64_t, int>, WaitingTorchEvent> waiting;
  std::unordered_map<uint64_t, uint64_t> live;  // block address -> block bytes
  uint64_t allocated = 0;                       // sum of live
};

// One of the caching allocator's segment events (SEGMENT_ALLOC/FREE/MAP/UNMAP): what the
// post-mortem of a failed allocation replays to rebuild its segments (oom.h).
struct TorchSegmentEvent {
  uint64_t timestamp_ns = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint64_t pool_first = 0;
  uint64_t pool_second = 0;
  uint32_t device = 0;
  uint32_t thread_id = 0;
  uint8_t action = 0;  // v1::TorchAllocatorAction
};

// The allocator's OOM event, which the stream's events carry as a failed allocation whose
// `c` indexes these.
struct TorchOomRecord {
  uint64_t stream = 0;
  uint64_t pool_first = 0;
  uint64_t pool_second = 0;
  size_t segment_events = 0;  // segment_log's size then: the segments it saw
  uint64_t released_before_bytes = 0;  // segments freed since the device's last block event
};

struct TorchDecodeState {
  std::map<uint32_t, TorchDeviceDecode> devices;
  std::vector<TorchSegmentEvent> segment_log;  // in arrival order (each device's own order)
  std::vector<TorchOomRecord> ooms;
  // Per device: bytes of segments freed since its last block event (ALLOC, FREE_REQUESTED).
  std::map<uint32_t, uint64_t> released_since_block_event;
  // (device, address) of the caching allocator's live driver memory (its segments).
  std::unordered_set<uint64_t> segments;
  // Interned caller ids known to name libc10_cuda (true) or not (false).
  std::unordered_map<uint32_t, bool> allocator_callers;
  TorchBridgeReport report;
};

// What was running when a tensor was born (`run --modules`, `--ops`; docs/design.md "Modules
// and operators"), with the backward link already made: ids of AttributionName (resolved
// once the stream is read), and the wire stack id of the linked forward allocation.
struct BirthAttribution {
  uint32_t module = 0;  // its own, or for a backward allocation without one its forward op's
  uint32_t op = 0;      // outermost operator (in backward: the autograd node)
  uint32_t inner_op = 0;
  bool backward = false;
  bool linked = false;            // backward: the forward allocation of its node was found
  bool module_inherited = false;  // `module` is the forward op's
  // Not linked (its forward op allocated nothing: a view, a select), `module` is that of
  // the thread's forward op just before it in autograd's order (the sequence below).
  bool module_from_earlier = false;
  uint32_t forward_op = 0;  // linked: the forward allocation's outer and inner operator
  uint32_t forward_inner_op = 0;
  uint32_t forward_stack = 0;  // linked: its wire stack id (`run --stacks`), 0 if none
  // A backward allocation that arrived before its forward op's: the pair it waits for (the
  // link is made in place when that arrives, AttributionDecode::pending).
  uint32_t waiting_thread = 0;
  uint64_t waiting_sequence = 0;
  auto Key() const {
    return std::make_tuple(module, op, inner_op, backward, linked, module_inherited,
                           module_from_earlier, forward_op, forward_inner_op, forward_stack,
                           waiting_thread, waiting_sequence);
  }
};

struct AttributionDecode {
  // AttributionName definitions: (kind, id) -> name.
  std::map<std::pair<uint32_t, uint32_t>, std::string> names;
  // Distinct attributions of the stream's tensors, [0] none: bounded by the program's code
  // (modules x operators x stacks), not by its events.
  std::vector<BirthAttribution> births{BirthAttribution()};
  std::map<decltype(BirthAttribution().Key()), uint32_t> index;
  // The first forward allocation of each (autograd thread, sequence): what a backward
  // allocation with the same pair names.
  struct ForwardOp {
    uint32_t op = 0;
    uint32_t inner_op = 0;
    uint32_t module = 0;
    uint32_t stack = 0;
  };
  std::map<std::pair<uint32_t, uint64_t>, ForwardOp> forward;
  // Backward births whose forward allocation has not arrived yet, by the pair they wait for.
  // Events of two threads may reach the collector out of order (each thread's own buffer is
  // drained in turn), so a backward allocation can come first; bounded by kMaxPending. One
  // entry for each distinct attribution waiting for a pair (a node allocates several).
  std::multimap<std::pair<uint32_t, uint64_t>, uint32_t> pending;
  static constexpr size_t kMaxPending = 4096;
  bool seen = false;  // a tensor event carried attribution, or a name was defined

  // "" for id 0 or an id never defined.
  std::string Name(uint32_t kind, uint32_t id) const {
    if (id == 0) return std::string();
    auto it = names.find({kind, id});
    return it == names.end() ? std::string() : it->second;
  }
};

// Everything one stream (one traced process) delivered.
struct DecodedStream : StreamFacts {
  DecodedStream() { timestamp_clock = injection_mode = "unspecified"; }  // until a handshake

  // Added to this stream's timestamps to put them on CLOCK_REALTIME (multi-host jobs);
  // 0 when unknown.
  int64_t realtime_offset_ns = 0;

  std::vector<Event> events;  // arrival order until sorted
  std::unordered_map<uint32_t, std::string> strings;
  std::map<uint32_t, DeviceInfoRecord> device_info;
  std::map<uint32_t, TracerMemoryRecord> tracer_memory;
  std::vector<DropRecord> drops;

  uint64_t next_sequence = 0;

  std::optional<int32_t> process_exit_code;
  uint64_t process_exit_ns = 0;
  std::optional<ExitStatus> launcher_exit;
  bool closed = false;
  int close_reason = 0;
  std::string close_error;

  TorchDecodeState torch;
  WireStacks stacks;  // `run --stacks`
  AttributionDecode attribution;  // `run --modules`, `--ops`

  // "" for id 0; an id that was never defined shows as "#<id>" rather than vanishing.
  std::string Resolve(uint32_t id) const {
    if (id == 0) return std::string();
    auto it = strings.find(id);
    return it == strings.end() ? "#" + std::to_string(id) : it->second;
  }
  // An NVTX range's (or mark's) name as the phase rules see it: "domain: message", or the
  // message alone in the default domain.
  std::string RangeName(uint32_t domain_id, uint32_t message_id) const {
    const std::string domain = Resolve(domain_id), message = Resolve(message_id);
    return domain.empty() ? message : domain + ": " + message;
  }
};

}  // namespace cumemtrace::internal
