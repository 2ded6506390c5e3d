// `cumemtrace compare --json` and `cumemtrace sweep --json`: the figures of compare's and
// sweep's tables as JSON (docs/cli.md), each run with its difference from the first.
#pragma once

#include <string>
#include <vector>

#include "collector/engine/run_figures.h"

namespace cumemtrace {

std::string CompareJson(const std::vector<RunFigures>& runs);
std::string SweepJson(const std::string& parameter, const std::vector<SweepPoint>& points);

}  // namespace cumemtrace
