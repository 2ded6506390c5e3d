// PyTorch's two layers rebuilt from the bridge's events on a fabricated trace: tensors (the
// allocator's blocks, sized from its counters) and its driver segments, with memory PyTorch
// never sees beside them. The figures below are what torch.cuda.max_memory_allocated() and
// max_memory_reserved() would report for this sequence.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
// The tracer's side of the bridge, header-only: the end-to-end test below drives the very
// code the shim runs, so the two halves of the block-size rule are checked together.
#include "tracer/sources/torch_bridge/bridge_core.h"
#include "tracer/sources/torch_bridge/tests/fabricated_entry.h"

namespace cumemtrace {
namespace {

using testing::Analyze;
using testing::FindDevice;
using testing::StreamBuilder;

constexpr uint32_t kCuMemAlloc = 1, kC10Cuda = 2, kCublas = 3;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint32_t kThread = 500;

class TorchTrace {
 public:
  explicit TorchTrace(bool attached) : s_(1, 4242) {
    s_.handshake().set_pytorch_alloc_conf("");
    s_.String(kCuMemAlloc, "cuMemAlloc_v2").String(kC10Cuda, "libc10_cuda.so");
    s_.String(kCublas, "libcublasLt.so.13");
    s_.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
    v1::Event state;
    state.set_timestamp_ns(5);
    state.mutable_torch_bridge()->set_attached(attached);
    state.mutable_torch_bridge()->set_torch_version("2.11.0+cu130");
    state.mutable_torch_bridge()->set_library("/venv/torch/lib/libc10_cuda.so");
    if (!attached) state.mutable_torch_bridge()->set_reason("no bridge for torch 2.11.0+cu130");
    s_.Raw(state);
  }
  // A torch event with the counters as the allocator would show them.
  TorchTrace& Torch(uint64_t ts, v1::TorchAllocatorAction action, uint64_t sequence,
                    uint64_t address, uint64_t requested, uint64_t total, uint64_t current) {
    s_.Torch(ts, action, sequence, address, requested, total, current, kThread);
    return *this;
  }
  StreamBuilder& s() { return s_; }

