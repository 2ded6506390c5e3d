// Traces recorded on an H100, replayed without a GPU: the analysis must agree with what each
// program measured about itself in the same run (files beside the traces).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "collector/engine/engine.h"

namespace cumemtrace {
namespace {

const std::string kGolden = CUMEMTRACE_GOLDEN_DIR;

nlohmann::json Load(const std::string& name) {
  std::ifstream in(kGolden + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

std::unique_ptr<Report> Analyze(const std::string& trace) {
  std::string error;
  auto analyzed = cumemtrace::Analyze({kGolden + "/" + trace, {}}, AnalysisOptions{}, &error);
  EXPECT_NE(analyzed, nullptr) << error;
  return analyzed == nullptr ? nullptr : std::move(analyzed->report);
}

// The traced program's process (interpreters may start helpers of their own).
const ProcessReport& Program(const Report& report, const std::string& argv_part) {
  for (const ProcessReport& p : report.processes) {
    for (size_t i = 0; i < p.command_line.size() && i < 2; ++i) {
      if (p.command_line[i].find(argv_part) != std::string::npos) return p;
    }
  }
  ADD_FAILURE() << "no process running " << argv_part;
  return report.processes.at(0);
}

const PhaseDeviceStats& PhaseOnDevice0(const ProcessReport& p, const std::string& name) {
  for (const PhaseReport& phase : p.phases) {
    if (phase.name != name) continue;
    for (const PhaseDeviceStats& d : phase.devices) {
      if (d.index == 0) return d;
    }
  }
  ADD_FAILURE() << "no phase " << name << " on device 0";
  static const PhaseDeviceStats none;
  return none;
}

TEST(GoldenCudaPhases, EveryFigureToTheByte) {
  const nlohmann::json expected = Load("cuda_phases.expected.json");
  const uint64_t w = expected["weights_bytes"], pool = expected["pool_bytes"],
                 scratch = expected["scratch_bytes"], vmm = expected["vmm_bytes"];
  auto report = Analyze("cuda_phases.cmtrace");
  ASSERT_NE(report, nullptr);
  EXPECT_FALSE(report->truncated);
  const ProcessReport& p = Program(*report, "cuda_phases");
  EXPECT_EQ(p.exit.code, 4);
  ASSERT_FALSE(p.devices.empty());
  const DeviceReport& d = p.devices[0];
  EXPECT_EQ(d.peak.bytes, std::max(w + pool + scratch, w + pool + vmm));
  EXPECT_EQ(d.by_kind.at("PINNED").allocated_bytes, expected["pinned_bytes"].get<uint64_t>());
  EXPECT_EQ(d.by_kind.at("MANAGED").allocated_bytes, expected["managed_bytes"].get<uint64_t>());
  EXPECT_EQ(d.live_at_exit_bytes, 0u);
  EXPECT_EQ(PhaseOnDevice0(p, "setup").allocated_bytes, w);
  EXPECT_EQ(PhaseOnDevice0(p, "async").allocated_bytes, pool + scratch);
  EXPECT_EQ(PhaseOnDevice0(p, "async").freed_bytes, scratch);
  EXPECT_EQ(PhaseOnDevice0(p, "async").bytes_at_entry, w);
  EXPECT_EQ(PhaseOnDevice0(p, "async").peak_above_entry_bytes, pool + scratch);
  EXPECT_EQ(PhaseOnDevice0(p, "vmm").allocated_bytes, vmm);
  EXPECT_EQ(PhaseOnDevice0(p, "teardown").freed_bytes, w + pool + vmm);
  ASSERT_EQ(p.failed_allocations.size(), 1u);
  const FailedAllocationReport& f = p.failed_allocations[0];
  EXPECT_EQ(f.api, "cudaMalloc");
  EXPECT_EQ(f.requested_bytes, expected["oversized_bytes"].get<uint64_t>());
  EXPECT_EQ(f.phase, "oom");
  EXPECT_EQ(f.caller, "cuda_phases");
  EXPECT_EQ(f.device_total_bytes, expected["total_bytes"].get<uint64_t>());
}

// PyTorch's counters see its own allocator only; cuBLAS's workspaces are in the device peak.
void ExpectAllocatorMatchesPyTorch(const std::string& trace, const std::string& stats_file,
                                   const std::string& argv_part, bool async) {
  const nlohmann::json stats = Load(stats_file);
  auto report = Analyze(trace);
  ASSERT_NE(report, nullptr);
  const ProcessReport& p = Program(*report, argv_part);
  EXPECT_EQ(p.allocator_mode, async ? "async" : "native");
  ASSERT_FALSE(p.devices.empty());
  const DeviceReport& d = p.devices[0];
  if (async) {
    EXPECT_EQ(d.by_api.at("cudaMallocAsync").peak_bytes,
              stats["max_memory_allocated"].get<uint64_t>());
  } else {
    EXPECT_EQ(d.by_library.at("libc10_cuda.so").peak_bytes,
              stats["max_memory_reserved"].get<uint64_t>());
  }
  uint64_t shares = 0;
  for (const auto& [library, s] : d.by_library) shares += s.live_at_peak_bytes;
  EXPECT_EQ(shares, d.peak.bytes);
  for (const char* phase : {"forward", "backward", "optimizer"}) {
    bool found = false;
    for (const PhaseReport& r : p.phases) found |= r.name == phase && r.occurrences == 5;
    EXPECT_TRUE(found) << phase;
  }
}

TEST(GoldenTorch, AsyncAllocatorPeakEqualsMaxMemoryAllocated) {
  ExpectAllocatorMatchesPyTorch("torch_async.cmtrace", "torch_async.stats.json", "torch_train.py",
                                true);
}

TEST(GoldenTorch, NativeSegmentsPeakEqualsMaxMemoryReserved) {
  ExpectAllocatorMatchesPyTorch("torch_native.cmtrace", "torch_native.stats.json",
                                "torch_train.py", false);
}

TEST(GoldenLibTorch, NativeSegmentsPeakEqualsMaxMemoryReserved) {
  ExpectAllocatorMatchesPyTorch("libtorch_native.cmtrace", "libtorch_native.stats.json",
                                "libtorch_train", false);
}

// The program reset the allocator's cumulative counters right after a tensor that took a
// whole unsplit 16 MiB segment (bridge_program.py --reset-accumulated): the block's size
// comes from the current counter, and the tensor peak is PyTorch's to the byte.
TEST(GoldenTorch, ResetAccumulatedStatsKeepsTheTensorPeakExact) {
  const nlohmann::json stats = Load("torch_reset_accumulated.stats.json");
  auto report = Analyze("torch_reset_accumulated.cmtrace");
  ASSERT_NE(report, nullptr);
  const ProcessReport& p = Program(*report, "bridge_program.py");
  EXPECT_TRUE(p.torch.attached);
  EXPECT_EQ(p.torch.estimated_block_sizes, 0u);
  EXPECT_EQ(p.torch.counter_mismatches, 0u);
  ASSERT_FALSE(p.devices.empty());
  EXPECT_EQ(p.devices[0].torch.allocated_peak_bytes, stats["max_memory_allocated"].get<uint64_t>());
  EXPECT_EQ(p.devices[0].torch.reserved_peak_bytes, stats["max_memory_reserved"].get<uint64_t>());
}

TEST(GoldenTorch, KilledBySignalIsReportedFromTheLauncher) {
  auto report = Analyze("torch_sigterm.cmtrace");
  ASSERT_NE(report, nullptr);
  const ProcessReport& p = Program(*report, "torch_train.py");
  EXPECT_EQ(p.exit.signal, 15);
  EXPECT_EQ(p.exit.source, ExitStatus::Source::kLauncher);
  ASSERT_FALSE(p.devices.empty());
  EXPECT_GT(p.devices[0].peak.bytes, 0u);
}

}  // namespace
}  // namespace cumemtrace
