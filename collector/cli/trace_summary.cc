#include "collector/cli/trace_summary.h"

#include <sstream>

#include "collector/engine/analysis.h"
#include "collector/engine/report.h"
#include "collector/engine/trace_file.h"

namespace cumemtrace {

bool SummarizeTraceFile(const std::string& path, TraceSummary* summary, std::string* error) {
  // Reads the file here rather than through AnalyzeTraceFile so the CLI knows whether, and
  // where, the file was cut, and can say so beside the report.
  TraceFileReader reader;
  if (!reader.Open(path)) {
    *error = reader.error();
    return false;
  }
  TraceAnalyzer analyzer{AnalysisOptions()};
  v1::TraceChunk chunk;
  for (bool done = false; !done;) {
    switch (reader.Next(&chunk)) {
      case TraceFileReader::Result::kChunk:
        analyzer.AddChunk(chunk);
        break;
      case TraceFileReader::Result::kEnd:
        done = true;
        break;
      case TraceFileReader::Result::kTruncated: {
        const std::string reason = "the file ends inside a chunk after " +
                                   std::to_string(reader.consumed_bytes()) + " of " +
                                   std::to_string(reader.file_bytes()) + " bytes";
        analyzer.MarkTruncated(reason);
        summary->warning = path + " is truncated (" + reason +
                           "); the report covers everything before that point";
        done = true;
        break;
      }
      case TraceFileReader::Result::kError:
        analyzer.MarkTruncated(reader.error());
        summary->warning = path + " is damaged (" + reader.error() +
                           "); the report covers everything before that point";
        done = true;
        break;
    }
  }
  std::unique_ptr<Report> report = analyzer.Finish();
  if (report == nullptr) {
    *error = "analysis of " + path + " failed";
    return false;
  }
  report->trace_file = path;
  summary->json = SummaryJson(*report);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  summary->text = text.str();
  return true;
}

}  // namespace cumemtrace