 private:
  StreamBuilder s_;
};

constexpr auto kAlloc = v1::TORCH_ALLOCATOR_ACTION_ALLOC;
constexpr auto kFree = v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED;
constexpr auto kFreeDone = v1::TORCH_ALLOCATOR_ACTION_FREE_COMPLETED;
constexpr auto kSegment = v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC;
constexpr auto kProbe = v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE;
constexpr uint64_t kBig = 15000064;  // a 15,000,000-byte tensor's block (512-byte multiple)

// Segment A (2 MiB) holds two small tensors; cuBLAS takes 4 MiB of its own; segment B
// (20 MiB) holds one big tensor, settled by a probe, then goes back to the driver; a last
// small tensor is never followed by an event.
TorchTrace Scenario(bool attached) {
  TorchTrace t(attached);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(11, kSegment, 1, 0x1000000, 2 * kMiB, 0, 0);
  t.Torch(12, kAlloc, 2, 0x1000000, 1000, 0, 0);
  s.Flush();  // the next event settles the first tensor from another batch
  t.Torch(13, kAlloc, 3, 0x1000400, 3000, 1024, 1024);
  s.Alloc(14, 0, 0x9000000, 4 * kMiB, testing::kDevice, 900, kCuMemAlloc, kCublas);
  t.Torch(15, kFree, 4, 0x1000000, 1000, 4096, 3072);
  t.Torch(16, kFreeDone, 5, 0x1000000, 1000, 4096, 3072);
  s.Alloc(17, 0, 0x2000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(18, kSegment, 6, 0x2000000, 20 * kMiB, 4096, 3072);
  t.Torch(19, kAlloc, 7, 0x2000000, 15000000, 4096, 3072);
  s.Flush();
  t.Torch(20, kProbe, 7, 0, 0, 4096 + kBig, 3072 + kBig);
  t.Torch(30, kFree, 8, 0x2000000, 15000000, 4096 + kBig, 3072);
  s.Free(32, 0, 0x2000000, 20 * kMiB);
  t.Torch(40, kAlloc, 9, 0x1000000, 100, 4096 + kBig, 3072);
  s.Exit(50, 0).Flush();
  return t;
}

TEST(TorchLayers, TensorsAndSegmentsAreTwoLayersByTheByte) {
  auto report = Analyze(Scenario(/*attached=*/true).s().Chunks());
  ASSERT_EQ(report->processes.size(), 1u);
  const ProcessReport& p = report->processes[0];
  EXPECT_TRUE(p.torch.attached);
  EXPECT_EQ(p.torch.events, 9u);
  EXPECT_EQ(p.torch.blocks, 4u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 1u);  // the last tensor: rounded up to 512
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  EXPECT_EQ(p.torch.lost_events, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->torch.present);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 3072 + kBig);      // max_memory_allocated
  EXPECT_EQ(d->torch.reserved_peak_bytes, 22 * kMiB);         // max_memory_reserved
  EXPECT_EQ(d->torch.reserved_at_allocated_peak_bytes, 22 * kMiB);
  EXPECT_EQ(d->torch.fragmentation_at_peak_bytes, 22 * kMiB - 3072 - kBig);
  EXPECT_EQ(d->torch.other_device_peak_bytes, 4 * kMiB);      // cuBLAS
  // In use: tensors and cuBLAS, never the segments that hold the tensors.
  EXPECT_EQ(d->peak.bytes, 3072 + kBig + 4 * kMiB);
  EXPECT_EQ(d->peak.time_abs_ns, 19u);
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").allocations, 4u);
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").releases, 2u);
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").allocated_bytes, 1024 + 3072 + kBig + 512);
  EXPECT_EQ(d->by_kind.at("TORCH_RESERVED").allocations, 2u);
  EXPECT_EQ(d->by_kind.at("TORCH_RESERVED").releases, 1u);
  EXPECT_EQ(d->by_kind.at("DEVICE").allocations, 1u);
  EXPECT_EQ(d->live_at_exit_bytes, 3072u + 512 + 4 * kMiB);
  EXPECT_EQ(d->by_library.at("libc10_cuda.so").allocations, 4u);
}

TEST(TorchLayers, WithoutTheBridgeSegmentsStayDeviceMemory) {
  // No shim for this torch: the tracer says so and sends no allocator event.
  TorchTrace t(/*attached=*/false);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  s.Alloc(14, 0, 0x9000000, 4 * kMiB, testing::kDevice, 900, kCuMemAlloc, kCublas);
  s.Alloc(17, 0, 0x2000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  s.Free(32, 0, 0x2000000, 20 * kMiB);
  s.Exit(50, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_TRUE(p.torch.seen);
  EXPECT_FALSE(p.torch.attached);
  EXPECT_EQ(p.torch.reason, "no bridge for torch 2.11.0+cu130");
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->torch.present);
  EXPECT_EQ(d->by_kind.count("TORCH_RESERVED"), 0u);
  EXPECT_EQ(d->by_kind.at("DEVICE").allocations, 3u);
  EXPECT_EQ(d->peak.bytes, 26 * kMiB);  // segments are the program's memory, as before
}

TEST(TorchLayers, CountsCounterMismatchesAndLostEvents) {
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(12, kAlloc, 1, 0x1000000, 1000, 0, 0);
  t.Torch(13, kAlloc, 2, 0x1000400, 1000, 1024, 1024);
  // Events 3 and 4 were lost (a full queue): the allocator's counter now also holds what
  // they did, so the pending block is estimated and the counter disagrees.
  t.Torch(20, kFree, 5, 0x1000400, 1000, 4096, 1536);
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.lost_events, 2u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 1u);
  EXPECT_EQ(p.torch.counter_mismatches, 1u);  // 1536 reported, 1024 rebuilt
}

// Frees read no counters (the tracer since frees stopped reading them): a block freed
// before anything settled its size is released once the next counted event (an ALLOC, a
// probe) gives it; a lost event in between leaves the size estimated.
TEST(TorchLayers, FreesWithoutCountersWaitForTheNextCountedEvent) {
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(12, kAlloc, 1, 0x1000000, 1000, 0, 0);
  t.Torch(13, kFree, 2, 0x1000000, 1000, 0, 0);         // its own block, size not known yet
  t.Torch(14, kAlloc, 3, 0x1000000, 3000, 1024, 0);     // settles it: 1024
  t.Torch(15, kAlloc, 4, 0x1000c00, 100, 4096, 3072);   // settles the 3072-byte block
  t.Torch(16, kFree, 5, 0x1000000, 3000, 0, 0);         // a settled block
  t.Torch(17, kFree, 6, 0x1000c00, 100, 0, 0);          // the pending one again
  s.Flush();
  t.Torch(18, kProbe, 6, 0, 0, 4608, 0);                // settles it: 512
  t.Torch(20, kAlloc, 7, 0x1000000, 1000, 4608, 0);
  t.Torch(21, kFree, 9, 0x1000000, 1000, 0, 0);         // event 8 was lost
  t.Torch(22, kAlloc, 10, 0x1000000, 1000, 6656, 0);    // 2048 more: two ALLOCs, or one?
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.blocks, 5u);
  EXPECT_EQ(p.torch.lost_events, 1u);
  EXPECT_EQ(p.torch.unknown_frees, 0u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 2u);  // the one across the gap, the last one
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 3072u + 512);
  const auto& tensors = d->by_kind.at("TORCH_ALLOCATED");
  EXPECT_EQ(tensors.allocations, 5u);
  EXPECT_EQ(tensors.releases, 4u);
  EXPECT_EQ(tensors.allocated_bytes, 1024u + 3072 + 512 + 1024 + 1024);
  EXPECT_EQ(d->live_at_exit_bytes, 1024u);
}

