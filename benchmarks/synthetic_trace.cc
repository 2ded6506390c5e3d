#include "benchmarks/synthetic_trace.h"

#include <cupti_activity.h>

#include <cstring>
#include <string>
#include <vector>

#include "collector/format/trace_file.h"
#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/api_catalog.h"
#include "tracer/recording/host_record.h"
#include "tracer/sending/correlation_table.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/record_translator.h"

namespace cumemtrace::bench {
namespace {

constexpr uint32_t kStreamId = 1;
constexpr uint32_t kPid = 4242;
constexpr uint32_t kMainThread = 4242;
constexpr uint32_t kDevice = 0;
constexpr uint32_t kCudaStream = 7;
constexpr uint32_t kSizeClasses = 7;
constexpr uint64_t kMiB = 1 << 20;
// Kernel names are C strings owned by CUPTI in real records: static storage here.
constexpr const char* kKernelNames[] = {
    "ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel",
    "reduce_kernel",          "multi_tensor_apply_kernel", "softmax_warp_forward",
};

constexpr uint32_t kKernelNameCount = sizeof(kKernelNames) / sizeof(*kKernelNames);

uint16_t ApiRow(const char* name) {
  uint16_t count = 0;
  const tracer::ApiInfo* apis = tracer::ApiCatalog(&count);
  for (uint16_t i = 0; i < count; ++i) {
    if (strcmp(apis[i].name, name) == 0) return i;
  }
  return 0;
}

// A CUPTI record waiting in its buffer until the sender's next drain.
struct PendingActivity {
  enum class Type : uint8_t { kAllocate, kRelease, kKernel } type;
  uint64_t start_ns;
  uint64_t end_ns;  // kernels
  uint64_t address;
  uint64_t bytes;
  uint32_t correlation_id;
  uint32_t name;  // index into kKernelNames
};

class SyntheticProgram {
 public:
  SyntheticProgram(const SyntheticTraceOptions& options,
                   const std::function<void(std::string_view)>& sink)
      : options_(options),
        sink_(sink),
        translator_(&encoder_, &correlations_, &error_namer_),
        free_addresses_(kSizeClasses),
        malloc_api_(ApiRow("cuMemAllocAsync")),
        free_api_(ApiRow("cuMemFreeAsync")),
        launch_api_(ApiRow("cuLaunchKernel")) {}

  SyntheticTraceStats Run() {
    WriteFilePreamble();
    WriteHandshake();
    v1::DeviceInfo* device = encoder_.AddEvent(now_ns_)->mutable_device();
    device->set_index(kDevice);
    device->set_name("NVIDIA H100 80GB HBM3");
    device->set_total_memory_bytes(80 * 1024 * kMiB);
    v1::ThreadName* thread = encoder_.AddEvent(now_ns_)->mutable_thread_name();
    thread->set_thread_id(kMainThread);
    thread->set_name("python3");

    // Weights, allocated once and kept: the persistent part of the live set.
    for (uint32_t layer = 0; layer < options_.layers; ++layer) Allocate(layer % kSizeClasses);
    while (stats_.events + encoder_.pending_events() < options_.events) {
      for (uint32_t i = 0; i < options_.iterations_per_drain; ++i) Iteration();
      Drain();
    }
    HostRecord exit;
    exit.type = HostRecord::Type::kProcessExit;
    exit.timestamp_ns = Tick(1000);
    host_.push_back(exit);
    Drain();
    Flush();
    WriteCollectorEnd();
    return stats_;
  }

 private:
  using HostRecord = tracer::HostRecord;

  uint64_t Tick(uint64_t ns) { return now_ns_ += ns; }

  void Nvtx(v1::NvtxOperation operation, const char* message) {
    HostRecord r;
    r.type = HostRecord::Type::kNvtx;
    r.nvtx_operation = static_cast<uint8_t>(operation);
    r.thread_id = kMainThread;
    r.timestamp_ns = Tick(500);
    if (message != nullptr) r.text = message;
    host_.push_back(std::move(r));
  }

  uint32_t ApiCall(uint16_t api) {
    HostRecord r;
    r.type = HostRecord::Type::kCorrelation;
    r.api = api;
    r.thread_id = kMainThread;
    r.timestamp_ns = Tick(2000);
    r.correlation_id = ++correlation_id_;
    host_.push_back(std::move(r));
    return correlation_id_;
  }

