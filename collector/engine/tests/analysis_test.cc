// Behaviour of the analysis on synthetic traces: peaks, kinds, phases, process facts.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

using testing::Analyze;
using testing::Concat;
using testing::FindDevice;
using testing::FindPhase;
using testing::PhaseDevice;
using testing::StreamBuilder;

constexpr uint32_t kForward = 1, kBackward = 2, kStep = 3, kCudaMalloc = 4, kOom = 5;

StreamBuilder WithStrings(uint32_t stream_id = 1, uint32_t pid = 4242) {
  StreamBuilder s(stream_id, pid);
  s.String(kForward, "forward").String(kBackward, "backward").String(kStep, "step");
  s.String(kCudaMalloc, "cudaMalloc").String(kOom, "cudaErrorMemoryAllocation");
  s.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
  return s;
}

const ProcessReport& OnlyProcess(const std::unique_ptr<Report>& report) {
  EXPECT_EQ(report->processes.size(), 1u);
  return report->processes.at(0);
}

TEST(Peak, ExactToTheByteWithInterleavedAllocAndFreeOnTwoDevices) {
  StreamBuilder s = WithStrings();
  // Out of order inside and across batches, as CUPTI's per-thread buffers deliver them.
  s.Alloc(40, 0, 0xC0, 5).Alloc(25, 1, 0xE0, 1).Alloc(10, 0, 0xA0, 1000).Flush();
  s.Free(30, 0, 0xA0, 1000).Alloc(15, 1, 0xD0, 7777).Free(35, 1, 0xD0, 7777);
  s.Alloc(20, 0, 0xB0, 2001).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_EQ(p.devices.size(), 2u);

  const DeviceReport* d0 = FindDevice(p, 0);
  ASSERT_NE(d0, nullptr);
  EXPECT_TRUE(d0->has_info);
  EXPECT_EQ(d0->name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d0->peak.bytes, 3001u);
  EXPECT_EQ(d0->peak.time_abs_ns, 20u);
  EXPECT_EQ(d0->peak.time_ns, 10u);  // relative to the first timestamp (10)
  EXPECT_EQ(d0->peak.live_count, 2u);
  EXPECT_EQ(d0->by_kind.at("DEVICE").allocations, 3u);
  EXPECT_EQ(d0->by_kind.at("DEVICE").releases, 1u);
  EXPECT_EQ(d0->by_kind.at("DEVICE").allocated_bytes, 3006u);
  EXPECT_EQ(d0->live_at_exit_count, 2u);
  EXPECT_EQ(d0->live_at_exit_bytes, 2006u);

  const DeviceReport* d1 = FindDevice(p, 1);
  ASSERT_NE(d1, nullptr);
  EXPECT_FALSE(d1->has_info);  // only seen in records
  EXPECT_EQ(d1->peak.bytes, 7778u);
  EXPECT_EQ(d1->peak.time_ns, 15u);
  EXPECT_EQ(d1->live_at_exit_bytes, 1u);
}

TEST(Peak, DeviceMemorySplitsByTheApiThatAllocatedIt) {
  // A framework's tensors through cudaMallocAsync, a library's workspace through cuMemAlloc:
  // each API's own peak and its share of the device peak, so one can be compared with the
  // framework's own counters while the device peak stays the whole truth.
  constexpr uint32_t kAsync = 20, kCuMemAlloc = 21, kCublas = 22;
  StreamBuilder s = WithStrings();
  s.String(kAsync, "cudaMallocAsync").String(kCuMemAlloc, "cuMemAlloc");
  s.String(kCublas, "libcublasLt.so.13");
  s.Alloc(10, 0, 0x100, 300, testing::kDevice, 1, kAsync);
  s.Alloc(11, 0, 0x200, 500, testing::kDevice, 1, kAsync);  // cudaMallocAsync's own peak: 800
  s.Free(12, 0, 0x100, 300);
  s.Alloc(13, 0, 0x900, 400, testing::kDevice, 2, kCuMemAlloc, kCublas);  // peak: 500 + 400
  s.Free(14, 0, 0x200, 500);
  s.Alloc(15, 0, 0x300, 100, testing::kDevice, 1, 0);  // call not seen
  s.Alloc(16, 0, 0x400, 7, v1::MEMORY_KIND_PINNED, 1, kAsync);  // not device memory
  s.Flush();
  auto report = Analyze(s.Chunks());
  const DeviceReport* d = FindDevice(OnlyProcess(report), 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->peak.bytes, 900u);
  ASSERT_EQ(d->by_api.size(), 3u);
  const OriginStats& async = d->by_api.at("cudaMallocAsync");
  EXPECT_EQ(async.allocations, 2u);
  EXPECT_EQ(async.allocated_bytes, 800u);
  EXPECT_EQ(async.peak_bytes, 800u);  // its own peak came before the device peak
  EXPECT_EQ(async.live_at_peak_bytes, 500u);
  EXPECT_EQ(async.live_at_exit_bytes, 0u);
  const OriginStats& library = d->by_api.at("cuMemAlloc");
  EXPECT_EQ(library.peak_bytes, 400u);
  EXPECT_EQ(library.live_at_peak_bytes, 400u);
  EXPECT_EQ(library.live_at_exit_bytes, 400u);
  EXPECT_EQ(d->by_api.at("(unknown)").allocated_bytes, 100u);
  // The same allocations by calling library: only the cuBLAS one was unwound.
  ASSERT_EQ(d->by_library.size(), 2u);
  EXPECT_EQ(d->by_library.at("libcublasLt.so.13").live_at_peak_bytes, 400u);
  EXPECT_EQ(d->by_library.at("(not unwound)").live_at_peak_bytes, 500u);
  EXPECT_EQ(d->by_library.at("(not unwound)").peak_bytes, 800u);
}

