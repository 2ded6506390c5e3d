#include "collector/engine/stream_decoder.h"

#include "collector/engine/torch_layers.h"

// protobuf's arena internals shadow member names; they are not our warnings to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#include <google/protobuf/arena.h>
#pragma GCC diagnostic pop

#include <initializer_list>
#include <string_view>

#include "collector/format/varint.h"

namespace cumemtrace::internal {
namespace {
const char* ClockName(int clock) {
  switch (clock) {
    case v1::TIMESTAMP_CLOCK_MONOTONIC: return "monotonic";
    case v1::TIMESTAMP_CLOCK_REALTIME: return "realtime";
    default: return "unspecified";
  }
}

const char* InjectionName(int mode) {
  switch (mode) {
    case v1::INJECTION_MODE_LD_PRELOAD: return "ld_preload";
    case v1::INJECTION_MODE_CUDA_INJECTION: return "cuda_injection";
    case v1::INJECTION_MODE_NVTX_INJECTION: return "nvtx_injection";
    default: return "unspecified";
  }
}

constexpr size_t kArenaBlockBytes = 8 << 20;  // a typical batch's messages fit in it

// The fields of the three hot payloads, as protobuf's accessors return them (in the order
// the slow path lists them). Both decoding paths fill these and turn them into compact
// events through the same functions below.
struct MemoryFields {
  int32_t operation = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
  int32_t kind = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint32_t thread_id = 0;
  uint32_t api_name_id = 0;
  uint32_t caller_module_id = 0;
  uint32_t stack_id = 0;
};

struct KernelFields {
  uint32_t name_id = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint64_t end_ns = 0;
  uint32_t thread_id = 0;
};

struct NvtxFields {
  int32_t operation = 0;
  uint32_t thread_id = 0;
  uint32_t domain_id = 0;
  uint32_t message_id = 0;
  uint64_t range_id = 0;
};

// False when the event accounts for nothing (an operation this reader does not know).
bool CompactMemory(const MemoryFields& m, Event* e) {
  if (m.operation == v1::MEMORY_OPERATION_ALLOCATE) {
    e->type = EventType::kAllocate;
  } else if (m.operation == v1::MEMORY_OPERATION_RELEASE) {
    e->type = EventType::kRelease;
  } else {
    return false;  // neither: nothing to account
  }
  e->a = m.address;
  e->b = m.bytes;
  e->kind = static_cast<uint8_t>(m.kind);
  e->device = m.device;
  e->thread_id = m.thread_id;
  e->name_id = m.api_name_id;
  e->caller_id = m.caller_module_id;
  e->stack_id = m.stack_id;
  e->c = m.stream;
  return true;
}

void CompactKernel(const KernelFields& k, Event* e) {
  e->type = EventType::kKernel;
  e->a = k.end_ns;
  e->c = k.stream;
  e->name_id = k.name_id;
  e->device = k.device;
  e->thread_id = k.thread_id;
}

bool CompactNvtx(const NvtxFields& n, Event* e) {
  switch (n.operation) {
    case v1::NVTX_OPERATION_PUSH:
    case v1::NVTX_OPERATION_START: e->type = EventType::kRangeOpen; break;
    case v1::NVTX_OPERATION_POP:
    case v1::NVTX_OPERATION_END: e->type = EventType::kRangeClose; break;
    case v1::NVTX_OPERATION_MARK: e->type = EventType::kMark; break;
    default: return false;
  }
  e->nvtx_op = static_cast<uint8_t>(n.operation);
  e->thread_id = n.thread_id;
  e->aux_id = n.domain_id;
  e->name_id = n.message_id;
  e->a = n.range_id;
  return true;
}

// A forward-only reader of protobuf wire format that gives up (returns false) rather than
// guess: every case it declines is left to the generated parser.
class WireReader {
 public:
  WireReader(const char* begin, const char* end)
      : p_(reinterpret_cast<const uint8_t*>(begin)), end_(reinterpret_cast<const uint8_t*>(end)) {}
  bool done() const { return p_ == end_; }

