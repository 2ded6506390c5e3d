// Test helper: builds the chunks of synthetic traces from proto messages, as the collector
// would write them (handshake frame, batch frames, collector records).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::testing {

constexpr uint32_t kDevice = v1::MEMORY_KIND_DEVICE;

class StreamBuilder {
 public:
  StreamBuilder(uint32_t stream_id, uint32_t pid);

  v1::Handshake& handshake() { return handshake_; }

  // Events go into the current batch until Flush().
  StreamBuilder& String(uint32_t id, const std::string& value, uint64_t ts = 0);
  StreamBuilder& Device(uint32_t index, const std::string& name, uint64_t total_bytes);
  StreamBuilder& Alloc(uint64_t ts, uint32_t device, uint64_t address, uint64_t bytes,
                       uint32_t kind = kDevice, uint32_t thread = 0, uint32_t api_id = 0,
                       uint32_t caller_id = 0);
  StreamBuilder& Free(uint64_t ts, uint32_t device, uint64_t address, uint64_t bytes,
                      uint32_t kind = kDevice, uint32_t thread = 0);
  StreamBuilder& Push(uint64_t ts, uint32_t thread, uint32_t message_id, uint32_t domain_id = 0);
  StreamBuilder& Pop(uint64_t ts, uint32_t thread, uint32_t domain_id = 0);
  StreamBuilder& Start(uint64_t ts, uint32_t thread, uint32_t message_id, uint64_t range_id);
  StreamBuilder& End(uint64_t ts, uint32_t thread, uint64_t range_id);
  StreamBuilder& Mark(uint64_t ts, uint32_t thread, uint32_t message_id);
  StreamBuilder& Kernel(uint64_t start, uint64_t end, uint32_t device, uint32_t thread,
                        uint32_t name_id = 0);
  StreamBuilder& Failed(uint64_t ts, uint32_t device, uint32_t thread, uint64_t requested,
                        int32_t code, uint32_t api_id, uint32_t error_id, uint64_t free_bytes,
                        uint64_t total_bytes);
  StreamBuilder& Dropped(v1::DropSource source, uint64_t count, uint64_t first, uint64_t last);
  StreamBuilder& Exit(uint64_t ts, int32_t code);
  StreamBuilder& Notice(const std::string& code, const std::string& text);
  StreamBuilder& TracerMemory(uint32_t device, uint64_t bytes);
  // A PyTorch allocator event with the counters as the allocator would show them.
  StreamBuilder& Torch(uint64_t ts, v1::TorchAllocatorAction action, uint64_t sequence,
                       uint64_t address, uint64_t requested, uint64_t total, uint64_t current,
                       uint32_t thread);
  StreamBuilder& Raw(const v1::Event& event);

  // Ends the current batch (sequence numbers count up from 0).
  StreamBuilder& Flush();
  // The next batch's sequence jumps by `missing`.
  StreamBuilder& SkipBatches(uint64_t missing);
  // A wire frame that does not parse.
  StreamBuilder& GarbageFrame();

  StreamBuilder& LauncherExit(int32_t code, int32_t signal);
  StreamBuilder& Closed(v1::CloseReason reason, const std::string& error = "");

  // Flushes and returns every chunk of the stream in order.
  std::vector<v1::TraceChunk> Chunks();

 private:
  v1::Event* Add(uint64_t ts);
  void AddHandshakeChunk();

  uint32_t stream_id_;
  v1::Handshake handshake_;
  bool handshake_sent_ = false;
  v1::EventBatch batch_;
  uint64_t sequence_ = 0;
  std::vector<v1::TraceChunk> chunks_;
};

std::vector<v1::TraceChunk> Concat(const std::vector<std::vector<v1::TraceChunk>>& parts);
std::unique_ptr<Report> Analyze(const std::vector<v1::TraceChunk>& chunks,
                                const AnalysisOptions& options = AnalysisOptions());
// The Report of a trace file, null with *error when it cannot be read.
std::unique_ptr<Report> AnalyzeFile(const std::string& path, const AnalysisOptions& options,
                                    std::string* error);
// Preamble, file header, then the chunks: the bytes of a trace file.
std::string FileBytes(const std::vector<v1::TraceChunk>& chunks);
// Writes bytes to a fresh file under the test temp dir and returns its path.
std::string WriteTempFile(const std::string& name, const std::string& bytes);

const DeviceReport* FindDevice(const ProcessReport& process, uint32_t index);
const PhaseReport* FindPhase(const ProcessReport& process, const std::string& name);
const PhaseDeviceStats& PhaseDevice(const PhaseReport& phase, uint32_t index);

}  // namespace cumemtrace::testing