TEST(Peak, LiveAtPeakGroupedByPhaseAndKindWithLargestFirst) {
  StreamBuilder s = WithStrings();
  s.Push(100, 1, kForward).Alloc(110, 0, 0x1, 1000, v1::MEMORY_KIND_DEVICE, 1, kCudaMalloc);
  s.Alloc(120, 0, 0x2, 300, v1::MEMORY_KIND_ARRAY, 1).Alloc(130, 0, 0x3, 500, v1::MEMORY_KIND_DEVICE, 1);
  s.Pop(140, 1).Push(150, 1, kBackward).Alloc(160, 0, 0x4, 2000, v1::MEMORY_KIND_DEVICE, 1);
  s.Free(170, 0, 0x3, 500, v1::MEMORY_KIND_DEVICE, 1).Pop(180, 1);
  s.Alloc(190, 0, 0x5, 50, v1::MEMORY_KIND_DEVICE, 1);
  AnalysisOptions options;
  options.top_allocations = 2;
  auto report = Analyze(s.Chunks(), options);
  const DeviceReport& d = OnlyProcess(report).devices.at(0);
  EXPECT_EQ(d.peak.bytes, 3800u);
  EXPECT_EQ(d.peak.time_abs_ns, 160u);
  ASSERT_EQ(d.peak.live_by_phase_and_kind.size(), 3u);
  EXPECT_EQ(d.peak.live_by_phase_and_kind[0].phase, "backward");
  EXPECT_EQ(d.peak.live_by_phase_and_kind[0].kind, "DEVICE");
  EXPECT_EQ(d.peak.live_by_phase_and_kind[0].count, 1u);
  EXPECT_EQ(d.peak.live_by_phase_and_kind[0].bytes, 2000u);
  EXPECT_EQ(d.peak.live_by_phase_and_kind[1].phase, "forward");
  EXPECT_EQ(d.peak.live_by_phase_and_kind[1].kind, "DEVICE");
  EXPECT_EQ(d.peak.live_by_phase_and_kind[1].count, 2u);
  EXPECT_EQ(d.peak.live_by_phase_and_kind[1].bytes, 1500u);
  EXPECT_EQ(d.peak.live_by_phase_and_kind[2].kind, "ARRAY");
  EXPECT_EQ(d.peak.live_by_phase_and_kind[2].bytes, 300u);
  ASSERT_EQ(d.peak.largest.size(), 2u);
  EXPECT_EQ(d.peak.largest[0].address, 0x4u);
  EXPECT_EQ(d.peak.largest[0].phase, "backward");
  EXPECT_EQ(d.peak.largest[1].address, 0x1u);
  EXPECT_EQ(d.peak.largest[1].api, "cudaMalloc");
  EXPECT_EQ(d.peak.largest[1].thread_id, 1u);
  EXPECT_EQ(d.peak.largest[1].birth_ns, 10u);
}

TEST(Peak, PinnedAndManagedHaveTheirOwnPeaksButNeverAddToDeviceMemory) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 1000).Alloc(20, 0, 0x2, 1 << 20, v1::MEMORY_KIND_PINNED);
  s.Alloc(30, 0, 0x3, 5000, v1::MEMORY_KIND_MANAGED).Free(40, 0, 0x2, 1 << 20, v1::MEMORY_KIND_PINNED);
  auto report = Analyze(s.Chunks());
  const DeviceReport& d = OnlyProcess(report).devices.at(0);
  EXPECT_EQ(d.peak.bytes, 1000u);
  EXPECT_EQ(d.peak.time_abs_ns, 10u);
  EXPECT_EQ(d.by_kind.at("PINNED").peak_bytes, 1u << 20);
  EXPECT_EQ(d.by_kind.at("PINNED").releases, 1u);
  EXPECT_EQ(d.by_kind.at("MANAGED").peak_bytes, 5000u);
  EXPECT_EQ(d.live_at_exit_bytes, 1000u);  // managed is not device memory at exit either
}

