// The live view's tally and text: memory now and peak per device, by allocating phase, the
// iterations and the last one's rise, from the messages as the collector receives them.
#include "collector/cli/live_view.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "collector/engine/engine.h"
#include "collector/format/trace_file.h"

namespace cumemtrace {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// A stream's messages, built one event at a time; Take() returns the batch so far.
class Messages {
 public:
  Messages& String(uint32_t id, const std::string& value) {
    v1::InternedString* s = batch_.add_events()->mutable_interned_string();
    s->set_id(id);
    s->set_value(value);
    return *this;
  }
  Messages& Nvtx(v1::NvtxOperation op, uint32_t thread, uint32_t message = 0, uint64_t range_id = 0,
                 uint32_t domain = 0) {
    v1::Nvtx* n = batch_.add_events()->mutable_nvtx();
    n->set_operation(op);
    n->set_thread_id(thread);
    n->set_message_id(message);
    n->set_range_id(range_id);
    n->set_domain_id(domain);
    return *this;
  }
  Messages& Push(uint32_t thread, uint32_t message) {
    return Nvtx(v1::NVTX_OPERATION_PUSH, thread, message);
  }
  Messages& Pop(uint32_t thread) { return Nvtx(v1::NVTX_OPERATION_POP, thread); }
  Messages& Memory(v1::MemoryOperation op, uint32_t thread, uint64_t address, uint64_t bytes,
                   uint32_t device = 0, v1::MemoryKind kind = v1::MEMORY_KIND_DEVICE) {
    v1::Event* event = batch_.add_events();
    event->set_timestamp_ns(time_ns_);
    v1::MemoryOp* m = event->mutable_memory();
    m->set_operation(op);
    m->set_thread_id(thread);
    m->set_address(address);
    m->set_bytes(bytes);
    m->set_device(device);
    m->set_kind(kind);
    return *this;
  }
  // The time of the events added from now on (0 until set).
  Messages& At(uint64_t ns) {
    time_ns_ = ns;
    return *this;
  }
  Messages& Alloc(uint32_t thread, uint64_t address, uint64_t bytes, uint32_t device = 0) {
    return Memory(v1::MEMORY_OPERATION_ALLOCATE, thread, address, bytes, device);
  }
  Messages& Free(uint32_t thread, uint64_t address, uint64_t bytes) {
    return Memory(v1::MEMORY_OPERATION_RELEASE, thread, address, bytes);
  }
  v1::StreamMessage Take() {
    v1::StreamMessage m;
    *m.mutable_batch() = batch_;
    batch_.Clear();
    return m;
  }

