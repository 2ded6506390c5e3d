#include "collector/cli/trace_summary.h"

#include <sstream>

#include "collector/engine/analysis.h"
#include "collector/engine/report.h"

namespace cumemtrace {

bool SummarizeTraceFile(const std::string& path, TraceSummary* summary, std::string* error) {
  std::unique_ptr<Report> report = AnalyzeTraceFile(path, AnalysisOptions(), error);
  if (report == nullptr) return false;
  if (report->truncated) {
    summary->warning = path + " is cut short (" + report->truncation_reason +
                       "); the report covers everything before that point";
  }
  summary->json = SummaryJson(*report);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  summary->text = text.str();
  return true;
}

}  // namespace cumemtrace