  bool Varint(uint64_t* value) { return ReadVarint(&p_, end_, value); }
  // A field's tag; false at a malformed or zero tag.
  bool Tag(uint32_t* field, uint32_t* wire_type) {
    uint64_t tag = 0;
    if (!Varint(&tag) || tag > 0xffffffffu || (tag >> 3) == 0) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    return true;
  }
  // A length-delimited field's bytes.
  bool Bytes(const char** begin, const char** end) {
    uint64_t size = 0;
    if (!Varint(&size) || size > static_cast<uint64_t>(end_ - p_)) return false;
    *begin = reinterpret_cast<const char*>(p_);
    p_ += size;
    *end = reinterpret_cast<const char*>(p_);
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;

// proto3 scalar conversions, as the generated parser does them.
uint32_t U32(uint64_t v) { return static_cast<uint32_t>(v); }
int32_t I32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// The three hot payloads are varint fields numbered below 16, each tag one byte. Values go
// into a table by field number (no branch per field); `known` says which numbers this
// reader knows, kept or not. Anything else (a longer tag, another wire type, an unknown
// field, a malformed varint) returns false and the frame goes to protobuf.
bool ReadSmallVarintFields(const char* begin, const char* end, uint32_t known, uint64_t* values) {
  const auto* p = reinterpret_cast<const uint8_t*>(begin);
  const auto* e = reinterpret_cast<const uint8_t*>(end);
  while (p != e) {
    const uint8_t tag = *p++;
    const uint32_t field = tag >> 3;
    if ((tag & 0x87) != 0 || ((known >> field) & 1) == 0) return false;
    if (p == e) return false;
    uint64_t value = *p;
    if (value < 0x80) {
      ++p;
    } else if (!ReadVarint(&p, e, &value)) {
      return false;
    }
    values[field] = value;  // a repeated scalar keeps the last value, as protobuf does
  }
  return true;
}

constexpr uint32_t Fields(std::initializer_list<int> numbers) {
  uint32_t mask = 0;
  for (int n : numbers) mask |= 1u << n;
  return mask;
}

// The tables are not zeroed whole (`= {}` compiles to a `rep stos`, a sixth of the
// decoder's time): only the fields read from them start at 0, the proto3 default.
bool ReadMemory(const char* begin, const char* end, MemoryFields* m) {
  uint64_t v[16];
  v[1] = v[2] = v[3] = v[4] = v[5] = v[7] = v[12] = v[13] = v[14] = v[15] = 0;
  if (!ReadSmallVarintFields(begin, end,
                             Fields({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}), v)) {
    return false;
  }
  m->operation = I32(v[1]);
  m->address = v[2];
  m->bytes = v[3];
  m->kind = I32(v[4]);
  m->device = U32(v[5]);
  m->stream = U32(v[7]);
  m->thread_id = U32(v[12]);
  m->api_name_id = U32(v[13]);
  m->caller_module_id = U32(v[14]);
  m->stack_id = U32(v[15]);
  return true;
}

bool ReadKernel(const char* begin, const char* end, KernelFields* k) {
  uint64_t v[16];
  v[1] = v[2] = v[3] = v[4] = v[6] = 0;
  if (!ReadSmallVarintFields(begin, end, Fields({1, 2, 3, 4, 5, 6, 7, 8, 9}), v)) return false;
  k->name_id = U32(v[1]);
  k->device = U32(v[2]);
  k->stream = U32(v[3]);
  k->end_ns = v[4];
  k->thread_id = U32(v[6]);
  return true;
}

bool ReadNvtx(const char* begin, const char* end, NvtxFields* n) {
  uint64_t v[16];
  v[1] = v[2] = v[3] = v[4] = v[5] = 0;
  if (!ReadSmallVarintFields(begin, end, Fields({1, 2, 3, 4, 5, 6, 7}), v)) return false;
  n->operation = I32(v[1]);
  n->thread_id = U32(v[2]);
  n->domain_id = U32(v[3]);
  n->message_id = U32(v[4]);
  n->range_id = v[5];
  return true;
}

bool ReadInternedString(const char* begin, const char* end, uint32_t* id,
                        std::string_view* value) {
  WireReader in(begin, end);
  *id = 0;
  *value = std::string_view();
  bool saw_value = false;
  while (!in.done()) {
    uint32_t field = 0, wire_type = 0;
    if (!in.Tag(&field, &wire_type)) return false;
    if (field == 1 && wire_type == kVarint) {
      uint64_t v = 0;
      if (!in.Varint(&v)) return false;
      *id = U32(v);
    } else if (field == 2 && wire_type == kLengthDelimited && !saw_value) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (!in.Bytes(&b, &e)) return false;
      *value = std::string_view(b, static_cast<size_t>(e - b));
      saw_value = true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

StreamDecoder::StreamDecoder() : arena_block_(new char[kArenaBlockBytes]) {
  google::protobuf::ArenaOptions options;
  options.initial_block = arena_block_.get();
  options.initial_block_size = kArenaBlockBytes;
  options.start_block_size = 1 << 20;
  options.max_block_size = 16 << 20;
  arena_ = std::make_unique<google::protobuf::Arena>(options);
}

StreamDecoder::~StreamDecoder() = default;

DecodedStream& StreamDecoder::Stream(uint32_t stream_id) {
  DecodedStream& stream = streams_[stream_id];
  stream.stream_id = stream_id;
  return stream;
}

void StreamDecoder::AddChunk(const v1::TraceChunk& chunk) {
  switch (chunk.content_case()) {
    case v1::TraceChunk::kWireFrame:
      AddWireFrame(Stream(chunk.stream_id()), chunk.wire_frame());
      break;
    case v1::TraceChunk::kCollector:
      AddCollectorRecord(Stream(chunk.stream_id()), chunk.collector());
      break;
    case v1::TraceChunk::kFileHeader:
    case v1::TraceChunk::CONTENT_NOT_SET:
      // The header says nothing about processes; an empty chunk (a newer writer's field this
      // reader does not know) is skipped.
      break;
  }
}

void StreamDecoder::AddWireFrame(uint32_t stream_id, std::string_view frame) {
  DecodedStream& stream = Stream(stream_id);
  if (AddBatchFrameFast(stream, frame)) return;
  AddWireFrame(stream, std::string(frame));
}

void StreamDecoder::AddWireFrame(DecodedStream& stream, const std::string& frame) {
  if (AddBatchFrameFast(stream, frame)) return;
  auto* message = google::protobuf::Arena::CreateMessage<v1::StreamMessage>(arena_.get());
  struct ResetAfterFrame {
    google::protobuf::Arena* arena;
    ~ResetAfterFrame() { arena->Reset(); }
  } reset{arena_.get()};
  if (!message->ParseFromString(frame)) {
    // proto3 parsing also fails on a string field that is not UTF-8 (e.g. a raw argv).
    stream.damage.push_back("wire frame of " + std::to_string(frame.size()) + " bytes after " +
                            std::to_string(stream.batches) +
                            " batches could not be parsed (corrupt, or a non-UTF-8 string); "
                            "skipped");
    return;
  }
  switch (message->kind_case()) {
    case v1::StreamMessage::kHandshake:
      if (stream.has_handshake) {
        stream.damage.push_back("second handshake on the stream; ignored");
      } else {
        AddHandshake(stream, message->handshake());
      }
      break;
    case v1::StreamMessage::kBatch:
      if (!stream.has_handshake && stream.batches == 0) {
        stream.damage.push_back("event batch before any handshake");
      }
      AddBatch(stream, message->batch());
      break;
    case v1::StreamMessage::KIND_NOT_SET:
      stream.damage.push_back("empty wire frame (no handshake, no batch); skipped");
      break;
  }
}

bool StreamDecoder::AddBatchFrameFast(DecodedStream& stream, std::string_view frame) {
  // StreamMessage { batch = 2 }, once, and nothing else.
  WireReader message(frame.data(), frame.data() + frame.size());
  uint32_t field = 0, wire_type = 0;
  const char* batch_begin = nullptr;
  const char* batch_end = nullptr;
  if (!message.Tag(&field, &wire_type) || field != 2 || wire_type != kLengthDelimited ||
      !message.Bytes(&batch_begin, &batch_end) || !message.done()) {
    return false;
  }

  // Events are appended as they are read and cut back if the frame is declined; strings
  // and the rare payloads are staged and applied only once the whole frame has been read.
  const size_t events_before = stream.events.size();
  fast_strings_.clear();
  fast_other_events_.clear();
  struct Rollback {
    StreamDecoder* decoder;
    DecodedStream& stream;
    size_t events_before;
    bool committed = false;
    ~Rollback() {
      if (!committed) stream.events.resize(events_before);
      decoder->arena_->Reset();
    }
  } rollback{this, stream, events_before};

  WireReader batch(batch_begin, batch_end);
  uint64_t sequence = 0;
  while (!batch.done()) {
    if (!batch.Tag(&field, &wire_type)) return false;
    if (field == 1 && wire_type == kVarint) {
      if (!batch.Varint(&sequence)) return false;
      continue;
    }
    if (field != 2 || wire_type != kLengthDelimited) return false;
    const char* event_begin = nullptr;
    const char* event_end = nullptr;
    if (!batch.Bytes(&event_begin, &event_end)) return false;

    WireReader in(event_begin, event_end);
    // Decoded in place at the end of the stream's events; taken back below unless the
    // payload is one of the timed events.
    Event& e = stream.events.emplace_back();
    uint32_t payload = 0;  // field number of the oneof member seen, 0 for none
    const char* payload_begin = nullptr;
    const char* payload_end = nullptr;
    while (!in.done()) {
      if (!in.Tag(&field, &wire_type)) return false;
      if (field == 1 && wire_type == kVarint) {
        if (!in.Varint(&e.timestamp_ns)) return false;
        continue;
      }
      // A second oneof member (replace or merge semantics) is protobuf's business.
      // Fields past the last one this reader knows (Event.native_module = 18) are a newer
      // writer's: protobuf's business too.
      if (field < 2 || field > 18 || wire_type != kLengthDelimited || payload != 0) return false;
      payload = field;
      if (!in.Bytes(&payload_begin, &payload_end)) return false;
    }
    switch (payload) {
      case 0:
        stream.events.pop_back();
        break;  // PAYLOAD_NOT_SET
      case 2: {
        stream.events.pop_back();
        uint32_t id = 0;
        std::string_view value;
        if (!ReadInternedString(payload_begin, payload_end, &id, &value)) return false;
        fast_strings_.emplace_back(id, value);
        break;
      }
      case 4: {
        MemoryFields m;
        if (!ReadMemory(payload_begin, payload_end, &m)) return false;
        if (!CompactMemory(m, &e)) stream.events.pop_back();
        break;
      }
      case 7: {
        KernelFields k;
        if (!ReadKernel(payload_begin, payload_end, &k)) return false;
        CompactKernel(k, &e);
        break;
      }
      case 8: {
        NvtxFields n;
        if (!ReadNvtx(payload_begin, payload_end, &n)) return false;
        if (!CompactNvtx(n, &e)) stream.events.pop_back();
        break;
      }
      default: {
        stream.events.pop_back();
        // Rare payloads (devices, thread names, drops, notices...): the generated parser.
        auto* other = google::protobuf::Arena::CreateMessage<v1::Event>(arena_.get());
        if (!other->ParseFromArray(event_begin, static_cast<int>(event_end - event_begin))) {
          return false;
        }
        fast_other_events_.push_back(other);
        break;
      }
    }
  }

  rollback.committed = true;
  if (!stream.has_handshake && stream.batches == 0) {
    stream.damage.push_back("event batch before any handshake");
  }
  BeginBatch(stream, sequence);
  // Ids are never reused within a connection, so a table filled in arrival order resolves
  // every reference, whatever the timestamps say.
  for (const auto& [id, value] : fast_strings_) stream.strings[id].assign(value.data(), value.size());
  for (const v1::Event* other : fast_other_events_) AddEvent(stream, *other);
  RetagTorchSegments(stream, events_before);
  return true;
}

void StreamDecoder::AddHandshake(DecodedStream& stream, const v1::Handshake& handshake) {
  stream.has_handshake = true;
  if (handshake.magic() != static_cast<uint32_t>(v1::HANDSHAKE_MAGIC)) {
    stream.damage.push_back("handshake has a wrong magic number");
  }
  if (handshake.protocol_version() != static_cast<uint32_t>(v1::PROTOCOL_VERSION)) {
    stream.damage.push_back("handshake speaks protocol version " +
                            std::to_string(handshake.protocol_version()));
  }
  stream.pid = handshake.pid();
  stream.ppid = handshake.ppid();
  stream.command_line.assign(handshake.command_line().begin(), handshake.command_line().end());
  stream.hostname = handshake.hostname();
  stream.tracer_version = handshake.tracer_version();
  stream.timestamp_clock = ClockName(handshake.timestamp_clock());
  stream.allocator_mode = handshake.allocator_mode();
  stream.pytorch_alloc_conf = handshake.pytorch_alloc_conf();
  stream.injection_mode = InjectionName(handshake.injection_mode());
  stream.kernels_enabled = handshake.kernels_enabled();
  stream.kernel_launches_enabled = handshake.kernel_launches_enabled();
  stream.trace_start_ns = handshake.trace_start_ns();
  stream.rank = handshake.has_rank() ? handshake.rank() : -1;
  stream.local_rank = handshake.has_local_rank() ? handshake.local_rank() : -1;
  stream.world_size = handshake.has_world_size() ? handshake.world_size() : 0;
  // Multi-host jobs: each host's monotonic clock starts anywhere. The handshake's clock pair
  // maps this stream's monotonic timestamps onto CLOCK_REALTIME, the base hosts share.
  if (handshake.timestamp_clock() == v1::TIMESTAMP_CLOCK_MONOTONIC &&
      handshake.has_clock_pair()) {
    stream.realtime_offset_ns = static_cast<int64_t>(handshake.clock_pair().realtime_ns()) -
                                static_cast<int64_t>(handshake.clock_pair().monotonic_ns());
  }
}

void StreamDecoder::AddBatch(DecodedStream& stream, const v1::EventBatch& batch) {
  BeginBatch(stream, batch.sequence());
  const size_t first = stream.events.size();
  for (const v1::Event& event : batch.events()) AddEvent(stream, event);
  RetagTorchSegments(stream, first);
}

void StreamDecoder::BeginBatch(DecodedStream& stream, uint64_t sequence) {
  // Batches of one connection arrive in order, so any jump is loss, not reordering.
  if (sequence != stream.next_sequence) {
    SequenceGap gap;
    gap.at_start = !stream.saw_batch;
    gap.after_sequence = stream.saw_batch ? stream.next_sequence - 1 : 0;
    gap.next_sequence = sequence;
    gap.missing = sequence > stream.next_sequence ? sequence - stream.next_sequence : 0;
    stream.sequence_gaps.push_back(gap);
  }
  stream.saw_batch = true;
  stream.next_sequence = sequence + 1;
  ++stream.batches;
}

void StreamDecoder::AddEvent(DecodedStream& stream, const v1::Event& event) {
  Event e{};
  e.timestamp_ns = event.timestamp_ns();
  switch (event.payload_case()) {
    case v1::Event::kInternedString:
      // Ids are never reused within a connection, so a table filled in arrival order
      // resolves every reference, whatever the timestamps say.
      stream.strings[event.interned_string().id()] = event.interned_string().value();
      return;
    case v1::Event::kDevice: {
      const v1::DeviceInfo& d = event.device();
      DeviceInfoRecord& info = stream.device_info[d.index()];
      info.name = d.name();
      info.uuid = d.uuid();
      info.total_memory_bytes = d.total_memory_bytes();
      return;
    }
    case v1::Event::kMemory: {
      const v1::MemoryOp& m = event.memory();
      const MemoryFields f{m.operation(), m.address(),     m.bytes(),
                           m.kind(),      m.device(),      m.stream(),
                           m.thread_id(), m.api_name_id(), m.caller_module_id(),
                           m.stack_id()};
      if (!CompactMemory(f, &e)) return;
      break;
    }
    case v1::Event::kFailedAllocation: {
      const v1::FailedAllocation& f = event.failed_allocation();
      e.type = EventType::kFailedAllocation;
      e.a = f.requested_bytes();
      e.b = f.device_free_bytes();
      e.c = f.device_total_bytes();
      e.code = f.error_code();
      e.name_id = f.api_name_id();
      e.aux_id = f.error_name_id();
      e.device = f.device();
      e.thread_id = f.thread_id();
      e.kind = static_cast<uint8_t>(f.kind());
      e.caller_id = f.caller_module_id();
      break;
    }
    case v1::Event::kKernel: {
      const v1::Kernel& k = event.kernel();
      CompactKernel(KernelFields{k.name_id(), k.device(), k.stream(), k.end_ns(), k.thread_id()},
                    &e);
      break;
    }
    case v1::Event::kNvtx: {
      const v1::Nvtx& n = event.nvtx();
      const NvtxFields f{n.operation(), n.thread_id(), n.domain_id(), n.message_id(), n.range_id()};
      if (!CompactNvtx(f, &e)) return;
      break;
    }
    case v1::Event::kThreadName:
      stream.thread_names[event.thread_name().thread_id()] = event.thread_name().name();
      return;
    case v1::Event::kDropped: {
      const v1::DroppedRecords& d = event.dropped();
      stream.drops.push_back(DropRecord{d.source(), d.count(), d.first_ns(), d.last_ns()});
      return;
    }
    case v1::Event::kProcessExit:
      stream.process_exit_code = event.process_exit().exit_code();
      stream.process_exit_ns = event.timestamp_ns();  // the process's last instant
      FlushTorchAllocations(stream);
      return;
    case v1::Event::kNotice: {
      const v1::TracerNotice& n = event.notice();
      const char* level = n.level() == v1::NOTICE_LEVEL_INFO      ? "info"
                          : n.level() == v1::NOTICE_LEVEL_WARNING ? "warning"
                                                                  : "";
      stream.notices.push_back(Notice{level, n.code(), n.text()});
      return;
    }
    case v1::Event::kTracerMemory: {
      // An estimate that may be re-sent as contexts appear: keep the largest figure.
      TracerMemoryRecord& t = stream.tracer_memory[event.tracer_memory().device()];
      if (event.tracer_memory().bytes() >= t.bytes) {
        t.bytes = event.tracer_memory().bytes();
        t.description = event.tracer_memory().description();
      }
      return;
    }
    case v1::Event::kTorchAllocator:
      AddTorchAllocatorEvent(stream, event.timestamp_ns(), event.torch_allocator());
      return;
    case v1::Event::kTorchBridge:
      AddTorchBridgeState(stream, event.torch_bridge());
      return;
    case v1::Event::kStackFrame:
      stream.stacks.Add(event.stack_frame());
      return;
    case v1::Event::kStack:
      stream.stacks.Add(event.stack());
      return;
    case v1::Event::kNativeModule:
      stream.stacks.Add(event.native_module());
      return;
    case v1::Event::kMemoryPool:  // pool sizes are not part of the summary yet
    case v1::Event::PAYLOAD_NOT_SET:
      return;
  }
  stream.events.push_back(e);
}

void StreamDecoder::AddCollectorRecord(DecodedStream& stream, const v1::CollectorRecord& record) {
  switch (record.kind_case()) {
    case v1::CollectorRecord::kOpened:
      if (!stream.has_handshake) stream.pid = record.opened().peer_pid();
      break;
    case v1::CollectorRecord::kClosed:
      stream.closed = true;
      FlushTorchAllocations(stream);
      stream.close_reason = record.closed().reason();
      stream.close_error = record.closed().error();
      break;
    case v1::CollectorRecord::kLauncherExit: {
      ExitStatus exit;
      exit.source = ExitStatus::Source::kLauncher;
      exit.code = record.launcher_exit().exit_code();
      exit.signal = record.launcher_exit().signal();
      exit.core_dumped = record.launcher_exit().core_dumped();
      stream.launcher_exit = exit;
      break;
    }
    case v1::CollectorRecord::KIND_NOT_SET:
      break;
  }
}

}  // namespace cumemtrace::internal
