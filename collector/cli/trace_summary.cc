#include "collector/cli/trace_summary.h"

#include <sys/stat.h>

#include <sstream>

#include "collector/cli/cli_support.h"
#include "collector/engine/analysis.h"
#include "collector/engine/report.h"
#include "collector/output/summary.h"

namespace cumemtrace {

bool SummarizeTraceFile(const std::string& path, const AnalysisOptions& options,
                        TraceSummary* summary, std::string* error,
                        std::unique_ptr<AnalyzedTrace>* detailed) {
  std::unique_ptr<Report> owned;
  if (detailed == nullptr) {
    owned = AnalyzeTraceFile(path, options, error);
  } else {
    // With the lifetimes, the viewer groups what was live at an instant by lifetime class too.
    AnalysisOptions keep = options;
    keep.keep_lifetimes = true;
    *detailed = AnalyzeTraceFileDetailed(path, keep, error, /*summary_order=*/true);
  }
  const Report* report = detailed == nullptr ? owned.get()
                         : *detailed == nullptr ? nullptr
                                                : (*detailed)->report.get();
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

bool ResolveTracePath(std::string* path, std::string* error) {
  struct stat st {};
  if (stat(path->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return true;
  const std::string inside = *path + (path->back() == '/' ? "" : "/") + "trace.cmtrace";
  if (!PathExists(inside)) {
    *error = *path + " is a folder without a trace.cmtrace";
    return false;
  }
  *path = inside;
  return true;
}

std::pair<std::string, std::string> LabeledRun(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && !PathExists(arg)) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  std::string trimmed = arg;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return {BaseName(trimmed), arg};
}

bool FiguresOfTrace(const std::string& path, const AnalysisOptions& options,
                    const std::string& label, RunFigures* figures, std::string* error) {
  std::string trace = path;
  if (!ResolveTracePath(&trace, error)) return false;
  std::unique_ptr<Report> report = AnalyzeTraceFile(trace, options, error);
  if (report == nullptr) return false;
  *figures = FiguresOf(*report, label);
  return true;
}

}  // namespace cumemtrace
