#include "collector/cli/report_html.h"

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>

#include "collector/cli/cli_support.h"
#include "collector/output/exports.h"
#include "collector/engine/analyzed_trace.h"

namespace cumemtrace {

bool WriteReportHtml(const std::string& trace_path, const AnalysisOptions& options,
                     const std::string& html_path, bool replace, std::string* error) {
  // A second, detailed analysis: the summary's own does not keep timelines, and a run's
  // summary must not wait on (or fail with) the viewer.
  // With the lifetimes, the viewer groups what was live at an instant by lifetime class too.
  AnalysisOptions detailed = options;
  detailed.keep_lifetimes = true;
  std::unique_ptr<AnalyzedTrace> trace = AnalyzeTraceFileDetailed(trace_path, detailed, error);
  if (trace == nullptr) return false;
  std::ostringstream html;
  WriteViewerHtml(*trace, html);
  if (!replace) return WriteNewFile(html_path, html.str(), error);
  const std::string temporary = html_path + ".tmp." + std::to_string(getpid());
  if (!WriteNewFile(temporary, html.str(), error)) return false;
  if (rename(temporary.c_str(), html_path.c_str()) != 0) {
    *error = "cannot replace " + html_path + ": " + strerror(errno);
    unlink(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace cumemtrace
