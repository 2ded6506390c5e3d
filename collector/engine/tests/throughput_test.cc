// Decode + sweep throughput on a synthetic training-like trace. Disabled by default (timing
// has no place in a unit run); run with --gtest_also_run_disabled_tests to measure.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <iostream>

#include "collector/engine/engine.h"
#include "collector/format/trace_file.h"
#include "collector/engine/tests/trace_builder.h"

namespace cumemtrace {
namespace {

TEST(Throughput, DISABLED_DecodeAndSweep) {
  // CUMEMTRACE_BENCH_EVENTS overrides the size.
  const char* env = std::getenv("CUMEMTRACE_BENCH_EVENTS");
  const uint64_t kEvents = env != nullptr ? std::stoull(env) : 10'000'000;
  testing::StreamBuilder s(1, 1);
  s.String(1, "step").String(2, "forward").String(3, "cudaMallocAsync").Device(0, "GPU", 80ull << 30);
  uint64_t ts = 1000, next = 0x7f0000000000;
  std::vector<uint64_t> live;
  for (uint64_t i = 0; i < kEvents; ++i, ts += 10) {
    const uint32_t thread = 1 + static_cast<uint32_t>(i % 3);
    if (i % 1000 == 0) {
      s.Push(ts, 1, 1 + static_cast<uint32_t>((i / 1000) % 2));
    } else if (i % 1000 == 999) {
      s.Pop(ts, 1);
    } else if (i % 5 == 4) {
      s.Kernel(ts, ts + 5, 0, thread);
    } else if (live.size() > 2000 || (live.size() > 10 && i % 2 == 0)) {
      const uint64_t address = live[(i * 7919) % live.size()];
      live[(i * 7919) % live.size()] = live.back();
      live.pop_back();
      s.Free(ts, 0, address, 4096, testing::kDevice, thread);
    } else {
      s.Alloc(ts, 0, next, 4096, testing::kDevice, thread, 3);
      live.push_back(next);
      next += 4096;
    }
    if (i % 4096 == 4095) s.Flush();
  }
  const std::vector<v1::TraceChunk> chunks = s.Chunks();
  std::string bytes(TraceFilePreamble());
  for (const v1::TraceChunk& chunk : chunks) AppendChunk(chunk, &bytes);
  AnalysisOptions sorted;
  sorted.sorted = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = std::move(Analyze({"", bytes}, sorted, nullptr)->report);
  const auto t1 = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  std::cout << "decode+sort+sweep " << seconds << " s, "
            << static_cast<double>(kEvents) / seconds / 1e6 << " M events/s\n";
  ASSERT_EQ(report->processes.size(), 1u);
  EXPECT_GT(report->processes[0].devices.at(0).peak.bytes, 0u);
}

}  // namespace
}  // namespace cumemtrace
