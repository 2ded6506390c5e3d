#include "collector/cli/trace_summary.h"

#include <sys/stat.h>

#include <sstream>

#include "collector/cli/cli_support.h"
#include "collector/engine/engine.h"
#include "collector/output/summary.h"

namespace cumemtrace {

bool SummarizeTraceFile(const std::string& path, const AnalysisOptions& options,
                        TraceSummary* summary, std::string* error,
                        std::unique_ptr<AnalyzedTrace>* detailed) {
  AnalysisOptions with = options;
  if (detailed != nullptr) {
    // The timelines in the summary's order, so that the summary is the one `report` writes;
    // with the lifetimes, the viewer groups what was live at an instant by lifetime class too.
    with.timelines = true;
    with.keep_lifetimes = true;
  }
  std::unique_ptr<AnalyzedTrace> trace = Analyze({path, {}}, with, error);
  if (trace == nullptr) return false;
  const Report* report = trace->report.get();
  if (report->truncated) {
    summary->warning = path + " is cut short (" + report->truncation_reason +
                       "); the report covers everything before that point";
  }
  summary->json = SummaryJson(*report);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  summary->text = text.str();
  if (detailed != nullptr) *detailed = std::move(trace);
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
  std::unique_ptr<AnalyzedTrace> analyzed = Analyze({trace, {}}, options, error);
  if (analyzed == nullptr) return false;
  *figures = FiguresOf(*analyzed->report, label);
  return true;
}

}  // namespace cumemtrace