 private:
  v1::EventBatch batch_;
  uint64_t time_ns_ = 0;
};

v1::StreamMessage Handshake(uint32_t pid) {
  v1::StreamMessage m;
  m.mutable_handshake()->set_pid(pid);
  m.mutable_handshake()->add_command_line("python3");
  m.mutable_handshake()->add_command_line("train.py");
  return m;
}

LiveTally NewTally() {
  return LiveTally(std::make_shared<const PhaseRules>(PhaseRules::Defaults()));
}

// One training step on thread 7 (backward's work on thread 8, PyTorch's autograd thread):
// forward keeps 10 MiB for backward, backward frees it and leaves a 4 MiB gradient that the
// optimizer frees; the weights (100 MiB, before any phase) stay.
void Step(LiveTally& tally, Messages& m, uint64_t base) {
  m.Push(7, 1).Alloc(7, base + 1, 10 * kMiB).Push(7, 4).Alloc(7, base + 2, kMiB);
  m.Free(7, base + 2, kMiB).Pop(7).Pop(7);
  m.Push(7, 2).Alloc(8, base + 3, 4 * kMiB).Free(8, base + 1, 10 * kMiB).Pop(7);
  m.Push(7, 3).Free(7, base + 3, 4 * kMiB).Pop(7);
  tally.Add(1, m.Take());
}

TEST(LiveTally, NowPeakByPhaseIterationsAndTheLastRise) {
  LiveTally tally = NewTally();
  tally.Add(1, Handshake(4242));
  Messages m;
  m.String(1, "forward").String(2, "backward").String(3, "optimizer").String(4, "aten::mm");
  m.Alloc(7, 0x1000, 100 * kMiB);
  tally.Add(1, m.Take());
  Step(tally, m, 0x10000);
  std::vector<LiveTally::Process> p = tally.Snapshot();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].pid, 4242u);
  EXPECT_EQ(p[0].program, "python3 train.py");
  EXPECT_EQ(p[0].iterations, 0u);  // forward opened once: not yet a repetition
  EXPECT_EQ(p[0].iteration_range, "forward");
  ASSERT_EQ(p[0].devices.size(), 1u);
  EXPECT_EQ(p[0].devices[0].now_bytes, 100 * kMiB);
  EXPECT_EQ(p[0].devices[0].peak_bytes, 114 * kMiB);  // weights + activation + gradient
  EXPECT_FALSE(p[0].devices[0].has_last_rise);        // no whole iteration yet

  // A second step, then one more forward with memory still held: the iteration is counted
  // at its start, the rise is the second step's (peak 114 MiB above the 100 MiB entry), and
  // the held 10 MiB belongs to forward, the memory of aten::mm to its enclosing forward too.
  Step(tally, m, 0x20000);
  m.Push(7, 1).Alloc(7, 0x30001, 10 * kMiB).Push(7, 4).Alloc(7, 0x30002, 2 * kMiB).Pop(7);
  tally.Add(1, m.Take());
  p = tally.Snapshot();
  EXPECT_EQ(p[0].iterations, 3u);
  const LiveTally::Device& d = p[0].devices[0];
  EXPECT_EQ(d.now_bytes, 112 * kMiB);
  EXPECT_EQ(d.peak_bytes, 114 * kMiB);
  ASSERT_TRUE(d.has_last_rise);
  EXPECT_EQ(d.last_iteration_rise_bytes, 14 * kMiB);
  ASSERT_EQ(d.by_phase.size(), 2u);
  EXPECT_EQ(d.by_phase[0].phase, "");  // the weights, allocated outside every phase
  EXPECT_EQ(d.by_phase[0].bytes, 100 * kMiB);
  EXPECT_EQ(d.by_phase[1].phase, "forward");
  EXPECT_EQ(d.by_phase[1].bytes, 12 * kMiB);

  const std::vector<std::string> text = LiveText(p, 12.4, 200, 10);
  ASSERT_EQ(text.size(), 4u);
  EXPECT_EQ(text[0], "cumemtrace --live  +12 s  (memory now, peak so far)");
  EXPECT_EQ(text[1], "pid 4242  python3 train.py");
  EXPECT_EQ(text[2],
            "  GPU 0  now 112 MiB  peak 114 MiB  iteration 3 (forward), last iteration +14.0 MiB");
  EXPECT_EQ(text[3], "    by phase: (no phase) 100 MiB, forward 12.0 MiB");
}

TEST(LiveTally, AttributionAcrossThreadsStartEndRangesDomainsAndReleases) {
  LiveTally tally = NewTally();
  tally.Add(1, Handshake(1));
  Messages m;
  m.String(1, "load").String(2, "mydomain").String(3, "epoch");
  // A start/end range opened on thread 5; thread 6 has none open: the most recent range.
  m.Nvtx(v1::NVTX_OPERATION_START, 5, 3, 99).Alloc(6, 0x1, 3 * kMiB);
  // A range in the program's own domain keeps "domain: message".
  m.Nvtx(v1::NVTX_OPERATION_PUSH, 5, 1, 0, 2).Alloc(5, 0x2, kMiB);
  m.Nvtx(v1::NVTX_OPERATION_POP, 5, 0, 0, 2).Nvtx(v1::NVTX_OPERATION_END, 5, 0, 99);
  // Pinned host memory is not device memory; a release of an unknown address changes nothing.
  m.Memory(v1::MEMORY_OPERATION_ALLOCATE, 5, 0x3, 50 * kMiB, 0, v1::MEMORY_KIND_PINNED);
  m.Free(5, 0x999, 7 * kMiB).Alloc(5, 0x4, kMiB, 1);
  tally.Add(1, m.Take());
  std::vector<LiveTally::Process> p = tally.Snapshot();
  ASSERT_EQ(p[0].devices.size(), 2u);
  const LiveTally::Device& d = p[0].devices[0];
  EXPECT_EQ(d.now_bytes, 4 * kMiB);
  ASSERT_EQ(d.by_phase.size(), 2u);
  EXPECT_EQ(d.by_phase[0].phase, "epoch");
  EXPECT_EQ(d.by_phase[1].phase, "mydomain: load");
  EXPECT_EQ(p[0].devices[1].index, 1u);
  EXPECT_EQ(p[0].devices[1].by_phase[0].phase, "");  // every range closed
  tally.StreamEnded(1);
  EXPECT_TRUE(tally.Snapshot()[0].ended);
}

