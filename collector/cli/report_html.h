// report.html, the self-contained viewer (collector/output: WriteViewerHtml), as `run` and
// `report -o` write it beside summary.json.
#pragma once

#include <string>

#include "collector/engine/engine.h"

namespace cumemtrace {

// Writes the viewer of an analysis that kept its timelines (SummarizeTraceFile's
// `detailed`) to `html_path`: a new file (mode 0600, like summary.json), or with `replace`
// one that atomically replaces an existing file. False with *error set when the file cannot
// be written.
bool WriteReportHtml(const AnalyzedTrace& trace, const std::string& html_path, bool replace,
                     std::string* error);

}  // namespace cumemtrace