TEST(NotProgram, StaticsTracerAndReleasesOfUnknownAddresses) {
  StreamBuilder s = WithStrings();
  s.Alloc(5, 0, 0x100, 100, v1::MEMORY_KIND_DEVICE_STATIC).Alloc(6, 0, 0x200, 200, v1::MEMORY_KIND_DEVICE_STATIC);
  s.Alloc(7, 0, 0x300, 50, v1::MEMORY_KIND_MANAGED_STATIC).Free(8, 0, 0xdead, 4096);
  s.Alloc(9, 0, 0x400, 10).TracerMemory(0, 9600000);
  auto report = Analyze(s.Chunks());
  const DeviceReport& d = OnlyProcess(report).devices.at(0);
  EXPECT_EQ(d.peak.bytes, 10u);
  EXPECT_EQ(d.not_program.static_peak_bytes, 350u);
  EXPECT_EQ(d.not_program.static_allocations, 3u);
  EXPECT_EQ(d.not_program.released_unknown_count, 1u);
  EXPECT_EQ(d.not_program.released_unknown_bytes, 4096u);
  EXPECT_EQ(d.not_program.tracer_bytes, 9600000u);
  EXPECT_EQ(d.by_kind.at("DEVICE").releases, 0u);
}

TEST(Peak, AllocationAtALiveAddressClosesTheOldOne) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 100).Alloc(20, 0, 0x1, 300);
  auto report = Analyze(s.Chunks());
  const DeviceReport& d = OnlyProcess(report).devices.at(0);
  EXPECT_EQ(d.peak.bytes, 300u);
  EXPECT_EQ(d.reallocated_live_address, 1u);
  EXPECT_EQ(d.live_at_exit_count, 1u);
}

