// TraceAnalyzer and AnalyzeTraceFile (analysis.h): chunks are decoded as they come; all
// ordering-dependent work waits for Finish(), because nothing on the wire is time-ordered.
#include <utility>

#include "collector/engine/analysis.h"
#include "collector/engine/job_report.h"
#include "collector/engine/process_sweep.h"
#include "collector/engine/report.h"
#include "collector/engine/stream_decoder.h"
#include "collector/engine/timeline_model.h"
#include "collector/engine/trace_file.h"

namespace cumemtrace {
namespace {

// The analyzer behind TraceAnalyzer, also used directly by the file readers below.
class Analyzer {
 public:
  explicit Analyzer(const AnalysisOptions& options) : options_(options) {}

  void AddChunk(const v1::TraceChunk& chunk) { decoder_.AddChunk(chunk); }

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

// Reads `path` into `analyzer`; false with *error when it cannot be read or is not a trace.
bool ReadTraceFile(const std::string& path, Analyzer& analyzer, std::string* error) {
  TraceFileReader reader;
  if (!reader.Open(path)) {
    if (error != nullptr) *error = reader.error();
    return false;
  }
  v1::TraceChunk chunk;
  for (bool done = false; !done;) {
    switch (reader.Next(&chunk)) {
      case TraceFileReader::Result::kChunk:
        analyzer.AddChunk(chunk);
        break;
      case TraceFileReader::Result::kEnd:
        done = true;
        break;
      case TraceFileReader::Result::kTruncated:
        analyzer.MarkTruncated("the file ends inside a chunk after " +
                               std::to_string(reader.consumed_bytes()) + " of " +
                               std::to_string(reader.file_bytes()) + " bytes");
        done = true;
        break;
      case TraceFileReader::Result::kError:
        analyzer.MarkTruncated(reader.error());
        done = true;
        break;
    }
  }
  return true;
}

}  // namespace

std::unique_ptr<Report> AnalyzeTraceFile(const std::string& path, const AnalysisOptions& options,
                                         std::string* error) {
  Analyzer analyzer(options);
  if (!ReadTraceFile(path, analyzer, error)) return nullptr;
  std::unique_ptr<Report> report = analyzer.Finish();
  report->trace_file = path;
  return report;
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
