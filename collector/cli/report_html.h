// report.html, the self-contained viewer (engine: WriteViewerHtml), as `run` and `report -o`
// write it beside summary.json.
#pragma once

#include <string>

#include "collector/engine/analysis.h"

namespace cumemtrace {

// Analyzes `trace_path` with its timelines and writes the viewer to `html_path`: a new file
// (mode 0600, like summary.json), or with `replace` one that atomically replaces an existing
// file. False with *error set when the trace cannot be read or the file cannot be written.
bool WriteReportHtml(const std::string& trace_path, const AnalysisOptions& options,
                     const std::string& html_path, bool replace, std::string* error);

}  // namespace cumemtrace
