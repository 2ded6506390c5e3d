// One analysis, several orders and retention policies (trace_analysis.h): the reorder window
// with the bounded live set (what `cumemtrace report` runs) must write the report that
// sorting every event writes, whatever order the batches arrive in and whatever the window's
// size, as long as nothing arrives later than it; keeping every allocation (the exports)
// changes nothing either. Events too late for the window are counted, and what the bounded
// analysis holds stays bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/engine/trace_analysis.h"
#include "collector/format/trace_file.h"
#include "collector/output/summary.h"

namespace cumemtrace::testing {
namespace {

using internal::Mode;
using internal::Retention;
using internal::StreamingOptions;
using internal::StreamingStats;

std::string InMemoryJson(const std::vector<v1::TraceChunk>& chunks, const AnalysisOptions& o) {
  return SummaryJson(*Analyze(chunks, o));
}

// The analysis of `chunks` in `mode`; *stats per stream id.
std::unique_ptr<Report> AnalyzeIn(const std::vector<v1::TraceChunk>& chunks, Mode mode,
                            const AnalysisOptions& options = AnalysisOptions(),
                            const StreamingOptions& window = StreamingOptions(),
                            std::map<uint32_t, StreamingStats>* stats = nullptr) {
  const std::string bytes = FileBytes(chunks);
  std::string error;
  auto trace = internal::AnalyzeBytes(bytes, options, mode, window, stats, &error);
  EXPECT_NE(trace, nullptr) << error;
  return trace == nullptr ? nullptr : std::move(trace->report);
}

std::string StreamingJson(const std::vector<v1::TraceChunk>& chunks, const AnalysisOptions& o) {
  std::string error;
  auto report = AnalyzeIn(chunks, internal::Mode(), o);
  return report == nullptr ? std::string() : SummaryJson(*report);
}

// Every chunk of a trace file's bytes.
std::vector<v1::TraceChunk> ChunksOf(const std::string& path) {
  std::vector<v1::TraceChunk> chunks;
  TraceFileReader reader;
  EXPECT_TRUE(reader.Open(path)) << reader.error();
  v1::TraceChunk chunk;
  while (reader.Next(&chunk) == TraceFileReader::Result::kChunk) chunks.push_back(chunk);
  return chunks;
}

v1::Event ThreadNameEvent(uint32_t tid, const std::string& name) {
  v1::Event e;
  e.mutable_thread_name()->set_thread_id(tid);
  e.mutable_thread_name()->set_name(name);
  return e;
}

TEST(OrderAndRetention, GoldenTracesGiveTheInMemoryReport) {
  for (const char* name : {"cuda_phases", "torch_async", "torch_native", "libtorch_native",
                           "torch_sigterm"}) {
    const std::string path = std::string(CUMEMTRACE_GOLDEN_DIR) + "/" + name + ".cmtrace";
    const std::vector<v1::TraceChunk> chunks = ChunksOf(path);
    for (bool infer : {true, false}) {
      AnalysisOptions options;
      options.infer_phases = infer;  // without inference, the torch traces stream too
      std::string error;
      auto streamed = AnalyzeFile(path, options, &error);
      ASSERT_NE(streamed, nullptr) << error;
      auto in_memory = Analyze(chunks, options);
      in_memory->trace_file = path;
      EXPECT_EQ(SummaryJson(*streamed), SummaryJson(*in_memory)) << name << " infer=" << infer;
      std::ostringstream a, b;
      PrintSummaryText(*streamed, a);
      PrintSummaryText(*in_memory, b);
      EXPECT_EQ(a.str(), b.str()) << name;
      for (const ProcessReport& p : streamed->processes) EXPECT_EQ(p.late_events, 0u) << name;
      // A quarter of the window (RealTracesArriveWellInsideTheWindow), and every allocation
      // kept: the same report.
      StreamingOptions quarter;
      quarter.window_ns /= 4;
      for (Retention retention : {Retention::kLiveAndPeak, Retention::kKeepAll}) {
        auto other = AnalyzeIn(chunks, Mode{false, retention}, options, quarter);
        other->trace_file = path;
        EXPECT_EQ(SummaryJson(*other), SummaryJson(*in_memory)) << name << " infer=" << infer;
      }
    }
  }
}

TEST(OrderAndRetention, RealTracesArriveWellInsideTheWindow) {
  // The window is decided from the data: the recorded programs' events arrive at most this
  // late (host records and CUPTI buffers are sent in turns), far inside the default window.
  for (const char* name : {"cuda_phases", "torch_async", "torch_native", "libtorch_native"}) {
    const std::string path = std::string(CUMEMTRACE_GOLDEN_DIR) + "/" + name + ".cmtrace";
    AnalysisOptions options;
    options.infer_phases = false;
    std::map<uint32_t, StreamingStats> stats;
    AnalyzeIn(ChunksOf(path), Mode(), options, StreamingOptions(), &stats);
    for (const auto& [id, s] : stats) {
      EXPECT_LT(s.max_lateness_ns, StreamingOptions().window_ns / 4) << name;
    }
  }
}

// A random program: allocations and frees (addresses reused, some frees lost, some never
// seen allocated), several kinds and devices (one first seen late, one with a large index),
// nested NVTX ranges and start/end ranges on two threads, kernels, marks and failures. Host
// records and "CUPTI" records go out in separate batches, CUPTI ones a few drains late, as the
// tracer's sender does; timestamps are coarse so that many tie.
std::vector<v1::TraceChunk> RandomTrace(uint32_t seed, size_t steps, uint64_t step_ns,
                                        int drains_late) {
  std::mt19937 rng(seed);
  StreamBuilder b(1, 100 + seed);
  b.String(1, "forward").String(2, "backward").String(3, "optimizer").String(4, "step");
  b.String(5, "cudaMallocAsync").String(6, "libfoo.so").String(7, "cudaErrorMemoryAllocation");
  b.String(8, "gemm").Device(0, "GPU0", 80ull << 30).Device(1, "GPU1", 80ull << 30);
  b.Raw(ThreadNameEvent(11, "python3")).Raw(ThreadNameEvent(12, "worker"));
  b.TracerMemory(0, 1 << 20);
  b.Flush();
  struct Pending {
    int type;  // 0 alloc, 1 free, 2 kernel, 3 failed
    uint64_t ts, address, bytes;
    uint32_t device, kind, thread;
  };
  std::vector<std::vector<Pending>> cupti(1);
  std::vector<std::pair<uint64_t, uint64_t>> live;  // address, bytes (device 0 or 1 encoded)
  std::vector<int> open_push(2, 0);
  std::vector<uint64_t> open_ranges;
  uint64_t next_range = 1;
  uint64_t ts = 1'000'000'000;
  const uint32_t kinds[] = {kDevice, kDevice, kDevice, v1::MEMORY_KIND_ARRAY,
                            v1::MEMORY_KIND_PINNED, v1::MEMORY_KIND_DEVICE_STATIC};
  for (size_t i = 0; i < steps; ++i) {
    ts += rng() % 3 == 0 ? 0 : step_ns * (1 + rng() % 3);
    const uint32_t thread = 11 + rng() % 2;
    const uint32_t r = rng() % 100;
    const uint32_t device = i > steps / 2 && rng() % 5 == 0 ? (rng() % 2 ? 2 : 5000) : rng() % 2;
    if (r < 8) {
      b.Push(ts, thread, 1 + rng() % 4);
      ++open_push[thread - 11];
    } else if (r < 15) {
      b.Pop(ts, thread);  // sometimes on an empty stack
      if (open_push[thread - 11] > 0) --open_push[thread - 11];
    } else if (r < 18) {
      b.Start(ts, thread, 1 + rng() % 4, next_range);
      open_ranges.push_back(next_range++);
    } else if (r < 21 && !open_ranges.empty()) {
      const size_t k = rng() % open_ranges.size();
      b.End(ts, thread, open_ranges[k]);
      open_ranges.erase(open_ranges.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (r < 22) {
      b.Mark(ts, thread, 4);
    } else if (r < 55) {
      const uint64_t address = 0x10000 * (1 + rng() % 40);  // often a live one: lost frees
      const uint64_t bytes = (1 + rng() % 8) << 20;
      cupti.back().push_back({0, ts, address, bytes, device, kinds[rng() % 6], thread});
      live.emplace_back(address, bytes);
    } else if (r < 85 && !live.empty()) {
      const size_t k = rng() % live.size();
      cupti.back().push_back(
          {1, ts, live[k].first, live[k].second, device, kinds[rng() % 6], thread});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (r < 88) {
      cupti.back().push_back({1, ts, 0x990000 + rng() % 4, 4096, device, kDevice, thread});
    } else if (r < 98) {
      cupti.back().push_back({2, ts, 0, 0, device, 0, thread});
    } else {
      cupti.back().push_back({3, ts, 0, 1ull << 40, device, kDevice, thread});
    }
    if (rng() % 40 == 0) {
      // A drain: host records so far, then the CUPTI records of `drains_late` drains ago.
      b.Flush();
      if (cupti.size() > static_cast<size_t>(drains_late)) {
        for (const Pending& p : cupti.front()) {
          switch (p.type) {
            case 0: b.Alloc(p.ts, p.device, p.address, p.bytes, p.kind, p.thread, 5, p.thread == 12 ? 6 : 0); break;
            case 1: b.Free(p.ts, p.device, p.address, p.bytes, p.kind, p.thread); break;
            case 2: b.Kernel(p.ts, p.ts + 5000, p.device, p.thread, 8); break;
            default: b.Failed(p.ts, p.device, p.thread, p.bytes, 2, 5, 7, 1 << 20, 80ull << 30);
          }
        }
        b.Flush();
        cupti.erase(cupti.begin());
      }
      cupti.emplace_back();
    }
  }
  b.Flush();
  for (const std::vector<Pending>& batch : cupti) {
    for (const Pending& p : batch) {
      if (p.type == 0) b.Alloc(p.ts, p.device, p.address, p.bytes, p.kind, p.thread, 5);
      if (p.type == 1) b.Free(p.ts, p.device, p.address, p.bytes, p.kind, p.thread);
      if (p.type == 2) b.Kernel(p.ts, p.ts + 5000, p.device, p.thread, 8);
    }
    b.Flush();
  }
  b.Dropped(v1::DROP_SOURCE_CUPTI, 3, ts - 1000, ts - 500);
  b.Exit(ts + 10, 0);
  b.LauncherExit(0, 0).Closed(v1::CLOSE_REASON_EOF);
  return b.Chunks();
}

TEST(OrderAndRetention, RandomOutOfOrderTracesGiveTheInMemoryReport) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const std::vector<v1::TraceChunk> chunks = RandomTrace(seed, 3000, 1000, 1 + seed % 3);
    AnalysisOptions options;
    options.top_allocations = 3 + seed % 5;
    const std::string expected = InMemoryJson(chunks, options);
    EXPECT_EQ(StreamingJson(chunks, options), expected) << "seed " << seed;
    EXPECT_EQ(expected.find("late_events"), std::string::npos);
  }
}

TEST(OrderAndRetention, ShuffledBatchesGiveTheInMemoryReport) {
  // Each batch in random order: the window splits into many runs and has to merge them.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    struct Step {
      int what;
      uint64_t ts, address, bytes;
    };
    std::vector<Step> steps;
    std::vector<uint64_t> live;
    uint64_t ts = 1000;
    for (int i = 0; i < 6000; ++i) {
      ts += rng() % 4;
      const uint32_t r = rng() % 10;
      if (r < 1) {
        steps.push_back({2, ts, 0, 0});
      } else if (r < 2) {
        steps.push_back({3, ts, 0, 0});
      } else if (r < 6 || live.empty()) {
        live.push_back(0x1000 * (1 + rng() % 500));
        steps.push_back({0, ts, live.back(), 1 + rng() % 1000});
      } else {
        const size_t k = rng() % live.size();
        steps.push_back({1, ts, live[k], 0});
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    StreamBuilder b(1, 42);
    b.String(1, "layer");
    for (size_t at = 0; at < steps.size(); at += 300) {
      std::vector<Step> batch(steps.begin() + static_cast<std::ptrdiff_t>(at),
                              steps.begin() + static_cast<std::ptrdiff_t>(std::min(at + 300, steps.size())));
      std::shuffle(batch.begin(), batch.end(), rng);
      for (const Step& st : batch) {
        if (st.what == 0) b.Alloc(st.ts, 0, st.address, st.bytes, kDevice, 1);
        if (st.what == 1) b.Free(st.ts, 0, st.address, 0, kDevice, 1);
        if (st.what == 2) b.Push(st.ts, 1, 1);
        if (st.what == 3) b.Pop(st.ts, 1);
      }
      b.Flush();
    }
    const std::vector<v1::TraceChunk> chunks = b.Chunks();
    EXPECT_EQ(StreamingJson(chunks, AnalysisOptions()), InMemoryJson(chunks, AnalysisOptions()))
        << "seed " << seed;
    std::map<uint32_t, StreamingStats> stats;
    AnalyzeIn(chunks, Mode(), AnalysisOptions(), StreamingOptions(), &stats);
    EXPECT_GE(stats.at(1).max_runs, 20u);  // the merge of many runs was exercised
  }
}

TEST(OrderAndRetention, TwoProcessesInterleavedGiveTheInMemoryReport) {
  std::vector<v1::TraceChunk> a = RandomTrace(7, 2000, 1000, 2);
  std::vector<v1::TraceChunk> b = RandomTrace(8, 2000, 1000, 1);
  for (v1::TraceChunk& c : b) c.set_stream_id(2);
  std::vector<v1::TraceChunk> both;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) both.push_back(a[i]);
    if (i < b.size()) both.push_back(b[i]);
  }
  EXPECT_EQ(StreamingJson(both, AnalysisOptions()), InMemoryJson(both, AnalysisOptions()));
}

TEST(OrderAndRetention, AnAutogradThreadNamedAfterItsEventsGivesTheInMemoryReport) {
  StreamBuilder b(1, 42);
  b.Raw(ThreadNameEvent(1, "python3"));
  for (uint64_t k = 0; k < 3; ++k) {
    const uint64_t t = 1000000 * (k + 1);
    b.Alloc(t, 0, 0x1000, 100, kDevice, 1).Alloc(t + 10, 0, 0x2000, 100, kDevice, 1);
    b.Alloc(t + 100, 0, 0x3000, 50, kDevice, 2).Free(t + 110, 0, 0x1000, 100, kDevice, 2);
    b.Free(t + 300, 0, 0x3000, 50, kDevice, 1).Free(t + 310, 0, 0x2000, 100, kDevice, 1);
    b.Flush();
  }
  b.Raw(ThreadNameEvent(2, "pt_autograd_0"));  // named only after its events
  b.Exit(9000000, 0);
  const std::vector<v1::TraceChunk> chunks = b.Chunks();
  const std::string json = StreamingJson(chunks, AnalysisOptions());
  EXPECT_EQ(json, InMemoryJson(chunks, AnalysisOptions()));
  EXPECT_NE(json.find("\"applied\": true"), std::string::npos) << json;
}

// A PyTorch-like program without NVTX: the calling thread (1) runs forward and the
// optimizer, the autograd thread (2) the backward pass; gradients are freed by zero_grad.
// With `memory_signal` false the autograd thread only launches kernels (caching allocator).
std::vector<v1::TraceChunk> UnlabeledTrace(uint32_t seed, bool memory_signal, int drains_late) {
  std::mt19937 rng(seed);
  StreamBuilder b(1, 7);
  b.Raw(ThreadNameEvent(1, "python3")).Raw(ThreadNameEvent(2, "pt_autograd_0"));
  b.Raw(ThreadNameEvent(3, "dataloader"));
  b.Flush();
  std::vector<std::vector<std::function<void()>>> cupti(1);
  uint64_t t = 1'000'000'000;
  auto later = [&](std::function<void()> f) { cupti.back().push_back(std::move(f)); };
  for (int w = 0; w < 4; ++w) {
    const uint64_t ts = t += 1000;
    later([&b, ts, w] { b.Alloc(ts, 0, 0x100000 + 0x1000 * w, 4096, kDevice, 1); });
  }
  const int iterations = 3 + static_cast<int>(rng() % 6);
  for (int k = 0; k < iterations; ++k) {
    const int layers = 2 + static_cast<int>(rng() % 5);
    for (int l = 0; l < layers; ++l) {  // forward
      const uint64_t ts = t += 1000 + rng() % 3000;
      later([&b, ts, l] { b.Alloc(ts, 0, 0x200000 + 0x1000 * l, 1024, kDevice, 1); });
      later([&b, ts] { b.Kernel(ts + 100, ts + 900, 0, 1); });
      if (rng() % 4 == 0) {
        const uint64_t tsd = t += 10;
        later([&b, tsd] { b.Alloc(tsd, 0, 0x900000, 64, kDevice, 3); b.Free(tsd + 5, 0, 0x900000, 64, kDevice, 3); });
      }
    }
    for (int l = layers; l-- > 0;) {  // backward on the autograd thread
      const uint64_t ts = t += 1000 + rng() % 3000;
      if (memory_signal) {
        later([&b, ts, l] { b.Alloc(ts, 0, 0x400000 + 0x1000 * l, 512, kDevice, 2); });
        later([&b, ts, l] { b.Free(ts + 200, 0, 0x200000 + 0x1000 * l, 1024, kDevice, 2); });
      } else {
        later([&b, ts, l] { b.Free(ts + 200, 0, 0x200000 + 0x1000 * l, 1024, kDevice, 1); });
      }
      later([&b, ts] { b.Kernel(ts + 300, ts + 800, 0, 2); });
    }
    t += 5000;
    for (int l = 0; l < layers; ++l) {  // optimizer on the calling thread
      const uint64_t ts = t += 1000 + rng() % 2000;
      later([&b, ts] { b.Kernel(ts, ts + 500, 0, 1); });
      if (memory_signal) later([&b, ts, l] { b.Free(ts + 100, 0, 0x400000 + 0x1000 * l, 512, kDevice, 1); });
    }
    if (rng() % 2 == 0) {
      b.Flush();
      if (cupti.size() > static_cast<size_t>(drains_late)) {
        for (auto& f : cupti.front()) f();
        b.Flush();
        cupti.erase(cupti.begin());
      }
      cupti.emplace_back();
    }
  }
  b.Flush();
  for (auto& batch : cupti) {
    for (auto& f : batch) f();
    b.Flush();
  }
  b.Exit(t + 1000, 0);
  return b.Chunks();
}

TEST(OrderAndRetention, InferredPhasesGiveTheInMemoryReport) {
  int applied = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    for (bool memory_signal : {true, false}) {
      const std::vector<v1::TraceChunk> chunks = UnlabeledTrace(seed, memory_signal, 1 + seed % 2);
      const std::string json = StreamingJson(chunks, AnalysisOptions());
      EXPECT_EQ(json, InMemoryJson(chunks, AnalysisOptions())) << "seed " << seed;
      applied += json.find("\"applied\": true") != std::string::npos ? 1 : 0;
      // Sorted, the passes read the process again as the window's do: the same report.
      auto sorted = AnalyzeIn(chunks, Mode{true, Retention::kKeepAll});
      EXPECT_EQ(SummaryJson(*sorted), json) << "seed " << seed;
      EXPECT_TRUE(sorted->processes.at(0).phase_inference.applied);
    }
  }
  EXPECT_EQ(applied, 24);
}