// Each thread's own buffer and the ring are drained in turn: a probe (the ring's) can arrive
// before the buffered ALLOC it settles, and a thread's events before another's that came
// first. Events are taken in the allocator's order (its sequence), so nothing is lost or
// mismatched, and the sizes are the counters'.
TEST(TorchLayers, EventsArrivingOutOfSequenceAreTakenInTheAllocatorsOrder) {
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(11, kAlloc, 1, 0x1000000, 1000, 0, 0);
  s.Flush();
  t.Torch(13, kProbe, 2, 0, 0, 1024 + kBig, 1024 + kBig);  // after event 2, before it here
  s.Flush();
  t.Torch(15, kAlloc, 4, 0x1000400 + kBig, 100, 1024 + kBig, kBig);  // before 3
  t.Torch(12, kAlloc, 2, 0x1000400, 15000000, 1024, 1024);           // settles 1024
  t.Torch(14, kFree, 3, 0x1000000, 1000, 0, 0);
  s.Flush();
  t.Torch(16, kFree, 5, 0x1000400, 15000000, 0, 0);
  t.Torch(17, kAlloc, 6, 0x1000000, 2000, 1024 + kBig + 512, 512);  // settles 512
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.lost_events, 0u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  EXPECT_EQ(p.torch.unknown_frees, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 1024 + kBig);
}

// torch.cuda.reset_accumulated_memory_stats() zeroes the cumulative counter that block sizes
// are read from, never the current one: a block pending across it is sized from that,
// counting the blocks freed in between, unless it was itself freed (then it is estimated).
TEST(TorchLayers, AResetOfTheCumulativeCounterLeavesPendingBlocksExact) {
  constexpr uint64_t kUnsplit = kBig + 1024;  // a whole free block, larger than asked for
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  s.Alloc(11, 0, 0x2000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(12, kAlloc, 1, 0x1000000, 1000, 0, 0);
  t.Torch(13, kAlloc, 2, 0x2000000, 15000000, 1024, 1024);  // settles 1024
  t.Torch(14, kFree, 3, 0x1000000, 1000, 0, 0);             // while the big one is pending
  // reset_accumulated_memory_stats(): allocated_bytes.allocated is 0 again.
  t.Torch(15, kAlloc, 4, 0x1000000, 1000, 0, kUnsplit);  // settles the big block
  t.Torch(16, kFree, 5, 0x1000000, 1000, 0, 0);          // its own block, pending
  // reset_accumulated_memory_stats() again.
  t.Torch(17, kAlloc, 6, 0x1000400, 5000, 0, kUnsplit);  // the freed one: estimated
  s.Flush();
  t.Torch(18, kProbe, 6, 0, 0, 5120, kUnsplit + 5120);  // settles 5120
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.blocks, 4u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 1u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, kUnsplit + 5120);  // max_memory_allocated
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").allocated_bytes, 1024u + kUnsplit + 1024 + 5120);
}

