// TraceAnalyzer and AnalyzeTraceFile (analysis.h). TraceAnalyzer and the detailed analysis
// keep every event until Finish(), because nothing on the wire is time-ordered;
// AnalyzeTraceFile streams (streaming_sweep.h) and reads the file again for the processes
// that need every event at once.
#include <set>
#include <type_traits>
#include <utility>

#include "collector/engine/analysis.h"
#include "collector/engine/job_summary.h"
#include "collector/engine/in_memory_sweep.h"
#include "collector/engine/report.h"
#include "collector/engine/stream_decoder.h"
#include "collector/engine/streaming_sweep.h"
#include "collector/engine/analyzed_trace.h"
#include "collector/format/trace_file.h"

namespace cumemtrace {
namespace {

// The analyzer behind TraceAnalyzer, also used directly by the file readers below.
class Analyzer {
 public:
  explicit Analyzer(const AnalysisOptions& options) : options_(options) {}
  // Only the chunks of these streams are read.
  Analyzer(const AnalysisOptions& options, std::set<uint32_t> only)
      : options_(options), only_(std::move(only)), filtered_(true) {}

  void AddChunk(const v1::TraceChunk& chunk) {
    if (filtered_ && only_.count(chunk.stream_id()) == 0) return;
    decoder_.AddChunk(chunk);
  }

  void MarkTruncated(const std::string& reason) {
    // The first reason is the cause; anything after it follows from it.
    if (!truncated_) truncation_reason_ = reason;
    truncated_ = true;
  }

  // With `timelines`, one ProcessTimeline per process is appended to it.
  std::unique_ptr<Report> Finish(std::vector<ProcessTimeline>* timelines = nullptr) {
    auto report = std::make_unique<Report>();
    report->truncated = truncated_;
    report->truncation_reason = truncation_reason_;
    for (auto& [stream_id, stream] : decoder_.streams()) {
      ProcessTimeline* timeline = nullptr;
      if (timelines != nullptr) timeline = &timelines->emplace_back();
      report->processes.push_back(internal::AnalyzeProcess(stream, options_, timeline));
      // Free each stream's events as soon as it is summarized.
      stream = internal::DecodedStream();
    }
    internal::AddJobSummary(report.get());
    return report;
  }