TEST(OrderAndRetention, AnEventOlderThanTheWindowIsCountedAndStillAccounted) {
  StreamBuilder b(1, 42);
  b.String(1, "forward");
  const uint64_t s = 1'000'000'000;
  b.Alloc(s, 0, 0x1000, 100).Push(s + 1, 1, 1).Free(s + 2, 0, 0x1000, 100);
  b.Alloc(s + 5 * s, 0, 0x2000, 10);  // 5 s later: everything before 4 s leaves the window
  b.Flush();
  b.Alloc(s + 1, 0, 0x3000, 1000);  // arrives after the sweep passed s + 2: late
  b.Flush();
  b.Exit(s + 6 * s, 0);
  std::string error;
  auto report = AnalyzeIn(b.Chunks(), internal::Mode());
  ASSERT_NE(report, nullptr) << error;
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.late_events, 1u);
  EXPECT_EQ(p.events, 5u);
  // Applied where it arrived: after the 10-byte allocation, so the peak is both.
  EXPECT_EQ(p.devices.at(0).peak.bytes, 1010u);
  EXPECT_NE(SummaryJson(*report).find("\"late_events\": 1"), std::string::npos);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  EXPECT_NE(text.str().find("1 event arrived later than the reorder window"), std::string::npos)
      << text.str();
}

