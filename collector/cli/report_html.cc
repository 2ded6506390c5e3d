#include "collector/cli/report_html.h"

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "collector/cli/cli_support.h"
#include "collector/output/exports.h"
#include "collector/engine/analyzed_trace.h"

namespace cumemtrace {

bool WriteReportHtml(const AnalyzedTrace& trace, const std::string& html_path, bool replace,
                     std::string* error) {
  std::ostringstream html;
  WriteViewerHtml(trace, html);
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