  // Stream-ordered allocations reuse freed blocks of the same size first, like the async
  // allocator's pool: most addresses are seen many times.
  std::pair<uint64_t, uint64_t> Allocate(uint32_t size_class) {
    const uint64_t bytes = (size_class + 1) * kMiB;
    std::vector<uint64_t>& free_list = free_addresses_[size_class];
    uint64_t address;
    if (free_list.empty()) {
      address = next_address_;
      next_address_ += bytes;
    } else {
      address = free_list.back();
      free_list.pop_back();
    }
    const uint32_t correlation = ApiCall(malloc_api_);
    activities_.push_back(PendingActivity{PendingActivity::Type::kAllocate, now_ns_ + 300, 0,
                                          address, bytes, correlation, 0});
    ++stats_.allocations;
    return {address, bytes};
  }

  void Release(std::pair<uint64_t, uint64_t> block) {
    const uint32_t correlation = ApiCall(free_api_);
    activities_.push_back(PendingActivity{PendingActivity::Type::kRelease, now_ns_ + 300, 0,
                                          block.first, block.second, correlation, 0});
    free_addresses_[static_cast<uint32_t>(block.second / kMiB) - 1].push_back(block.first);
  }

  void Launch(uint32_t name) {
    const uint32_t correlation = ApiCall(launch_api_);
    const uint64_t start = now_ns_ + 3000;
    activities_.push_back(PendingActivity{PendingActivity::Type::kKernel, start, start + 20000,
                                          0, 0, correlation, name % kKernelNameCount});
  }

  void Iteration() {
    const uint32_t layers = options_.layers;
    std::vector<std::pair<uint64_t, uint64_t>>& activations = activations_;
    std::vector<std::pair<uint64_t, uint64_t>>& gradients = gradients_;
    Nvtx(v1::NVTX_OPERATION_PUSH, "forward");
    for (uint32_t layer = 0; layer < layers; ++layer) {
      activations.push_back(Allocate(layer % kSizeClasses));
      Launch(layer);
    }
    Nvtx(v1::NVTX_OPERATION_POP, nullptr);
    Nvtx(v1::NVTX_OPERATION_PUSH, "backward");
    for (uint32_t layer = layers; layer-- > 0;) {
      gradients.push_back(Allocate(layer % kSizeClasses));
      Launch(layer + 1);
      Launch(layer + 2);
      Release(activations.back());
      activations.pop_back();
    }
    Nvtx(v1::NVTX_OPERATION_POP, nullptr);
    Nvtx(v1::NVTX_OPERATION_PUSH, "optimizer");
    for (uint32_t layer = 0; layer < layers; ++layer) {
      Launch(4);
      Release(gradients.back());
      gradients.pop_back();
    }
    Nvtx(v1::NVTX_OPERATION_POP, nullptr);
    ++stats_.iterations;
  }

  // What the tracer's sender does on each wake-up: host records first, then the CUPTI
  // buffers, flushing a batch whenever it is full.
  void Drain() {
    for (const HostRecord& r : host_) {
      translator_.AddHostRecord(r);
      FlushIfFull();
    }
    host_.clear();
    for (const PendingActivity& a : activities_) {
      if (a.type == PendingActivity::Type::kKernel) {
        CUpti_ActivityKernel10 kernel;
        memset(&kernel, 0, sizeof(kernel));
        kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        kernel.start = a.start_ns;
        kernel.end = a.end_ns;
        kernel.deviceId = kDevice;
        kernel.contextId = 1;
        kernel.streamId = kCudaStream;
        kernel.correlationId = a.correlation_id;
        kernel.gridX = 1024;
        kernel.gridY = kernel.gridZ = 1;
        kernel.blockX = 256;
        kernel.blockY = kernel.blockZ = 1;
        kernel.name = kKernelNames[a.name];
        translator_.AddActivity(reinterpret_cast<const CUpti_Activity*>(&kernel));
      } else {
        CUpti_ActivityMemory4 memory;
        memset(&memory, 0, sizeof(memory));
        memory.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
        memory.memoryOperationType = a.type == PendingActivity::Type::kAllocate
                                         ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                         : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
        memory.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        memory.address = a.address;
        memory.bytes = a.bytes;
        memory.timestamp = a.start_ns;
        memory.deviceId = kDevice;
        memory.contextId = 1;
        memory.streamId = kCudaStream;
        memory.correlationId = a.correlation_id;
        memory.isAsync = 1;
        memory.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
        memory.memoryPoolConfig.address = 0x1000;
        translator_.AddActivity(reinterpret_cast<const CUpti_Activity*>(&memory));
      }
      FlushIfFull();
    }
    activities_.clear();
  }

