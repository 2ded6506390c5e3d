#include "collector/cli/trace_summary.h"

#include <sys/stat.h>

#include <sstream>

#include "collector/engine/analysis.h"
#include "collector/engine/report.h"

namespace cumemtrace {

bool SummarizeTraceFile(const std::string& path, const AnalysisOptions& options,
                        TraceSummary* summary, std::string* error) {
  std::unique_ptr<Report> report = AnalyzeTraceFile(path, options, error);
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

std::string TraceInFolder(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return path + (path.back() == '/' ? "" : "/") + "trace.cmtrace";
  }
  return path;
}

bool FiguresOfTrace(const std::string& path, const AnalysisOptions& options,
                    const std::string& label, RunFigures* figures, std::string* error) {
  std::unique_ptr<Report> report = AnalyzeTraceFile(TraceInFolder(path), options, error);
  if (report == nullptr) return false;
  *figures = FiguresOf(*report, label);
  return true;
}

}  // namespace cumemtrace