// Where the counters a block would be sized from are stale or cannot be trusted, the block is
// estimated, never given a wrong exact size: a probe that a later-numbered free overtook, a
// probe after a lost event, an ALLOC whose counters disagreed. A free that read counters
// (older tracers) read them after its decrease, which is added back.
TEST(TorchLayers, StaleCountersEstimateABlockInsteadOfMisSizingIt) {
  constexpr uint64_t kUnsplit = kBig + 1024;
  struct Outcome {
    uint64_t estimated, peak;
  };
  // A small tensor (1024) and the big one are live; the program resets the cumulative
  // counter; `after` adds the events that follow, from sequence 3 on.
  auto run = [](uint64_t first_current, auto after) {
    TorchTrace t(/*attached=*/true);
    StreamBuilder& s = t.s();
    s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
    s.Alloc(11, 0, 0x2000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
    t.Torch(12, kAlloc, 1, 0x1000000, 1000, 0, first_current);
    t.Torch(13, kAlloc, 2, 0x2000000, 15000000, 1024, first_current + 1024);
    after(t);
    s.Exit(30, 0).Flush();
    auto report = Analyze(s.Chunks());
    const ProcessReport& p = report->processes.at(0);
    return Outcome{p.torch.estimated_block_sizes, FindDevice(p, 0)->torch.allocated_peak_bytes};
  };
  // The free (sequence 3) came before the probe that read the counters ahead of it.
  Outcome o = run(0, [](TorchTrace& t) {
    t.Torch(14, kFree, 3, 0x1000000, 1000, 0, 0);
    t.s().Flush();
    t.Torch(15, kProbe, 2, 0, 0, 0, 1024 + kUnsplit);
  });
  EXPECT_EQ(o.estimated, 1u);
  EXPECT_EQ(o.peak, 1024 + kBig);  // the estimate, not 1024 + kUnsplit + 1024
  // Event 3 (an ALLOC) was lost before the probe.
  o = run(0, [](TorchTrace& t) {
    t.s().Flush();
    t.Torch(15, kProbe, 3, 0, 0, 0, 1024 + kUnsplit + 512);
    t.Torch(16, kAlloc, 4, 0x1000600, 100, 0, 1024 + kUnsplit + 512);
  });
  EXPECT_EQ(o.estimated, 2u);  // the big one and the last one
  // The first ALLOC's counters disagreed with the rebuilt blocks (4096 unseen bytes).
  o = run(4096,
          [](TorchTrace& t) { t.Torch(14, kAlloc, 3, 0x1000400, 100, 0, 4096 + 1024 + kUnsplit); });
  EXPECT_EQ(o.estimated, 2u);
  // An older tracer's free, with counters read after its decrease: exact.
  o = run(0, [](TorchTrace& t) {
    t.Torch(14, kFree, 3, 0x1000000, 1000, 0, kUnsplit);
    t.Torch(15, kAlloc, 4, 0x1000000, 100, 0, kUnsplit);
  });
  EXPECT_EQ(o.estimated, 1u);  // the last one only
  EXPECT_EQ(o.peak, 1024 + kUnsplit);
}

constexpr auto kRounded = v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED;

// Rounded ALLOCs (small-pool blocks, no counters) are sized from the request; a counted
// ALLOC pending across them is sized from the next counted difference less them; a probe a
// rounded ALLOC overtook does not settle it; and a probe with nothing pending checks the
// rounded blocks against the allocator's current counter.
TEST(TorchLayers, RoundedBlocksAreSizedAndCheckedWithoutTheirOwnCounters) {
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  s.Alloc(11, 0, 0x2000000, 20 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(12, kRounded, 1, 0x1000000, 1000, 0, 0);          // 1024
  t.Torch(13, kAlloc, 2, 0x2000000, 15000000, 1024, 1024);  // kBig + 1024, pending
  t.Torch(14, kRounded, 3, 0x1000400, 3000, 0, 0);          // 3072
  t.Torch(15, kRounded, 4, 0x1001000, 1, 0, 0);             // 512
  s.Flush();
  t.Torch(16, kProbe, 3, 0, 0, 1024 + kBig + 1024 + 3072,  // overtaken by event 4:
          1024 + kBig + 1024 + 3072);                      // does not settle
  t.Torch(17, kFree, 5, 0x1000400, 3000, 0, 0);
  t.Torch(18, kAlloc, 6, 0x2f00000, 2000000, 1024 + kBig + 1024 + 3072 + 512,
          1024 + kBig + 1024 + 512);  // settles kBig + 1024
  s.Flush();
  t.Torch(19, kProbe, 6, 0, 0, 1024 + kBig + 1024 + 3072 + 512 + 2000384,
          1024 + kBig + 1024 + 512 + 2000384);     // settles, checks: equal
  t.Torch(20, kRounded, 7, 0x1000400, 100, 0, 0);  // 512
  s.Flush();
  t.Torch(21, kProbe, 7, 0, 0, 0, 1024 + kBig + 1024 + 512 + 2000384 + 1024);  // 512 short
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.blocks, 6u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 0u);
  EXPECT_EQ(p.torch.lost_events, 0u);
  EXPECT_EQ(p.torch.counter_mismatches, 1u);  // the last probe: torch had 512 bytes more
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 1024 + kBig + 1024 + 512 + 2000384 + 512);
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").allocated_bytes,
            1024 + kBig + 1024 + 3072 + 512 + 2000384 + 512);
}