 private:
  AnalysisOptions options_;
  std::set<uint32_t> only_;
  bool filtered_ = false;
  internal::StreamDecoder decoder_;
  bool truncated_ = false;
  std::string truncation_reason_;
};

}  // namespace

class TraceAnalyzer::Impl : public Analyzer {
 public:
  using Analyzer::Analyzer;
};

TraceAnalyzer::TraceAnalyzer(const AnalysisOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
TraceAnalyzer::~TraceAnalyzer() = default;
void TraceAnalyzer::AddChunk(const v1::TraceChunk& chunk) { impl_->AddChunk(chunk); }
void TraceAnalyzer::MarkTruncated(const std::string& reason) { impl_->MarkTruncated(reason); }
std::unique_ptr<Report> TraceAnalyzer::Finish() { return impl_->Finish(); }

namespace {

// Reads every chunk of `reader` (opened) into `sink` (AddChunk, MarkTruncated; and
// AddWireFrame for the streaming analyzer, which takes wire frames without a copy).
template <typename Sink>
void ReadChunks(TraceFileReader& reader, Sink& sink) {
  constexpr bool kViews = std::is_same_v<Sink, internal::StreamingAnalyzer>;
  v1::TraceChunk chunk;
  bool is_wire = false;
  uint32_t stream_id = 0;
  std::string_view wire_frame;
  for (bool done = false; !done;) {
    const TraceFileReader::Result result =
        kViews ? reader.NextView(&chunk, &is_wire, &stream_id, &wire_frame) : reader.Next(&chunk);
    switch (result) {
      case TraceFileReader::Result::kChunk:
        if constexpr (kViews) {
          if (is_wire) {
            sink.AddWireFrame(stream_id, wire_frame);
            break;
          }
        }
        sink.AddChunk(chunk);
        break;
      case TraceFileReader::Result::kEnd:
        done = true;
        break;
      case TraceFileReader::Result::kTruncated:
        sink.MarkTruncated("the file ends inside a chunk after " +
                           std::to_string(reader.consumed_bytes()) + " of " +
                           std::to_string(reader.file_bytes()) + " bytes");
        done = true;
        break;
      case TraceFileReader::Result::kError:
        sink.MarkTruncated(reader.error());
        done = true;
        break;
    }
  }
}

// Reads `path` into `sink`; false with *error when it cannot be read or is not a trace.
template <typename Sink>
bool ReadTraceFile(const std::string& path, Sink& sink, std::string* error) {
  TraceFileReader reader;
  if (!reader.Open(path)) {
    if (error != nullptr) *error = reader.error();
    return false;
  }
  ReadChunks(reader, sink);
  return true;
}

// The streaming analysis, with further reads (`read_again(sink)`) for the processes whose
// phases are inferred and those that need every event at once.
template <typename ReadAgain>
std::unique_ptr<Report> FinishStreaming(internal::StreamingAnalyzer& streaming,
                                        const AnalysisOptions& options, ReadAgain read_again) {
  std::vector<uint32_t> in_memory;
  std::unique_ptr<Report> report = streaming.Finish(&in_memory);
  while (streaming.NeedsPass()) {
    streaming.BeginPass();
    if (!read_again(streaming)) break;
    streaming.EndPass(report.get());
  }
  if (!in_memory.empty()) {
    Analyzer analyzer(options, std::set<uint32_t>(in_memory.begin(), in_memory.end()));
    std::unique_ptr<Report> full;
    if (read_again(analyzer)) full = analyzer.Finish();
    for (ProcessReport& p : report->processes) {
      if (full == nullptr) break;
      for (ProcessReport& q : full->processes) {
        if (q.stream_id == p.stream_id) p = std::move(q);
      }
    }
  }
  internal::AddJobSummary(report.get());
  return report;
}

}  // namespace

std::unique_ptr<Report> AnalyzeTraceFile(const std::string& path, const AnalysisOptions& options,
                                         std::string* error) {
  if (options.keep_lifetimes) {
    // One row per allocation: the output is as large as the trace anyway.
    Analyzer analyzer(options);
    if (!ReadTraceFile(path, analyzer, error)) return nullptr;
    std::unique_ptr<Report> report = analyzer.Finish();
    report->trace_file = path;
    return report;
  }
  internal::StreamingAnalyzer streaming(options);
  if (!ReadTraceFile(path, streaming, error)) return nullptr;
  std::unique_ptr<Report> report = FinishStreaming(streaming, options, [&](auto& sink) {
    return ReadTraceFile(path, sink, nullptr);
  });
  report->trace_file = path;
  return report;
}

std::unique_ptr<Report> AnalyzeTraceBytes(std::string_view bytes, const AnalysisOptions& options,
                                          std::string* error) {
  TraceFileReader reader;
  if (!reader.OpenBytes(bytes, "the trace")) {
    if (error != nullptr) *error = reader.error();
    return nullptr;
  }
  internal::StreamingAnalyzer streaming(options);
  ReadChunks(reader, streaming);
  return FinishStreaming(streaming, options, [&](auto& sink) {
    TraceFileReader again;
    if (!again.OpenBytes(bytes, "the trace")) return false;
    ReadChunks(again, sink);
    return true;
  });
}

std::unique_ptr<AnalyzedTrace> AnalyzeTraceFileDetailed(const std::string& path,
                                                        const AnalysisOptions& options,
                                                        std::string* error) {
  Analyzer analyzer(options);
  if (!ReadTraceFile(path, analyzer, error)) return nullptr;
  auto trace = std::make_unique<AnalyzedTrace>();
  trace->report = analyzer.Finish(&trace->timelines);
  trace->report->trace_file = path;
  return trace;
}

}  // namespace cumemtrace
