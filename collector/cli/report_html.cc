#include "collector/cli/report_html.h"

#include <ostream>

#include "collector/cli/cli_support.h"
#include "collector/output/exports.h"
#include "collector/engine/engine.h"

namespace cumemtrace {

bool WriteReportHtml(const AnalyzedTrace& trace, const std::string& html_path, bool replace,
                     std::string* error) {
  return WriteOutputFile(
      html_path, replace ? Placement::kReplace : Placement::kNew,
      [&trace](std::ostream& out) { WriteViewerHtml(trace, out); }, error);
}

}  // namespace cumemtrace