// A counted ALLOC freed before its size is known, whose address a rounded ALLOC takes at
// once (the small pool hands a freed block straight out again): the pending block never
// joins the live ones, so neither block disturbs the other.
TEST(TorchLayers, ARoundedBlockAtAPendingFreedBlocksAddressKeepsBoth) {
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x1000000, 2 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  t.Torch(12, kAlloc, 1, 0x1000000, 3000, 0, 0);               // counted (divisions apply): 3072
  t.Torch(13, kFree, 2, 0x1000000, 3000, 0, 0);                // freed, its size not known yet
  t.Torch(14, kRounded, 3, 0x1000000, 2000, 0, 0);             // the same address: 2048
  t.Torch(15, kAlloc, 4, 0x1000800, 5000, 3072 + 2048, 2048);  // settles 3072
  t.Torch(16, kFree, 5, 0x1000000, 2000, 0, 0);                // the rounded one
  s.Flush();
  t.Torch(17, kProbe, 5, 0, 0, 3072 + 2048 + 5120, 5120);  // settles 5120, checks: equal
  s.Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.blocks, 3u);
  EXPECT_EQ(p.torch.rounded_blocks, 1u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  EXPECT_EQ(p.torch.unknown_frees, 0u);
  EXPECT_EQ(p.torch.estimated_block_sizes, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 5120u + 2048);  // max_memory_allocated
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").allocated_bytes, 3072u + 2048 + 5120);
  EXPECT_EQ(d->live_at_exit_bytes, 5120u);
}

