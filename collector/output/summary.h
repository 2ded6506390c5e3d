// The summary of a Report (collector/engine/engine.h): summary.json and the text that
// `run` and `report` print.
#pragma once

#include <ostream>
#include <string>

#include "collector/engine/engine.h"

namespace cumemtrace {

// The content of summary.json (schema "cumemtrace.summary/1", documented in docs/summary.md).
std::string SummaryJson(const Report& report);

// The human-readable summary that `run` and `report` print.
void PrintSummaryText(const Report& report, std::ostream& out);

}  // namespace cumemtrace
