#include "collector/engine/tests/trace_builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "collector/engine/trace_analysis.h"
#include "collector/format/trace_file.h"
#include "collector/output/summary.h"

namespace cumemtrace::testing {

StreamBuilder::StreamBuilder(uint32_t stream_id, uint32_t pid) : stream_id_(stream_id) {
  handshake_.set_magic(v1::HANDSHAKE_MAGIC);
  handshake_.set_protocol_version(v1::PROTOCOL_VERSION);
  handshake_.set_pid(pid);
  handshake_.set_ppid(1);
  handshake_.add_command_line("python");
  handshake_.add_command_line("train.py");
  handshake_.set_hostname("node1");
  handshake_.set_timestamp_clock(v1::TIMESTAMP_CLOCK_MONOTONIC);
  handshake_.set_allocator_mode("async");
  handshake_.set_pytorch_alloc_conf("backend:cudaMallocAsync");
  handshake_.set_injection_mode(v1::INJECTION_MODE_LD_PRELOAD);
  handshake_.set_kernels_enabled(true);
}

void StreamBuilder::AddHandshakeChunk() {
  if (handshake_sent_) return;
  handshake_sent_ = true;
  v1::StreamMessage message;
  *message.mutable_handshake() = handshake_;
  v1::TraceChunk chunk;
  chunk.set_stream_id(stream_id_);
  chunk.set_wire_frame(message.SerializeAsString());
  chunks_.push_back(chunk);
}

v1::Event* StreamBuilder::Add(uint64_t ts) {
  v1::Event* e = batch_.add_events();
  e->set_timestamp_ns(ts);
  return e;
}

StreamBuilder& StreamBuilder::String(uint32_t id, const std::string& value, uint64_t ts) {
  auto* s = Add(ts)->mutable_interned_string();
  s->set_id(id);
  s->set_value(value);
  return *this;
}

StreamBuilder& StreamBuilder::Device(uint32_t index, const std::string& name, uint64_t total) {
  auto* d = Add(0)->mutable_device();
  d->set_index(index);
  d->set_name(name);
  d->set_uuid("0123456789abcdef0123456789abcdef");
  d->set_total_memory_bytes(total);
  return *this;
}

StreamBuilder& StreamBuilder::Alloc(uint64_t ts, uint32_t device, uint64_t address,
                                    uint64_t bytes, uint32_t kind, uint32_t thread,
                                    uint32_t api_id, uint32_t caller_id) {
  auto* m = Add(ts)->mutable_memory();
  m->set_operation(v1::MEMORY_OPERATION_ALLOCATE);
  m->set_device(device);
  m->set_address(address);
  m->set_bytes(bytes);
  m->set_kind(static_cast<v1::MemoryKind>(kind));
  m->set_thread_id(thread);
  m->set_api_name_id(api_id);
  m->set_caller_module_id(caller_id);
  return *this;
}

StreamBuilder& StreamBuilder::Free(uint64_t ts, uint32_t device, uint64_t address,
                                   uint64_t bytes, uint32_t kind, uint32_t thread) {
  auto* m = Add(ts)->mutable_memory();
  m->set_operation(v1::MEMORY_OPERATION_RELEASE);
  m->set_device(device);
  m->set_address(address);
  m->set_bytes(bytes);
  m->set_kind(static_cast<v1::MemoryKind>(kind));
  m->set_thread_id(thread);
  return *this;
}

StreamBuilder& StreamBuilder::Push(uint64_t ts, uint32_t thread, uint32_t message_id,
                                   uint32_t domain_id) {
  auto* n = Add(ts)->mutable_nvtx();
  n->set_operation(v1::NVTX_OPERATION_PUSH);
  n->set_thread_id(thread);
  n->set_message_id(message_id);
  n->set_domain_id(domain_id);
  return *this;
}

StreamBuilder& StreamBuilder::Pop(uint64_t ts, uint32_t thread, uint32_t domain_id) {
  auto* n = Add(ts)->mutable_nvtx();
  n->set_operation(v1::NVTX_OPERATION_POP);
  n->set_thread_id(thread);
  n->set_domain_id(domain_id);
  return *this;
}

StreamBuilder& StreamBuilder::Start(uint64_t ts, uint32_t thread, uint32_t message_id,
                                    uint64_t range_id) {
  auto* n = Add(ts)->mutable_nvtx();
  n->set_operation(v1::NVTX_OPERATION_START);
  n->set_thread_id(thread);
  n->set_message_id(message_id);
  n->set_range_id(range_id);
  return *this;
}

StreamBuilder& StreamBuilder::End(uint64_t ts, uint32_t thread, uint64_t range_id) {
  auto* n = Add(ts)->mutable_nvtx();
  n->set_operation(v1::NVTX_OPERATION_END);
  n->set_thread_id(thread);
  n->set_range_id(range_id);
  return *this;
}

StreamBuilder& StreamBuilder::Mark(uint64_t ts, uint32_t thread, uint32_t message_id) {
  auto* n = Add(ts)->mutable_nvtx();
  n->set_operation(v1::NVTX_OPERATION_MARK);
  n->set_thread_id(thread);
  n->set_message_id(message_id);
  return *this;
}

StreamBuilder& StreamBuilder::Kernel(uint64_t start, uint64_t end, uint32_t device,
                                     uint32_t thread, uint32_t name_id) {
  auto* k = Add(start)->mutable_kernel();
  k->set_end_ns(end);
  k->set_device(device);
  k->set_thread_id(thread);
  k->set_name_id(name_id);
  return *this;
}

StreamBuilder& StreamBuilder::Failed(uint64_t ts, uint32_t device, uint32_t thread,
                                     uint64_t requested, int32_t code, uint32_t api_id,
                                     uint32_t error_id, uint64_t free_bytes, uint64_t total) {
  auto* f = Add(ts)->mutable_failed_allocation();
  f->set_device(device);
  f->set_thread_id(thread);
  f->set_requested_bytes(requested);
  f->set_error_code(code);
  f->set_api_name_id(api_id);
  f->set_error_name_id(error_id);
  f->set_device_free_bytes(free_bytes);
  f->set_device_total_bytes(total);
  f->set_kind(v1::MEMORY_KIND_DEVICE);
  return *this;
}

StreamBuilder& StreamBuilder::Dropped(v1::DropSource source, uint64_t count, uint64_t first,
                                      uint64_t last) {
  auto* d = Add(0)->mutable_dropped();
  d->set_source(source);
  d->set_count(count);
  d->set_first_ns(first);
  d->set_last_ns(last);
  return *this;
}

StreamBuilder& StreamBuilder::Exit(uint64_t ts, int32_t code) {
  Add(ts)->mutable_process_exit()->set_exit_code(code);
  return *this;
}

StreamBuilder& StreamBuilder::Notice(const std::string& code, const std::string& text) {
  auto* n = Add(0)->mutable_notice();
  n->set_level(v1::NOTICE_LEVEL_WARNING);
  n->set_code(code);
  n->set_text(text);
  return *this;
}

StreamBuilder& StreamBuilder::TracerMemory(uint32_t device, uint64_t bytes) {
  auto* t = Add(0)->mutable_tracer_memory();
  t->set_device(device);
  t->set_bytes(bytes);
  t->set_description("3 CUPTI buffers");
  return *this;
}

StreamBuilder& StreamBuilder::Torch(uint64_t ts, v1::TorchAllocatorAction action,
                                    uint64_t sequence, uint64_t address, uint64_t requested,
                                    uint64_t total, uint64_t current, uint32_t thread) {
  v1::Event e;
  e.set_timestamp_ns(ts);
  v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
  t->set_action(action);
  t->set_sequence(sequence);
  t->set_address(address);
  t->set_requested_bytes(requested);
  t->set_allocated_bytes_total(total);
  t->set_allocated_bytes_current(current);
  t->set_thread_id(thread);
  return Raw(e);
}

StreamBuilder& StreamBuilder::Raw(const v1::Event& event) {
  *batch_.add_events() = event;
  return *this;
}

StreamBuilder& StreamBuilder::Flush() {
  AddHandshakeChunk();
  if (batch_.events_size() == 0) return *this;
  batch_.set_sequence(sequence_++);
  v1::StreamMessage message;
  *message.mutable_batch() = batch_;
  batch_.Clear();
  v1::TraceChunk chunk;
  chunk.set_stream_id(stream_id_);
  chunk.set_wire_frame(message.SerializeAsString());
  chunks_.push_back(chunk);
  return *this;
}

StreamBuilder& StreamBuilder::SkipBatches(uint64_t missing) {
  Flush();
  sequence_ += missing;
  return *this;
}

StreamBuilder& StreamBuilder::GarbageFrame() {
  Flush();
  v1::TraceChunk chunk;
  chunk.set_stream_id(stream_id_);
  chunk.set_wire_frame(std::string("\x12\xff\xff\xff\x0f garbage", 14));
  chunks_.push_back(chunk);
  return *this;
}

StreamBuilder& StreamBuilder::LauncherExit(int32_t code, int32_t signal) {
  Flush();
  v1::TraceChunk chunk;
  chunk.set_stream_id(stream_id_);
  auto* e = chunk.mutable_collector()->mutable_launcher_exit();
  e->set_pid(handshake_.pid());
  e->set_exit_code(code);
  e->set_signal(signal);
  chunks_.push_back(chunk);
  return *this;
}

StreamBuilder& StreamBuilder::Closed(v1::CloseReason reason, const std::string& error) {
  Flush();
  v1::TraceChunk chunk;
  chunk.set_stream_id(stream_id_);
  auto* c = chunk.mutable_collector()->mutable_closed();
  c->set_reason(reason);
  c->set_error(error);
  chunks_.push_back(chunk);
  return *this;
}

std::vector<v1::TraceChunk> StreamBuilder::Chunks() {
  Flush();
  return chunks_;
}

std::vector<v1::TraceChunk> Concat(const std::vector<std::vector<v1::TraceChunk>>& parts) {
  std::vector<v1::TraceChunk> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::unique_ptr<Report> Analyze(const std::vector<v1::TraceChunk>& chunks,
                                const AnalysisOptions& options) {
  const std::string bytes = FileBytes(chunks);
  AnalysisOptions sorted = options;
  sorted.sorted = true;
  auto report = std::move(cumemtrace::Analyze({"", bytes}, sorted, nullptr)->report);
  // Every test that analyzes through here also checks that the other orders and retention
  // policies (trace_analysis.h) write the same summary: the reorder window that `report`
  // runs, and keeping every allocation, as the exports do.
  using internal::Retention;
  for (const internal::Mode mode : {internal::Mode{false, Retention::kLiveAndPeak},
                                    internal::Mode{false, Retention::kKeepAll},
                                    internal::Mode{true, Retention::kKeepAll}}) {
    auto other = internal::AnalyzeBytes(bytes, options, mode, internal::StreamingOptions(),
                                        nullptr, nullptr);
    EXPECT_EQ(SummaryJson(*other->report), SummaryJson(*report))
        << "sorted " << mode.sorted << ", keep all "
        << (mode.retention == Retention::kKeepAll) << " differs";
  }
  return report;
}

std::unique_ptr<Report> AnalyzeFile(const std::string& path, const AnalysisOptions& options,
                                    std::string* error) {
  auto trace = cumemtrace::Analyze({path, {}}, options, error);
  return trace == nullptr ? nullptr : std::move(trace->report);
}

std::string FileBytes(const std::vector<v1::TraceChunk>& chunks) {
  std::string out(TraceFilePreamble());
  v1::TraceChunk header;
  header.mutable_file_header()->set_writer_version("test");
  header.mutable_file_header()->set_hostname("node1");
  AppendChunk(header, &out);
  for (const v1::TraceChunk& chunk : chunks) AppendChunk(chunk, &out);
  AppendFileEnd(out.size(), &out);
  return out;
}

std::string WriteTempFile(const std::string& name, const std::string& bytes) {
  // TempDir() is shared by every test process on the machine: the pid keeps them apart.
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "." + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(),
                                                                static_cast<std::streamsize>(bytes.size()));
  return path;
}

const DeviceReport* FindDevice(const ProcessReport& process, uint32_t index) {
  for (const DeviceReport& d : process.devices) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

const PhaseReport* FindPhase(const ProcessReport& process, const std::string& name) {
  for (const PhaseReport& p : process.phases) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const PhaseDeviceStats& PhaseDevice(const PhaseReport& phase, uint32_t index) {
  for (const PhaseDeviceStats& d : phase.devices) {
    if (d.index == index) return d;
  }
  static const PhaseDeviceStats kNone{};
  ADD_FAILURE() << "phase " << phase.name << " has no device " << index;
  return kNone;
}

}  // namespace cumemtrace::testing