// With the PyTorch bridge, the allocator's own counter: driver memory is its segments.
TEST(LiveTally, PyTorchTensorsFromTheAllocatorsCounter) {
  LiveTally tally = NewTally();
  tally.Add(1, Handshake(5));
  Messages m;
  m.Alloc(7, 0x1000, 20 * kMiB);  // a segment
  v1::StreamMessage message = m.Take();
  auto torch = [&message](v1::TorchAllocatorAction action, uint64_t current, uint64_t bytes) {
    v1::TorchAllocatorEvent* t = message.mutable_batch()->add_events()->mutable_torch_allocator();
    t->set_action(action);
    t->set_allocated_bytes_current(current);
    t->set_requested_bytes(bytes);
  };
  torch(v1::TORCH_ALLOCATOR_ACTION_ALLOC, 0, 3 * kMiB);
  torch(v1::TORCH_ALLOCATOR_ACTION_ALLOC, 3 * kMiB, 5 * kMiB);
  torch(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, 5 * kMiB, 3 * kMiB);
  tally.Add(1, message);
  const LiveTally::Device d = tally.Snapshot()[0].devices[0];
  EXPECT_EQ(d.now_bytes, 20 * kMiB);
  ASSERT_TRUE(d.has_tensors);
  EXPECT_EQ(d.tensors_now_bytes, 5 * kMiB);
  EXPECT_EQ(d.tensors_peak_bytes, 8 * kMiB);
  EXPECT_EQ(LiveText(tally.Snapshot(), 1, 200, 10)[2],
            "  GPU 0  now 20.0 MiB  peak 20.0 MiB  PyTorch tensors 5.00 MiB (peak 8.00 MiB)");
}

// The tensors the program's objects name, by category: now and each category's own peak, a
// tag of an address not live ignored, the higher-priority tag kept, the bridge's blocks named
// as well as device allocations.
TEST(LiveTally, CategoriesNamedByTheProgramsObjects) {
  LiveTally tally = NewTally();
  tally.Add(1, Handshake(5));
  Messages m;
  m.At(1).Alloc(7, 0x1000, 10 * kMiB).Alloc(7, 0x2000, 4 * kMiB);
  v1::StreamMessage message = m.Take();
  auto add = [&message]() {
    v1::Event* e = message.mutable_batch()->add_events();
    e->set_timestamp_ns(2);
    return e;
  };
  auto name = [&add](uint64_t address, v1::Category category) {
    v1::TensorCategory* t = add()->mutable_tensor_category();
    t->set_address(address);
    t->set_category(category);
  };
  auto torch = [&add](v1::TorchAllocatorAction action, uint64_t address, uint64_t bytes) {
    v1::TorchAllocatorEvent* t = add()->mutable_torch_allocator();
    t->set_action(action);
    t->set_address(address);
    t->set_requested_bytes(bytes);
  };
  name(0x1000, v1::CATEGORY_PARAMETER);
  name(0x2000, v1::CATEGORY_ACTIVATION);
  name(0x9000, v1::CATEGORY_ACTIVATION);  // nothing live there: ignored
  name(0x1000, v1::CATEGORY_GRADIENT);    // lower than parameter: still a parameter
  torch(v1::TORCH_ALLOCATOR_ACTION_ALLOC, 0x5000, 3 * kMiB);
  name(0x5000, v1::CATEGORY_OPTIMIZER_STATE);
  tally.Add(1, message);
  Messages later;
  later.At(3).Free(7, 0x2000, 4 * kMiB);
  message = later.Take();
  torch(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, 0x5000, 3 * kMiB);
  tally.Add(1, message);
  const LiveTally::Device d = tally.Snapshot()[0].devices[0];
  ASSERT_EQ(d.by_category.size(), 3u);
  EXPECT_EQ(d.by_category[0].category, "parameter");
  EXPECT_EQ(d.by_category[0].now_bytes, 10 * kMiB);
  EXPECT_EQ(d.by_category[0].peak_bytes, 10 * kMiB);
  EXPECT_EQ(d.by_category[1].category, "optimizer_state");
  EXPECT_EQ(d.by_category[1].now_bytes, 0u);
  EXPECT_EQ(d.by_category[1].peak_bytes, 3 * kMiB);
  EXPECT_EQ(d.by_category[2].category, "activation");
  EXPECT_EQ(d.by_category[2].now_bytes, 0u);
  EXPECT_EQ(d.by_category[2].peak_bytes, 4 * kMiB);
  const std::vector<std::string> text = LiveText(tally.Snapshot(), 1, 200, 10);
  ASSERT_EQ(text.size(), 5u);
  EXPECT_EQ(text[4],
            "    by category: parameter 10.0 MiB (peak 10.0 MiB), optimizer_state 0 B (peak 3.00 "
            "MiB), activation 0 B (peak 4.00 MiB)");
  // `top` gets them from the daemon's snapshot.
  std::vector<LiveTally::Process> back;
  double elapsed = 0;
  std::string error;
  ASSERT_TRUE(ParseLiveJson(LiveJson(tally.Snapshot(), 1), &back, &elapsed, &error)) << error;
  EXPECT_EQ(LiveText(back, 1, 200, 10), text);
}

