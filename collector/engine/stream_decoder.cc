#include "collector/engine/stream_decoder.h"

// protobuf's arena internals shadow member names; they are not our warnings to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#include <google/protobuf/arena.h>
#pragma GCC diagnostic pop

namespace cumemtrace::internal {
namespace {
constexpr size_t kArenaBlockBytes = 8 << 20;  // a typical batch's messages fit in it
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

void StreamDecoder::AddWireFrame(DecodedStream& stream, const std::string& frame) {
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
  stream.timestamp_clock = handshake.timestamp_clock();
  stream.allocator_mode = handshake.allocator_mode();
  stream.pytorch_alloc_conf = handshake.pytorch_alloc_conf();
  stream.injection_mode = handshake.injection_mode();
  stream.kernels_enabled = handshake.kernels_enabled();
  stream.trace_start_ns = handshake.trace_start_ns();
}

void StreamDecoder::AddBatch(DecodedStream& stream, const v1::EventBatch& batch) {
  // Batches of one connection arrive in order, so any jump is loss, not reordering.
  const uint64_t sequence = batch.sequence();
  if (sequence != stream.next_sequence) {
    SequenceGap gap;
    gap.at_start = !stream.saw_batch;
    gap.after_sequence = stream.saw_batch ? stream.next_sequence - 1 : 0;
    gap.next_sequence = sequence;
    gap.missing = sequence > stream.next_sequence ? sequence - stream.next_sequence : 0;
    stream.gaps.push_back(gap);
  }
  stream.saw_batch = true;
  stream.next_sequence = sequence + 1;
  ++stream.batches;
  for (const v1::Event& event : batch.events()) AddEvent(stream, event);
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
      if (m.operation() == v1::MEMORY_OPERATION_ALLOCATE) {
        e.type = EventType::kAllocate;
      } else if (m.operation() == v1::MEMORY_OPERATION_RELEASE) {
        e.type = EventType::kRelease;
      } else {
        return;  // neither: nothing to account
      }
      e.a = m.address();
      e.b = m.bytes();
      e.kind = static_cast<uint8_t>(m.kind());
      e.device = m.device();
      e.thread_id = m.thread_id();
      e.name_id = m.api_name_id();
      e.caller_id = m.caller_module_id();
      e.c = m.stream();
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
      e.type = EventType::kKernel;
      e.a = k.end_ns();
      e.c = k.stream();
      e.name_id = k.name_id();
      e.device = k.device();
      e.thread_id = k.thread_id();
      break;
    }
    case v1::Event::kNvtx: {
      const v1::Nvtx& n = event.nvtx();
      switch (n.operation()) {
        case v1::NVTX_OPERATION_PUSH:
        case v1::NVTX_OPERATION_START: e.type = EventType::kRangeOpen; break;
        case v1::NVTX_OPERATION_POP:
        case v1::NVTX_OPERATION_END: e.type = EventType::kRangeClose; break;
        case v1::NVTX_OPERATION_MARK: e.type = EventType::kMark; break;
        default: return;
      }
      e.nvtx_op = static_cast<uint8_t>(n.operation());
      e.thread_id = n.thread_id();
      e.aux_id = n.domain_id();
      e.name_id = n.message_id();
      e.a = n.range_id();
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
    case v1::Event::kMemoryPool:  // pool sizes are not part of the summary yet
    case v1::Event::PAYLOAD_NOT_SET:
      return;
  }
  stream.events.push_back(e);
}

void StreamDecoder::AddCollectorRecord(DecodedStream& stream, const v1::CollectorRecord& record) {
  switch (record.kind_case()) {
    case v1::CollectorRecord::kOpened:
      stream.peer_pid = record.opened().peer_pid();
      break;
    case v1::CollectorRecord::kClosed:
      stream.closed = true;
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
