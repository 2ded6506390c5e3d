// The summary of a Report (collector/engine/engine.h): summary.json and the text that
// `run` and `report` print.
#pragma once

#include <ostream>
#include <string>

#include "collector/engine/engine.h"

namespace cumemtrace {

// The content of summary.json (schema "cumemtrace.summary/1", documented in docs/summary.md).
std::string SummaryJson(const Report& report);

// Where an allocation with attribution was born, in words: "born in aten::addmm
// (aten::linear) in module encoder.fc1", "backward of aten::linear at model.py:42 (module
// encoder.fc1)"; "" without attribution.
std::string BornText(const LiveAllocation& a);

// The human-readable summary that `run` and `report` print.
void PrintSummaryText(const Report& report, std::ostream& out);

}  // namespace cumemtrace