  void FlushIfFull() {
    if (encoder_.batch_full()) Flush();
  }

  void Flush() {
    framed_.clear();
    stats_.events += encoder_.FlushBatch(&framed_);
    if (framed_.empty()) return;
    // FlushBatch frames for the socket (varint length + message); the trace file stores the
    // message itself, as the collector does after reading the frame.
    size_t header = 1;
    while (static_cast<unsigned char>(framed_[header - 1]) & 0x80) ++header;
    WriteChunk(std::string_view(framed_).substr(header));
  }

  void WriteChunk(std::string_view wire_frame) {
    chunk_.clear();
    AppendWireFrameChunk(kStreamId, wire_frame, &chunk_);
    Emit(chunk_);
  }

  void Emit(std::string_view bytes) {
    stats_.bytes += bytes.size();
    sink_(bytes);
  }

  void WriteFilePreamble() {
    std::string out(TraceFilePreamble());
    v1::TraceChunk header;
    header.mutable_file_header()->set_writer_version("make_big_trace");
    header.mutable_file_header()->set_hostname("synthetic");
    AppendChunk(header, &out);
    v1::TraceChunk opened;
    opened.set_stream_id(kStreamId);
    opened.mutable_collector()->mutable_opened()->set_peer_pid(kPid);
    AppendChunk(opened, &out);
    Emit(out);
  }

  void WriteHandshake() {
    v1::StreamMessage message;
    v1::Handshake* h = message.mutable_handshake();
    h->set_magic(v1::HANDSHAKE_MAGIC);
    h->set_protocol_version(v1::PROTOCOL_VERSION);
    h->set_pid(kPid);
    h->set_ppid(1);
    h->add_command_line("python3");
    h->add_command_line("train.py");
    h->set_hostname("synthetic");
    h->set_timestamp_clock(v1::TIMESTAMP_CLOCK_MONOTONIC);
    h->set_tracer_version("synthetic");
    h->set_allocator_mode("async");
    h->set_injection_mode(v1::INJECTION_MODE_LD_PRELOAD);
    h->set_kernels_enabled(true);
    h->set_trace_start_ns(now_ns_);
    WriteChunk(message.SerializeAsString());
  }

  void WriteCollectorEnd() {
    std::string out;
    v1::TraceChunk exit;
    exit.set_stream_id(kStreamId);
    exit.mutable_collector()->mutable_launcher_exit()->set_exit_code(0);
    AppendChunk(exit, &out);
    v1::TraceChunk closed;
    closed.set_stream_id(kStreamId);
    closed.mutable_collector()->mutable_closed()->set_reason(v1::CLOSE_REASON_EOF);
    AppendChunk(closed, &out);
    AppendFileEnd(stats_.bytes + out.size(), &out);
    Emit(out);
  }

  const SyntheticTraceOptions options_;
  const std::function<void(std::string_view)>& sink_;
  tracer::EventEncoder encoder_;
  tracer::CorrelationTable correlations_;
  tracer::ErrorNamer error_namer_;
  tracer::RecordTranslator translator_;
  std::vector<HostRecord> host_;
  std::vector<PendingActivity> activities_;
  std::vector<std::vector<uint64_t>> free_addresses_;  // by size class
  std::vector<std::pair<uint64_t, uint64_t>> activations_, gradients_;
  uint64_t next_address_ = 0x7f0000000000;
  uint64_t now_ns_ = 1'000'000'000;
  uint32_t correlation_id_ = 0;
  const uint16_t malloc_api_, free_api_, launch_api_;
  std::string framed_, chunk_;
  SyntheticTraceStats stats_;
};

}  // namespace

SyntheticTraceStats WriteSyntheticTrace(const SyntheticTraceOptions& options,
                                        const std::function<void(std::string_view)>& sink) {
  return SyntheticProgram(options, sink).Run();
}

}  // namespace cumemtrace::bench
