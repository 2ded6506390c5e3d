// Internal: parts of summary.json (summary_json.cc) and sweep.json that the viewer's page data
// embeds with the same layout, so that the page and the files cannot disagree on what a median
// is.
#pragma once

#include <nlohmann/json.hpp>

#include "collector/engine/engine.h"
#include "collector/output/run_figures.h"

namespace cumemtrace::internal {

// `value` where it is given, else null.
template <typename T>
nlohmann::ordered_json OrNull(bool given, const T& value) {
  return given ? nlohmann::ordered_json(value) : nlohmann::ordered_json();
}
// `text`, or null where it is empty.
inline nlohmann::ordered_json OrNull(const std::string& text) {
  return OrNull(!text.empty(), text);
}

// summary.json's "iterations" (docs/summary.md). A spread of no iterations is null there;
// with `empty_spreads`, an object of zeros (what the page reads).
nlohmann::ordered_json IterationsJson(const IterationReport& r, bool empty_spreads = false);

// A device's "lifetime_at_peak"; null without training phases (LifetimeAtPeak::given).
nlohmann::ordered_json LifetimeAtPeakJson(const LifetimeAtPeak& l);

// A device's "attribution" (`run --modules`, `--ops`): only where DeviceAttribution::given.
nlohmann::ordered_json AttributionJson(const DeviceAttribution& a);

// A device's "categories" (docs/summary.md); null where the process has none
// (DeviceCategories::given).
nlohmann::ordered_json CategoriesJson(const DeviceCategories& c);

// One of sweep.json's "points" (run_figures.cc), which the sweep page's data repeats.
nlohmann::json SweepPointJson(const SweepPoint& point);

}  // namespace cumemtrace::internal