TEST(OrderAndRetention, AFullWindowLetsItsOldestEventsGoAndCountsWhatComesLater) {
  AnalysisOptions options;
  StreamingOptions small;
  small.max_window_events = 100;
  StreamBuilder b(1, 42);
  for (uint64_t i = 0; i < 1000; ++i) b.Alloc(1000 + 2 * i, 0, 0x1000 + 16 * i, 1);
  b.Flush();
  b.Free(1001, 0, 0x1000, 1);  // older than what the full window had to let go
  b.Flush();
  std::map<uint32_t, StreamingStats> stats;
  auto report = AnalyzeIn(b.Chunks(), Mode(), options, small, &stats);
  EXPECT_LE(stats.at(1).max_window_events, 101u);
  EXPECT_EQ(report->processes.at(0).late_events, 1u);
  // The free is applied where it arrived, before the 100 allocations still waiting.
  EXPECT_EQ(report->processes.at(0).devices.at(0).peak.bytes, 999u);
}

// What the analysis holds must not grow with the trace: a training-like loop run for longer
// holds as much as a short one.
StreamingStats LoopStats(uint64_t iterations) {
  StreamBuilder b(1, 42);
  b.String(1, "forward").String(2, "backward");
  uint64_t t = 1'000'000'000;
  for (int w = 0; w < 8; ++w) b.Alloc(t++, 0, 0x100000 + 0x1000 * w, 1 << 20, kDevice, 1);
  for (uint64_t k = 0; k < iterations; ++k) {
    b.Push(t++, 1, 1);
    for (int l = 0; l < 16; ++l) b.Alloc(t++, 0, 0x200000 + 0x1000 * l, 1 << (l % 8), kDevice, 1);
    b.Pop(t, 1).Push(t + 1, 1, 2);
    t += 2;
    for (int l = 16; l-- > 0;) b.Free(t++, 0, 0x200000 + 0x1000 * l, 1 << (l % 8), kDevice, 1);
    b.Pop(t++, 1);
    t += 1'000'000;  // 1 ms an iteration: the default window holds about 1000 of them
    if (k % 10 == 9) b.Flush();
  }
  std::map<uint32_t, StreamingStats> stats;
  auto report = AnalyzeIn(b.Chunks(), Mode(), AnalysisOptions(), StreamingOptions(), &stats);
  EXPECT_EQ(report->processes.at(0).devices.at(0).peak.live_count, 24u);
  return stats.at(1);
}

TEST(OrderAndRetention, WhatItHoldsDoesNotGrowWithTheTrace) {
  const StreamingStats small = LoopStats(2000);
  const StreamingStats large = LoopStats(8000);
  EXPECT_EQ(large.max_live, small.max_live);
  EXPECT_LE(large.max_live, 24u);
  EXPECT_LE(large.max_kept_at_peak, 24u);
  EXPECT_EQ(large.max_window_events, small.max_window_events);
  EXPECT_LT(large.max_window_events, 40'000u);  // about a second of this program
  EXPECT_LE(large.max_runs, 2u);
}

}  // namespace
}  // namespace cumemtrace::testing