// A random program's caching allocator (roundup_power2_divisions:4; small-pool blocks in
// 512-byte steps sent rounded, the others counted, large ones sometimes a whole free block;
// tensors freed in any order, their addresses handed out again; the sender's probe at random
// moments) through the bridge's own code and back through the analysis: every block's size
// and the allocated peak are exact.
TEST(TorchLayers, ARandomAllocatorThroughTheBridgeIsRebuiltByTheByte) {
  using torch_bridge::BridgeCore;
  using torch_bridge::DeviceCounters;
  using torch_bridge::FabricatedEntry;
  struct Allocator {
    DeviceCounters counters;
    uint64_t peak = 0;
  } allocator;
  struct Sink {
    TorchTrace* trace;
    uint64_t ts = 100;
  };
  TorchTrace t(/*attached=*/true);
  StreamBuilder& s = t.s();
  s.Alloc(10, 0, 0x10000000, 64 * kMiB, testing::kDevice, kThread, kCuMemAlloc, kC10Cuda);
  Sink sink{&t};
  auto emit = [](const cumemtrace_torch_event* e, void* context) {
    auto* out = static_cast<Sink*>(context);
    out->trace->Torch(++out->ts, static_cast<v1::TorchAllocatorAction>(e->action), e->sequence,
                      e->address, e->requested_bytes, e->allocated_bytes_total,
                      e->allocated_bytes_current);
    return 1;
  };
  auto read = [&allocator](uint32_t, DeviceCounters* out) {
    *out = allocator.counters;
    return true;
  };
  // roundup_power2_divisions:4, as torch's round_size applies it (above 2048 bytes).
  constexpr uint64_t kDivisions = 4;
  auto small = [](uint64_t requested) {
    return torch_bridge::RoundedSmallBlock(requested, kDivisions);
  };
  auto round_size = [](uint64_t requested) {
    uint64_t block = std::max<uint64_t>(512, (requested + 511) / 512 * 512);
    if (requested > 512 * kDivisions) {
      uint64_t floor = 1;
      while (floor * 2 <= requested) floor *= 2;
      const uint64_t step = floor / kDivisions;
      block = (requested + step - 1) / step * step;
    }
    return block;
  };
  std::vector<std::pair<uint64_t, uint64_t>> freed;  // (address, block) a new tensor may reuse
  BridgeCore<decltype(read), false, decltype(small)> core(emit, &sink, read, small);
  std::mt19937_64 random(7);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> live;  // address -> (requested, block)
  uint64_t next_address = 0x10000000;
  uint64_t allocations = 0;
  for (int step = 0; step < 5000; ++step) {
    const uint64_t dice = random() % 100;
    if (dice < 50 || live.empty()) {
      // Mostly the small pool (at most 1 MiB: split to the request rounded; sent rounded
      // where the divisions do not apply, up to 2048 bytes), sometimes the large one
      // (counted; the block may be a whole free one).
      const uint64_t kind = random() % 4;
      const uint64_t requested = kind == 0   ? (1u << 20) + random() % (4u << 20)
                                 : kind == 1 ? 1 + random() % 100000
                                             : 1 + random() % 2048;
      uint64_t block = round_size(requested);
      if (requested > (1u << 20) && random() % 2 == 0) block += 512 * (1 + random() % 8);
      // The allocator hands a freed block's address out again, at once or later.
      uint64_t address = next_address;
      if (!freed.empty() && freed.back().second >= block && random() % 2 == 0) {
        address = freed.back().first;
        freed.pop_back();
      } else {
        next_address += block;
      }
      // The ALLOC is recorded before allocated_bytes grows, under the same lock.
      core.OnEntry(torch_bridge::Entry(FabricatedEntry::ALLOC, 0, address, requested));
      allocator.counters.allocated_total += block;
      allocator.counters.allocated_current += block;
      allocator.peak = std::max(allocator.peak, allocator.counters.allocated_current);
      live[address] = {requested, block};
      ++allocations;
    } else if (dice < 95) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      // A FREE_REQUESTED is recorded after allocated_bytes shrank.
      allocator.counters.allocated_current -= it->second.second;
      core.OnEntry(torch_bridge::Entry(FabricatedEntry::FREE_REQUESTED, 0, it->first,
                                       it->second.first));
      core.OnEntry(torch_bridge::Entry(FabricatedEntry::FREE_COMPLETED, 0, it->first,
                                       it->second.first));
      freed.emplace_back(it->first, it->second.second);
      live.erase(it);
    } else {
      core.Probe();  // the sender's drain
    }
    if (step % 500 == 0) s.Flush();
  }
  core.Probe();  // the last drain
  s.Exit(sink.ts + 1, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.torch.blocks, allocations);
  EXPECT_GT(p.torch.rounded_blocks, allocations / 4);  // both kinds, many of each
  EXPECT_LT(p.torch.rounded_blocks, allocations * 3 / 4);
  EXPECT_EQ(p.torch.estimated_block_sizes, 0u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  EXPECT_EQ(p.torch.unknown_frees, 0u);
  EXPECT_EQ(p.torch.lost_events, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, allocator.peak);
  uint64_t live_bytes = 0;
  for (const auto& [address, sizes] : live) live_bytes += sizes.second;
  EXPECT_EQ(d->by_kind.at("TORCH_ALLOCATED").releases, allocations - live.size());
  EXPECT_EQ(d->live_at_exit_bytes, live_bytes + 0u);
}

}  // namespace
}  // namespace cumemtrace
