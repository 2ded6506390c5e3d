// The layout of the shared-memory ring between the tracer and the collector: the one piece of
// the interface that is memory, not messages (as heapprofd's client and daemon share only
// wire_protocol.h). Plain structs, no code, so that tracer/ and collector/ still share nothing
// but this directory.
//
// The tracer creates the ring (a sealed memfd), hands it to the collector with the handshake
// (SCM_RIGHTS on the handshake's bytes, described by Handshake.shared_ring), and writes every
// host record into it before the record is anything else: program threads append records,
// the tracer's sender thread reads them, encodes them and sends them on the socket as before,
// and frees their space only once their frame has been handed to the kernel. Each EventBatch
// says how far in the ring it reaches (EventBatch.ring_position). So when the stream ends
// (the process exited, called _exit, was killed, crashed), every record the collector did not
// receive is still in the ring, between the last ring_position it saw and write_position, and
// the collector reads it from there: a record is the collector's the moment it is written.
//
// Every field is written by the traced process and is untrusted input to the collector: it
// checks each offset and size against the mapping before using it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cumemtrace::v1::ring {

constexpr uint32_t kMagic = 0x47524d43;  // "CMRG" in memory order
// 2: PyTorch allocator events are TorchRecords (kTorchEvent). A collector reads rings of
// every version from kOldestLayoutVersion on.
// 3: kFlagAttribution, kAttributionName. 4: TorchRecords of action AUTOGRAD_NODE (an older
// collector, which would read them as allocator events, leaves a ring of layout 4 alone).
constexpr uint32_t kLayoutVersion = 4;
constexpr uint32_t kOldestLayoutVersion = 1;
// The header page: the header, then the API name table.
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kApiTableOffset = 256;
constexpr uint32_t kApiNameBytes = 56;
struct ApiEntry {
  char name[kApiNameBytes];  // NUL-terminated driver call name ("cuMemAlloc_v2")
  uint8_t kind;              // v1::MemoryKind made by an allocation call
  uint8_t mapping;           // 1 for cuMemMap / cuMemUnmap
  uint8_t reserved[6];
};
constexpr uint32_t kMaxApis =
    static_cast<uint32_t>((kHeaderBytes - kApiTableOffset) / sizeof(ApiEntry));
// Largest data area a collector maps, twice the tracer's largest (32 MiB): what a peer can
// make the collector read and re-encode at the end of its stream stays bounded.
constexpr uint64_t kMaxCapacity = uint64_t{64} << 20;

// Positions count bytes ever written (they never wrap); the byte of position p is at
// data[p % capacity]. Written with release stores, read with acquire loads.
struct Header {
  uint32_t magic;
  uint32_t layout_version;
  uint64_t capacity;        // bytes of the data area, a power of two; data at kHeaderBytes
  uint64_t write_position;  // end of the last whole record
  uint64_t freed_position;  // the tracer's sender may overwrite below this
  // Records the program threads could not write because the ring was full (the collector
  // or the sender not keeping up): a running total, and the time span of those not yet
  // reported in a DroppedRecords event (0 when none).
  uint64_t dropped_total;
  uint64_t dropped_first_ns;
  uint64_t dropped_last_ns;
  uint32_t api_count;  // entries of the API table
  uint32_t reserved;
};
static_assert(sizeof(Header) <= kApiTableOffset, "the header overlaps the API table");