TEST(LiveAtExit, NeverReleasedAllocationsAreClosedAtTheLastTimestamp) {
  StreamBuilder s = WithStrings();
  s.Alloc(100, 0, 0x1, 64).Alloc(110, 0, 0x2, 128).Alloc(120, 0, 0x3, 256).Free(130, 0, 0x2, 128);
  s.Kernel(140, 1000, 0, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_EQ(p.devices.at(0).live_at_exit_count, 2u);
  EXPECT_EQ(p.devices.at(0).live_at_exit_bytes, 320u);
  EXPECT_EQ(p.duration_ns, 900u);  // a kernel's end counts as the last timestamp
}

TEST(Phases, InnerAllocationsCountForEnclosingRangesOncePerName) {
  StreamBuilder s = WithStrings();
  s.Push(100, 1, kStep).Push(110, 1, kForward).Alloc(120, 0, 0x1, 100, testing::kDevice, 1);
  s.Push(125, 1, kStep).Alloc(126, 0, 0x2, 10, testing::kDevice, 1).Pop(127, 1);
  s.Free(130, 0, 0x1, 100, testing::kDevice, 1).Pop(140, 1);
  s.Alloc(150, 0, 0x3, 1000, testing::kDevice, 1).Pop(160, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  const PhaseReport* step = FindPhase(p, "step");
  const PhaseReport* forward = FindPhase(p, "forward");
  ASSERT_NE(step, nullptr);
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(step->occurrences, 2u);
  EXPECT_EQ(PhaseDevice(*step, 0).allocated_bytes, 1110u);
  EXPECT_EQ(PhaseDevice(*step, 0).allocations, 3u);  // 0x2 once, though two "step"s are open
  EXPECT_EQ(PhaseDevice(*step, 0).freed_bytes, 100u);
  EXPECT_EQ(PhaseDevice(*step, 0).frees, 1u);
  EXPECT_EQ(forward->occurrences, 1u);
  EXPECT_EQ(forward->total_ns, 30u);
  EXPECT_EQ(PhaseDevice(*forward, 0).allocated_bytes, 110u);
  EXPECT_EQ(PhaseDevice(*forward, 0).allocations, 2u);
  EXPECT_EQ(PhaseDevice(*forward, 0).freed_bytes, 100u);
  // Phase of origin is the innermost range: 0x2 was born in the nested "step", not "forward".
  ASSERT_EQ(p.devices.at(0).peak.live_by_phase_and_kind.size(), 1u);
  EXPECT_EQ(p.devices.at(0).peak.live_by_phase_and_kind[0].phase, "step");
  EXPECT_EQ(p.devices.at(0).peak.live_by_phase_and_kind[0].count, 2u);
  EXPECT_EQ(p.devices.at(0).peak.live_by_phase_and_kind[0].bytes, 1010u);
}

TEST(Phases, AllocationsFromAThreadWithNoRangeGoToTheMostRecentOpenRange) {
  StreamBuilder s = WithStrings();
  // Main thread 1 in "backward"; the autograd worker (2) and an unknown thread (0) allocate.
  s.Push(100, 1, kBackward).Alloc(110, 0, 0x1, 500, testing::kDevice, 2);
  s.Alloc(115, 0, 0x2, 20, testing::kDevice, 0).Free(120, 0, 0x1, 500, testing::kDevice, 2);
  s.Pop(130, 1).Alloc(140, 0, 0x3, 7, testing::kDevice, 2);
  // A thread's own open range beats a more recent range of another thread.
  s.Push(200, 2, kForward).Push(205, 1, kBackward).Alloc(210, 0, 0x4, 9, testing::kDevice, 2);
  s.Pop(220, 1).Pop(230, 2);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  const PhaseDeviceStats& backward = PhaseDevice(*FindPhase(p, "backward"), 0);
  EXPECT_EQ(backward.allocated_bytes, 520u);
  EXPECT_EQ(backward.allocations, 2u);
  EXPECT_EQ(backward.freed_bytes, 500u);
  const PhaseDeviceStats& forward = PhaseDevice(*FindPhase(p, "forward"), 0);
  EXPECT_EQ(forward.allocated_bytes, 9u);
}

TEST(Phases, StartEndPairByIdAcrossThreads) {
  StreamBuilder s = WithStrings();
  s.Start(100, 1, kForward, 77).Alloc(110, 0, 0x1, 64, testing::kDevice, 3);
  s.End(120, 2, 77).Alloc(130, 0, 0x2, 32, testing::kDevice, 3);
  s.End(140, 2, 99).Pop(150, 5);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  const PhaseReport* forward = FindPhase(p, "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->occurrences, 1u);
  EXPECT_EQ(forward->total_ns, 20u);
  EXPECT_EQ(forward->still_open, 0u);
  EXPECT_EQ(PhaseDevice(*forward, 0).allocated_bytes, 64u);
  EXPECT_EQ(p.unmatched_range_closes, 2u);
}

TEST(Phases, EntryPeakAndPeakAboveEntryComeFromTheOccurrenceWithTheHighestPeak) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 100);
  s.Push(20, 1, kForward).Alloc(30, 0, 0x2, 50, testing::kDevice, 1);
  s.Alloc(40, 0, 0x3, 70, testing::kDevice, 1).Free(50, 0, 0x2, 50, testing::kDevice, 1).Pop(60, 1);
  s.Alloc(65, 0, 0x4, 1000).Free(66, 0, 0x4, 1000);  // outside any range: no effect on it
  s.Push(70, 1, kForward).Alloc(80, 0, 0x5, 10, testing::kDevice, 1).Pop(90, 1);
  auto report = Analyze(s.Chunks());
  const PhaseReport* forward = FindPhase(OnlyProcess(report), "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->occurrences, 2u);
  EXPECT_EQ(forward->total_ns, 60u);
  const PhaseDeviceStats& d = PhaseDevice(*forward, 0);
  // The first occurrence (100 -> 220), not the highest entry of the second (170): the row
  // adds up.
  EXPECT_EQ(d.bytes_at_entry, 100u);
  EXPECT_EQ(d.peak_bytes, 220u);
  EXPECT_EQ(d.peak_above_entry_bytes, 120u);
  EXPECT_EQ(d.steady_of, 1u);
  EXPECT_EQ(d.steady.bytes_at_entry, 170u);
  EXPECT_EQ(d.steady.peak_above_entry_bytes, 10u);
  EXPECT_EQ(d.allocated_bytes, 130u);
  EXPECT_EQ(d.freed_bytes, 50u);
}

TEST(Phases, EqualTimestampsOpenBeforeAndCloseAfterMemoryEvents) {
  StreamBuilder s = WithStrings();
  // Arrival order puts the memory events on the wrong side of the range edges.
  s.Alloc(100, 0, 0x1, 10, testing::kDevice, 1).Push(100, 1, kForward);
  s.Pop(200, 1).Alloc(200, 0, 0x2, 20, testing::kDevice, 1);
  auto report = Analyze(s.Chunks());
  const PhaseDeviceStats& d = PhaseDevice(*FindPhase(OnlyProcess(report), "forward"), 0);
  EXPECT_EQ(d.allocations, 2u);
  EXPECT_EQ(d.allocated_bytes, 30u);
}

TEST(Phases, RangeOpenAtTheEndIsClosedAtTheLastTimestampAndFlagged) {
  StreamBuilder s = WithStrings();
  s.Push(100, 1, kForward).Alloc(110, 0, 0x1, 10, testing::kDevice, 1).Kernel(120, 500, 0, 1);
  auto report = Analyze(s.Chunks());
  const PhaseReport* forward = FindPhase(OnlyProcess(report), "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->still_open, 1u);
  EXPECT_EQ(forward->total_ns, 400u);
  EXPECT_EQ(PhaseDevice(*forward, 0).peak_bytes, 10u);
}

TEST(Phases, NamedDomainsAreKeyedByDomainAndMessage) {
  StreamBuilder s = WithStrings();
  s.String(7, "mydomain").Push(100, 1, kForward, 7).Alloc(105, 0, 0x1, 5, testing::kDevice, 1);
  s.Pop(110, 1, 7).Push(120, 1, kForward).Pop(130, 1).Mark(140, 1, kStep);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  const PhaseReport* named = FindPhase(p, "mydomain: forward");
  const PhaseReport* plain = FindPhase(p, "forward");
  ASSERT_NE(named, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(named->domain, "mydomain");
  EXPECT_EQ(PhaseDevice(*named, 0).allocated_bytes, 5u);
  EXPECT_EQ(PhaseDevice(*plain, 0).allocated_bytes, 0u);
  EXPECT_EQ(p.nvtx_marks, 1u);
}

TEST(Phases, TwoIdsForTheSameStringAreOnePhase) {
  StreamBuilder s = WithStrings();
  s.String(20, "forward").Push(100, 1, kForward).Push(110, 1, 20);
  s.Alloc(120, 0, 0x1, 8, testing::kDevice, 1).Pop(130, 1).Pop(140, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_EQ(p.phases.size(), 1u);
  EXPECT_EQ(p.phases[0].occurrences, 2u);
  EXPECT_EQ(PhaseDevice(p.phases[0], 0).allocations, 1u);  // once, though nested in itself
}

TEST(Phases, KernelsAttributeByLaunchingThreadAtStart) {
  StreamBuilder s = WithStrings();
  s.Push(100, 1, kForward).Kernel(110, 150, 0, 1).Pop(200, 1).Kernel(300, 310, 0, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_EQ(p.devices.at(0).kernel_count, 2u);
  EXPECT_EQ(p.devices.at(0).kernel_busy_ns, 50u);
  EXPECT_EQ(PhaseDevice(*FindPhase(p, "forward"), 0).kernels, 1u);
}

TEST(Kernels, SeenWithoutGpuTimesAreCountedAtLaunchThoughTheHandshakeSaidNone) {
  // The default starts counting launches after its handshake when PyTorch's tensors are
  // unseen: the report says kernels were counted at their launch.
  StreamBuilder s(1, 4242);
  s.handshake().set_kernels_enabled(false);
  s.Kernel(110, 0, 0, 1).Kernel(120, 0, 0, 1);
  const auto report = Analyze(s.Chunks());
  EXPECT_FALSE(OnlyProcess(report).kernels_enabled);
  EXPECT_TRUE(OnlyProcess(report).kernel_launches_enabled);
  StreamBuilder none(1, 4242);
  none.handshake().set_kernels_enabled(false);
  none.Alloc(100, 0, 0x1, 8, testing::kDevice, 1);
  EXPECT_FALSE(OnlyProcess(Analyze(none.Chunks())).kernel_launches_enabled);
}

TEST(FailedAllocations, CarryPhaseSizeErrorAndMemoryInUse) {
  StreamBuilder s = WithStrings();
  s.Push(100, 1, kForward).Alloc(105, 0, 0x1, 1ull << 30, testing::kDevice, 1);
  s.Failed(110, 0, 1, 2ull << 30, 2, kCudaMalloc, kOom, 123456, 85899345920ull).Pop(120, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_EQ(p.failed_allocations.size(), 1u);
  const FailedAllocationReport& f = p.failed_allocations[0];
  EXPECT_EQ(f.time_ns, 10u);
  EXPECT_EQ(f.api, "cudaMalloc");
  EXPECT_EQ(f.requested_bytes, 2ull << 30);
  EXPECT_EQ(f.error_code, 2);
  EXPECT_EQ(f.error_name, "cudaErrorMemoryAllocation");
  EXPECT_EQ(f.phase, "forward");
  EXPECT_EQ(f.device_in_use_bytes, 1ull << 30);
  EXPECT_EQ(f.device_free_bytes, 123456u);
  EXPECT_EQ(f.thread_id, 1u);
  EXPECT_EQ(PhaseDevice(*FindPhase(p, "forward"), 0).failed_allocations, 1u);
}

TEST(FailedAllocations, MemoryInUseDropsWhenAnotherKindTakesALiveAddress) {
  // The DEVICE block's release was lost; a MANAGED allocation at its address ends it, and
  // the failure after that must not count the dead block as in use.
  StreamBuilder s = WithStrings();
  s.Alloc(105, 0, 0x1000, 1ull << 30, testing::kDevice, 1);
  s.Alloc(106, 0, 0x1000, 4096, v1::MEMORY_KIND_MANAGED, 1);
  s.Push(108, 1, kForward);
  s.Failed(110, 0, 1, 2ull << 30, 2, kCudaMalloc, kOom, 123456, 85899345920ull).Pop(120, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_EQ(p.failed_allocations.size(), 1u);
  EXPECT_EQ(p.failed_allocations[0].device_in_use_bytes, 0u);
  // A phase opened after it starts from nothing in use, too.
  EXPECT_EQ(PhaseDevice(*FindPhase(p, "forward"), 0).bytes_at_entry, 0u);
}

TEST(FailedAllocations, DriverRetriesAreNotFailuresTheProgramSaw) {
  // Under cudaMallocAsync, one cuMemAllocAsync per autograd thread fails with
  // CUDA_ERROR_INVALID_CONTEXT and the runtime retries at once (GPT-2 showed "failed
  // allocation 785 MiB" in forward); with expandable_segments, PyTorch's cuMemCreate probe
  // gets CUDA_ERROR_NOT_PERMITTED, then asks again and maps the handle.
  constexpr uint32_t kAsync = 20, kInvalidContext = 21, kCreate = 22, kNotPermitted = 23,
                     kMap = 24, kInvalidValue = 25;
  StreamBuilder s = WithStrings();
  s.String(kAsync, "cuMemAllocAsync").String(kInvalidContext, "CUDA_ERROR_INVALID_CONTEXT");
  s.String(kCreate, "cuMemCreate").String(kNotPermitted, "CUDA_ERROR_NOT_PERMITTED");
  s.String(kMap, "cuMemMap").String(kInvalidValue, "CUDA_ERROR_INVALID_VALUE");
  constexpr uint64_t MiB = 1 << 20;
  s.Push(100, 1, kForward);
  s.Failed(110, 0, 2, 785 * MiB, 201, kAsync, kInvalidContext, 1, 2);  // retried: not seen
  s.Alloc(111, 0, 0x10000000, 785 * MiB, testing::kDevice, 2, kAsync);
  s.Failed(120, 0, 3, 20 * MiB, 800, kCreate, kNotPermitted, 1, 2);  // the handle probe
  s.Alloc(121, 0, 0x50000000, 20 * MiB, testing::kDevice, 3, kMap);
  s.Failed(130, 0, 1, 2ull << 30, 2, kCudaMalloc, kOom, 1, 2);  // out of memory: always seen,
  s.Alloc(131, 0, 0x90000000, 2ull << 30, testing::kDevice, 1, kCudaMalloc);  // even if retried
  s.Failed(140, 0, 4, 1 * MiB, 1, kAsync, kInvalidValue, 1, 2);  // followed by another request
  s.Alloc(141, 0, 0xA0000000, 512, testing::kDevice, 4, kAsync);
  s.Failed(150, 0, 5, 1 * MiB, 201, kAsync, kInvalidContext, 1, 2);  // its thread did no more
  s.Alloc(151, 0, 0xB0000000, 1 * MiB, testing::kDevice, 6, kAsync);  // another thread's
  s.Pop(200, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  std::vector<std::string> failed, retried;
  for (const FailedAllocationReport& f : p.failed_allocations) failed.push_back(f.error_name);
  for (const FailedAllocationReport& f : p.driver_retries) retried.push_back(f.api);
  EXPECT_EQ(failed, (std::vector<std::string>{"cudaErrorMemoryAllocation",
                                              "CUDA_ERROR_INVALID_VALUE",
                                              "CUDA_ERROR_INVALID_CONTEXT"}));
  EXPECT_EQ(retried, (std::vector<std::string>{"cuMemAllocAsync", "cuMemCreate"}));
  ASSERT_EQ(p.driver_retries.size(), 2u);
  EXPECT_EQ(p.driver_retries[0].phase, "forward");
  EXPECT_EQ(p.driver_retries[0].requested_bytes, 785 * MiB);
  EXPECT_EQ(PhaseDevice(*FindPhase(p, "forward"), 0).failed_allocations, 3u);

  const std::string json = SummaryJson(*report);
  EXPECT_NE(json.find("\"driver_retries\""), std::string::npos);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  EXPECT_NE(text.str().find("driver retries"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("cuMemCreate CUDA_ERROR_NOT_PERMITTED x1"), std::string::npos);
}

TEST(Stream, SequenceGapsCountLostBatches) {
  StreamBuilder s = WithStrings();  // batch 0
  s.Alloc(10, 0, 0x1, 1).SkipBatches(3);  // batch 1, then 2..4 lost
  s.Alloc(20, 0, 0x2, 2).Flush();         // batch 5
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_EQ(p.lost_batches, 3u);
  ASSERT_EQ(p.sequence_gaps.size(), 1u);
  EXPECT_EQ(p.sequence_gaps[0].after_sequence, 1u);
  EXPECT_EQ(p.sequence_gaps[0].next_sequence, 5u);
  EXPECT_EQ(p.batches, 3u);
}

TEST(Stream, DroppedRecordsAreReportedBySourceWithWindows) {
  StreamBuilder s = WithStrings();
  s.Alloc(100, 0, 0x1, 1).Dropped(v1::DROP_SOURCE_CUPTI, 10, 150, 160);
  s.Dropped(v1::DROP_SOURCE_CUPTI, 5, 200, 210).Dropped(v1::DROP_SOURCE_TRACER_QUEUE, 7, 0, 0);
  s.Alloc(300, 0, 0x2, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_EQ(p.dropped.size(), 2u);
  EXPECT_EQ(p.dropped[0].source, "cupti");
  EXPECT_EQ(p.dropped[0].total, 15u);
  ASSERT_EQ(p.dropped[0].windows.size(), 2u);
  EXPECT_EQ(p.dropped[0].windows[1].first_ns, 100u);
  EXPECT_EQ(p.dropped[0].windows[1].last_ns, 110u);
  EXPECT_EQ(p.dropped[1].source, "tracer_queue");
  EXPECT_EQ(p.dropped[1].total, 7u);
  EXPECT_FALSE(p.dropped[1].windows[0].has_window);
}

TEST(Stream, InternedStringDefinedInAnEarlierBatchWithALaterTimestampResolves) {
  StreamBuilder s(1, 7);
  s.String(11, "late-stamped phase", 5000).String(12, "cuMemAlloc_v2", 6000).Flush();
  s.Push(10, 1, 11).Alloc(20, 0, 0x1, 4, testing::kDevice, 1, 12).Pop(30, 1).Push(40, 1, 99).Pop(50, 1);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  ASSERT_NE(FindPhase(p, "late-stamped phase"), nullptr);
  EXPECT_NE(FindPhase(p, "#99"), nullptr);  // never defined: visible, not dropped
  EXPECT_EQ(p.devices.at(0).peak.largest.at(0).api, "cuMemAlloc_v2");
}

TEST(Stream, UnsortedInputGivesTheSameReportAsSortedInput) {
  std::mt19937 rng(12345);
  struct Op { int what; uint32_t thread; uint64_t address; uint64_t bytes; uint32_t device; uint32_t msg; };
  std::vector<std::pair<uint64_t, Op>> ops;
  std::vector<std::pair<uint64_t, std::pair<uint64_t, uint32_t>>> live;  // addr -> (bytes, dev)
  int depth[4] = {0, 0, 0, 0};
  uint64_t next_address = 0x1000;
  for (uint64_t ts = 1000; ts < 4000; ts += 1 + rng() % 5) {
    const uint32_t thread = rng() % 4;  // 0: unknown thread
    const unsigned r = rng() % 100;
    if (r < 8 && thread != 0) {
      ops.push_back({ts, {0, thread, 0, 0, 0, 1 + static_cast<uint32_t>(rng() % 3)}});
      ++depth[thread];
    } else if (r < 16 && thread != 0 && depth[thread] > 0) {
      ops.push_back({ts, {1, thread, 0, 0, 0, 0}});
      --depth[thread];
    } else if (r < 50 && !live.empty()) {
      const size_t i = rng() % live.size();
      ops.push_back({ts, {3, thread, live[i].first, live[i].second.first, live[i].second.second, 0}});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (r < 55) {
      ops.push_back({ts, {4, thread, 0, 0, static_cast<uint32_t>(rng() % 2), 0}});
    } else {
      const uint64_t bytes = 1 + rng() % 100000;
      const uint32_t device = rng() % 2;
      ops.push_back({ts, {2, thread, next_address, bytes, device, 0}});
      live.push_back({next_address, {bytes, device}});
      next_address += 0x100000;
    }
  }
  auto build = [](const std::vector<std::pair<uint64_t, Op>>& in) {
    StreamBuilder s = WithStrings();
    size_t n = 0;
    for (const auto& [ts, op] : in) {
      switch (op.what) {
        case 0: s.Push(ts, op.thread, op.msg); break;
        case 1: s.Pop(ts, op.thread); break;
        case 2: s.Alloc(ts, op.device, op.address, op.bytes, testing::kDevice, op.thread); break;
        case 3: s.Free(ts, op.device, op.address, op.bytes, testing::kDevice, op.thread); break;
        case 4: s.Kernel(ts, ts + 3, op.device, op.thread); break;
      }
      if (++n % 37 == 0) s.Flush();
    }
    return SummaryJson(*Analyze(s.Chunks()));
  };
  const std::string sorted = build(ops);
  std::shuffle(ops.begin(), ops.end(), rng);
  EXPECT_EQ(build(ops), sorted);
  EXPECT_NE(sorted.find("\"phases\""), std::string::npos);
}

TEST(Exit, LauncherExitBeatsProcessExit) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 1).Exit(50, 0).LauncherExit(0, 9);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_EQ(p.exit.source, ExitStatus::Source::kLauncher);
  EXPECT_EQ(p.exit.signal, 9);
  EXPECT_TRUE(p.complete);
}

TEST(Exit, ProcessExitAloneComesFromTheTracer) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 1).Exit(50, 3).Closed(v1::CLOSE_REASON_EOF);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_EQ(p.exit.source, ExitStatus::Source::kTracer);
  EXPECT_EQ(p.exit.code, 3);
  EXPECT_TRUE(p.complete);
  EXPECT_TRUE(p.incomplete_reasons.empty());
}

TEST(Exit, NoExitRecordOrAProtocolErrorMakesTheProcessIncomplete) {
  StreamBuilder a = WithStrings(1, 100);
  a.Alloc(10, 0, 0x1, 1);
  StreamBuilder b = WithStrings(2, 200);
  b.Alloc(10, 0, 0x1, 1).Exit(20, 0).Closed(v1::CLOSE_REASON_PROTOCOL_ERROR, "frame too long");
  auto report = Analyze(Concat({a.Chunks(), b.Chunks()}));
  ASSERT_EQ(report->processes.size(), 2u);
  const ProcessReport& pa = report->processes[0];
  EXPECT_EQ(pa.pid, 100u);
  EXPECT_EQ(pa.exit.source, ExitStatus::Source::kUnknown);
  EXPECT_FALSE(pa.complete);
  ASSERT_EQ(pa.incomplete_reasons.size(), 1u);
  EXPECT_EQ(pa.incomplete_reasons[0], "ended without an exit record");
  const ProcessReport& pb = report->processes[1];
  EXPECT_FALSE(pb.complete);
  ASSERT_EQ(pb.incomplete_reasons.size(), 1u);
  EXPECT_NE(pb.incomplete_reasons[0].find("protocol error: frame too long"), std::string::npos);
}

TEST(Stream, UnparseableFrameMarksTheStreamDamagedAndTheRestStillCounts) {
  StreamBuilder s = WithStrings();
  s.Alloc(10, 0, 0x1, 100).GarbageFrame().Alloc(20, 0, 0x2, 200);
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = OnlyProcess(report);
  EXPECT_TRUE(p.damaged);
  EXPECT_EQ(p.damage.size(), 1u);
  EXPECT_EQ(p.devices.at(0).peak.bytes, 300u);
}

TEST(Stream, InterleavedStreamsAreSeparateProcesses) {
  StreamBuilder a = WithStrings(1, 100);
  StreamBuilder b = WithStrings(2, 200);
  a.Alloc(10, 0, 0x1, 100);
  b.Alloc(10, 0, 0x1, 999);  // same address, other process: no clash
  auto ca = a.Chunks();
  auto cb = b.Chunks();
  std::vector<v1::TraceChunk> mixed;
  for (size_t i = 0; i < std::max(ca.size(), cb.size()); ++i) {
    if (i < ca.size()) mixed.push_back(ca[i]);
    if (i < cb.size()) mixed.push_back(cb[i]);
  }
  auto report = Analyze(mixed);
  ASSERT_EQ(report->processes.size(), 2u);
  EXPECT_EQ(report->processes[0].devices.at(0).peak.bytes, 100u);
  EXPECT_EQ(report->processes[1].devices.at(0).peak.bytes, 999u);
  EXPECT_EQ(report->processes[1].devices.at(0).reallocated_live_address, 0u);
  EXPECT_EQ(report->processes[1].allocator_mode, "async");
  EXPECT_EQ(report->processes[1].pytorch_alloc_conf, "backend:cudaMallocAsync");
}

}  // namespace
}  // namespace cumemtrace