// Replayed message by message, the golden traces (recorded on an H100) give the live view
// the report's own figures: each device's peak, the memory still in use at the end, and the
// iterations found.
TEST(LiveTally, GoldenTracesAgreeWithTheReport) {
  for (const char* name : {"torch_async", "libtorch_native", "cuda_phases", "torch_native"}) {
    const std::string path = std::string(CUMEMTRACE_GOLDEN_DIR) + "/" + name + ".cmtrace";
    LiveTally tally = NewTally();
    TraceFileReader reader;
    ASSERT_TRUE(reader.Open(path)) << reader.error();
    v1::TraceChunk chunk;
    for (;;) {
      bool is_wire = false;
      uint32_t stream = 0;
      std::string_view frame;
      if (reader.NextView(&chunk, &is_wire, &stream, &frame) != TraceFileReader::Result::kChunk) {
        break;
      }
      v1::StreamMessage message;
      if (is_wire && message.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
        tally.Add(stream, message);
      }
    }
    std::string error;
    const std::unique_ptr<AnalyzedTrace> trace = Analyze({path, {}}, AnalysisOptions(), &error);
    ASSERT_NE(trace, nullptr) << error;
    const std::vector<LiveTally::Process> live = tally.Snapshot();
    size_t compared = 0;
    for (const ProcessReport& p : trace->report->processes) {
      for (const DeviceReport& d : p.devices) {
        if (!d.peak.seen) continue;
        const auto process =
            std::find_if(live.begin(), live.end(), [&](const auto& l) { return l.pid == p.pid; });
        ASSERT_NE(process, live.end()) << name << " pid " << p.pid;
        const auto device = std::find_if(process->devices.begin(), process->devices.end(),
                                         [&](const auto& l) { return l.index == d.index; });
        ASSERT_NE(device, process->devices.end()) << name;
        EXPECT_EQ(device->peak_bytes, d.peak.bytes) << name;
        EXPECT_EQ(device->now_bytes, d.live_at_exit_bytes) << name;
        EXPECT_EQ(process->iterations, p.iterations.count) << name;
        ++compared;
      }
    }
    EXPECT_GT(compared, 0u) << name;
  }
}

// Records come in the order CUPTI delivers them: within a batch they are put in time order;
// across batches, a release that arrives before its allocation, or an old allocation and its
// release arriving after a newer one at the same address, still pair up.
TEST(LiveTally, OutOfOrderRecordsPairByTime) {
  LiveTally tally = NewTally();
  tally.Add(1, Handshake(3));
  Messages m;
  // One batch, two buffers: the releases of one, then the allocations of the other.
  m.At(30).Free(1, 0xA, 2 * kMiB).At(10).Alloc(1, 0xA, kMiB).At(20).Alloc(1, 0xA, 2 * kMiB);
  m.At(15).Free(1, 0xA, kMiB);
  tally.Add(1, m.Take());
  EXPECT_EQ(tally.Snapshot()[0].devices[0].now_bytes, 0u);
  EXPECT_EQ(tally.Snapshot()[0].devices[0].peak_bytes, 2 * kMiB);
  // Across batches: the release first, then its allocation.
  tally.Add(1, m.At(50).Free(1, 0xB, 4 * kMiB).Take());
  tally.Add(1, m.At(40).Alloc(1, 0xB, 4 * kMiB).Take());
  EXPECT_EQ(tally.Snapshot()[0].devices[0].now_bytes, 0u);
  // A newer allocation at 0xC, then an older one and its release: the newer stays.
  tally.Add(1, m.At(80).Alloc(1, 0xC, 8 * kMiB).Take());
  tally.Add(1, m.At(60).Alloc(1, 0xC, 3 * kMiB).At(70).Free(1, 0xC, 3 * kMiB).Take());
  EXPECT_EQ(tally.Snapshot()[0].devices[0].now_bytes, 8 * kMiB);
  // A release of memory allocated before tracing started changes nothing later.
  tally.Add(1, m.At(90).Free(1, 0xD, kMiB).Take());
  tally.Add(1, m.At(100).Alloc(1, 0xD, kMiB).Take());
  EXPECT_EQ(tally.Snapshot()[0].devices[0].now_bytes, 9 * kMiB);
}