// One record, 8-byte aligned; `size` covers the record and its strings, padded to 8. A record
// never wraps: a padding record fills the end of the data area instead.
enum RecordType : uint8_t {
  // 0..127: the tracer's host record types (tracer/recording/host_record.h), 0..11 so far;
  // from 128 on, records of the ring's own
  kCorrelation = 0,
  kMemory = 1,
  kNvtx = 2,
  kFailedAllocation = 3,
  kThreadName = 4,
  kDeviceSeen = 5,
  kProcessExit = 6,
  kTorchAllocator = 7,    // payload: TorchPayload
  kTorchBridgeState = 8,  // payload: a serialized v1::TorchBridgeState
  kLaunch = 9,        // a kernel launch; text: its name (first launch on a thread); payload: uint64
                      // key of the name (the tracer's pointer to it: meaningful only as a key)
  kTensorCategory = 10,  // a storage named by the Python side: device, address, bytes, and the
                         // v1::Category in `category`
  kAttributionName = 11,  // a module path or operator name: `category` is its
                          // v1::AttributionKind, `range_id` its id, `text` the name
  kTorchEvent = 128,  // a TorchRecord, not a Record (layout 2 on)
  kPadding = 255,
};
// The payload of a kTorchAllocator record (besides device, address and bytes): layout 1's
// form of a PyTorch allocator event, read from older tracers' rings.
struct TorchPayload {
  uint64_t stream;
  uint64_t sequence;
  uint64_t allocated_total;
  uint64_t allocated_current;
  uint64_t reserved_current;
  uint64_t pool_first;
  uint64_t pool_second;
  uint8_t action;  // v1::TorchAllocatorAction
  uint8_t reserved[7];
};
static_assert(sizeof(TorchPayload) == 64, "the torch payload layout changed");
// Record.flags.
constexpr uint8_t kFlagStack = 1;  // the payload ends with a stack (StackHeader, then words)
// A TorchRecord followed by a TorchAttribution (before its stack, if any).
constexpr uint8_t kFlagAttribution = 2;
// A stack at the end of a payload (`run --stacks`): this header, then python_frames pairs of
// uint64 (the tracer's code key, meaningful only to the tracer, and the line in the low 32
// bits with a PythonFrameEntry in the two above, trace.proto), then
// native_frames uint64 return addresses, innermost first. Readers of layout version 1 that
// predate it read the type's payload from its start and never look past it.
struct StackHeader {
  uint16_t python_frames;
  uint16_t native_frames;
  uint32_t reserved;
};
static_assert(sizeof(StackHeader) == 8, "the stack header layout changed");
// A Python frame's second word: its line, and whether it is its eval loop's entry frame.
constexpr int kPythonEntryShift = 32;
constexpr uint64_t kPythonEntryUnknown = 0;  // the PythonFrameEntry values
constexpr uint64_t kPythonEntryYes = 1;
constexpr uint64_t kPythonEntryNo = 2;
inline uint32_t PythonFrameLine(uint64_t word) { return static_cast<uint32_t>(word); }
inline uint32_t PythonFrameEntry(uint64_t word) {
  return static_cast<uint32_t>((word >> kPythonEntryShift) & 3);
}
struct Record {
  uint32_t size;
  uint8_t type;  // RecordType
  uint8_t nvtx_operation;
  uint16_t api;  // index into the API table
  uint32_t thread_id;
  uint32_t correlation_id;
  uint64_t timestamp_ns;
  uint32_t device;
  uint32_t category;
  uint32_t color;
  uint32_t stream_id;
  uint64_t range_id;
  uint64_t address;
  uint64_t bytes;
  uint64_t device_free_bytes;
  uint64_t device_total_bytes;
  uint64_t domain_handle;  // the tracer's own (meaningful only to the tracer)
  int32_t error_code;
  uint8_t release;
  uint8_t is_async;
  uint8_t memory_kind;
  uint8_t flags;  // kFlag* (0 before stacks existed)
  // Then text (NVTX message, thread name), caller module, NVTX domain name (unterminated),
  // and the type's payload.
  uint32_t text_bytes;
  uint32_t caller_bytes;
  uint32_t domain_bytes;
  uint32_t payload_bytes;
};
static_assert(sizeof(Record) == 112, "the ring record layout changed: bump kLayoutVersion");

// A PyTorch allocator event (kTorchEvent): the program's threads write one for each tensor's
// allocation and free, so it holds only what such an event has, 96 bytes instead of a
// Record and TorchPayload's 176. `size` and `type` sit where a Record has them; a stack
// (kFlagStack) follows it. The fields are as in the wire's TorchAllocatorEvent. Layout 4 on,
// action AUTOGRAD_NODE is the wire's TorchAutogradNode: thread_id, timestamp_ns and its
// TorchAttribution, every other field 0.
struct TorchRecord {
  uint32_t size;
  uint8_t type;    // kTorchEvent
  uint8_t action;  // v1::TorchAllocatorAction
  uint8_t flags;   // kFlag*
  uint8_t reserved;
  uint32_t thread_id;
  uint32_t device;
  uint64_t timestamp_ns;
  uint64_t address;
  uint64_t requested_bytes;
  uint64_t stream;
  uint64_t sequence;
  uint64_t allocated_total;
  uint64_t allocated_current;
  uint64_t reserved_current;
  uint64_t pool_first;
  uint64_t pool_second;
};
static_assert(sizeof(TorchRecord) == 96, "the torch record layout changed: bump kLayoutVersion");

// What was running when a tensor was born (`run --modules`, `--ops`), after an ALLOC's
// TorchRecord whose flags have kFlagAttribution; fields as in the wire's TorchAllocatorEvent.
struct TorchAttribution {
  uint32_t module;
  uint32_t op;
  uint32_t inner_op;
  uint32_t autograd_thread;
  uint64_t autograd_sequence;  // seqNr + 1, 0: none; bit 63 (kBackwardBit): in backward
};
static_assert(sizeof(TorchAttribution) == 24, "the attribution layout changed");
constexpr uint64_t kBackwardBit = uint64_t{1} << 63;
static_assert(offsetof(TorchRecord, type) == offsetof(Record, type), "type must stay in place");

}  // namespace cumemtrace::v1::ring
