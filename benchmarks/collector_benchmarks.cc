// Collector throughput on one core, in events per second (docs/benchmarks.md has the
// figures). The input is a synthetic training program's trace (synthetic_trace.h): NVTX
// phases, stream-ordered allocations that reuse their addresses, frees and kernels, encoded
// by the tracer's own encoder.
//   Collector/DecodeAndTimeline - trace bytes in memory -> Analyze -> Report: framing,
//                                 decoding, the reorder window, the streaming sweep, phases,
//                                 tables (what `cumemtrace report` runs, without the file).
//   Collector/AnalyzeTraceFile  - the same through Analyze on a file (what
//                                 `cumemtrace report` runs), page cache warm.
//   Collector/InMemory          - trace bytes in memory -> chunks -> bytes -> Analyze with
//                                 every event sorted (AnalysisOptions::sorted).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "benchmarks/synthetic_trace.h"
#include "collector/engine/engine.h"
#include "collector/format/framing.h"
#include "collector/format/trace_file.h"

namespace cumemtrace {
namespace {

struct SyntheticTrace {
  std::string bytes;
  bench::SyntheticTraceStats stats;
};

// One trace per size, built once per run of the binary.
const SyntheticTrace& TraceOf(uint64_t events) {
  static std::map<uint64_t, std::unique_ptr<SyntheticTrace>> traces;
  std::unique_ptr<SyntheticTrace>& trace = traces[events];
  if (trace == nullptr) {
    trace = std::make_unique<SyntheticTrace>();
    bench::SyntheticTraceOptions options;
    options.events = events;
    trace->stats = bench::WriteSyntheticTrace(
        options, [&](std::string_view piece) { trace->bytes.append(piece); });
  }
  return *trace;
}

void CheckReport(benchmark::State& state, const Report& report, const SyntheticTrace& trace) {
  if (report.processes.size() != 1 || report.processes[0].devices.empty() ||
      report.processes[0].devices[0].peak.bytes == 0) {
    state.SkipWithError("the synthetic trace did not analyze to one process with a peak");
  }
  if (report.processes[0].events == 0 || trace.stats.events == 0) {
    state.SkipWithError("no events");
  }
}

void BM_DecodeAndTimeline(benchmark::State& state) {
  const SyntheticTrace& trace = TraceOf(static_cast<uint64_t>(state.range(0)));
  for (auto _ : state) {
    std::string error;
    std::unique_ptr<AnalyzedTrace> analyzed = Analyze({"", trace.bytes}, AnalysisOptions(), &error);
    if (analyzed == nullptr) {
      state.SkipWithError(error.c_str());
      break;
    }
    CheckReport(state, *analyzed->report, trace);
    benchmark::DoNotOptimize(analyzed.get());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.stats.events));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(trace.bytes.size()));
  state.counters["events"] = static_cast<double>(trace.stats.events);
}
BENCHMARK(BM_DecodeAndTimeline)
    ->Name("Collector/DecodeAndTimeline")
    ->Arg(1'000'000)
    ->Arg(4'000'000)
    ->Unit(benchmark::kMillisecond);

void BM_InMemory(benchmark::State& state) {
  const SyntheticTrace& trace = TraceOf(static_cast<uint64_t>(state.range(0)));
  const std::string_view body = std::string_view(trace.bytes).substr(TraceFilePreamble().size());
  for (auto _ : state) {
    std::string bytes(TraceFilePreamble());
    FrameDecoder frames(v1::MAX_FILE_CHUNK_BYTES);
    frames.Append(body.data(), body.size());
    v1::TraceChunk chunk;
    std::string_view frame;
    while (frames.Next(&frame) == FrameDecoder::Status::kFrame) {
      if (!chunk.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
        state.SkipWithError("corrupt chunk");
        break;
      }
      AppendChunk(chunk, &bytes);
    }
    AnalysisOptions sorted;
    sorted.sorted = true;
    std::unique_ptr<AnalyzedTrace> analyzed = Analyze({"", bytes}, sorted, nullptr);
    CheckReport(state, *analyzed->report, trace);
    benchmark::DoNotOptimize(analyzed.get());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.stats.events));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(trace.bytes.size()));
  state.counters["events"] = static_cast<double>(trace.stats.events);
}
BENCHMARK(BM_InMemory)->Name("Collector/InMemory")->Arg(1'000'000)->Unit(benchmark::kMillisecond);

void BM_AnalyzeTraceFile(benchmark::State& state) {
  const SyntheticTrace& trace = TraceOf(static_cast<uint64_t>(state.range(0)));
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir != nullptr ? tmpdir : "/tmp") + "/cumemtrace-bench-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0 || write(fd, trace.bytes.data(), trace.bytes.size()) !=
                    static_cast<ssize_t>(trace.bytes.size())) {
    state.SkipWithError("cannot write a temporary trace file");
    if (fd >= 0) close(fd);
    return;
  }
  close(fd);
  for (auto _ : state) {
    std::string error;
    std::unique_ptr<AnalyzedTrace> analyzed = Analyze({path, {}}, AnalysisOptions(), &error);
    if (analyzed == nullptr) {
      state.SkipWithError(error.c_str());
      break;
    }
    CheckReport(state, *analyzed->report, trace);
    benchmark::DoNotOptimize(analyzed.get());
  }
  unlink(path.c_str());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(trace.stats.events));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(trace.bytes.size()));
}
BENCHMARK(BM_AnalyzeTraceFile)
    ->Name("Collector/AnalyzeTraceFile")
    ->Arg(4'000'000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cumemtrace

BENCHMARK_MAIN();