TEST(LiveText, FitsTheLinesAndColumnsItIsGiven) {
  std::vector<LiveTally::Process> processes(5);
  for (uint32_t i = 0; i < 5; ++i) {
    processes[i].pid = 100 + i;
    processes[i].program = std::string("torchrun \x1b[2J rank ") + std::to_string(i);
    processes[i].devices.push_back(
        {i, 2 * kMiB, 3 * kMiB, {{"forward", 2 * kMiB}}, false, 0, false, 0, 0, {}});
  }
  const std::vector<std::string> text = LiveText(processes, 1, 40, 8);
  ASSERT_EQ(text.size(), 8u);
  EXPECT_EQ(text[1], "pid 100  torchrun ?[2J rank 0");  // no escape reaches the terminal
  EXPECT_EQ(text[7], "  ... and 3 more processes");
  for (const std::string& line : text) EXPECT_LE(line.size(), 40u) << line;
}

// What the daemon serves to `top` reads back as it was; anything else is refused.
TEST(LiveJson, RoundTripsASnapshot) {
  std::vector<LiveTally::Process> processes(2);
  processes[0].pid = 7;
  processes[0].program = "python3 train.py";
  processes[0].iterations = 4;
  processes[0].iteration_range = "forward";
  processes[0].devices.push_back(
      {1, 5 * kMiB, 9 * kMiB, {{"", 3}, {"forward", 4}}, true, 77, false, 0, 0, {}});
  processes[0].devices[0].by_category = {{"parameter", 5, 7}, {"activation", 0, 2}};
  processes[1].pid = 8;
  processes[1].ended = true;
  processes[1].devices.push_back({0, 1, 2, {}, false, 0, true, 6, 9, {}});
  std::vector<LiveTally::Process> back;
  double elapsed = 0;
  std::string error;
  ASSERT_TRUE(ParseLiveJson(LiveJson(processes, 3.5), &back, &elapsed, &error)) << error;
  EXPECT_EQ(elapsed, 3.5);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].program, "python3 train.py");
  EXPECT_EQ(LiveText(back, 3.5, 200, 20), LiveText(processes, 3.5, 200, 20));
  EXPECT_TRUE(back[1].ended);
  EXPECT_FALSE(back[1].devices[0].has_last_rise);
  EXPECT_TRUE(back[1].devices[0].has_tensors);
  EXPECT_EQ(back[1].devices[0].tensors_peak_bytes, 9u);
  EXPECT_FALSE(back[0].devices[0].has_tensors);
  EXPECT_EQ(back[0].devices[0].last_iteration_rise_bytes, 77u);
  ASSERT_EQ(back[0].devices[0].by_category.size(), 2u);
  EXPECT_EQ(back[0].devices[0].by_category[1].category, "activation");
  EXPECT_EQ(back[0].devices[0].by_category[1].peak_bytes, 2u);
  // A name that is not UTF-8 (the program's bytes) is replaced, not refused.
  processes[0].program = "python3 \xff.py";
  ASSERT_TRUE(ParseLiveJson(LiveJson(processes, 1), &back, &elapsed, &error)) << error;
  EXPECT_EQ(back[0].program.rfind("python3 ", 0), 0u);
  for (const char* bad : {"", "{}", R"({"schema": "cumemtrace.live/1"})",
                          R"({"schema": "cumemtrace.live/1", "elapsed_s": 1,
                              "processes": [{"pid": "x"}]})"}) {
    EXPECT_FALSE(ParseLiveJson(bad, &back, &elapsed, &error)) << bad;
  }
}

}  // namespace
}  // namespace cumemtrace
