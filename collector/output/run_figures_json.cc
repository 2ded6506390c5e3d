// CompareJson, SweepJson (run_figures_json.h).
#include "collector/output/run_figures_json.h"

#include <nlohmann/json.hpp>

namespace cumemtrace {
namespace {

using nlohmann::json;

json FiguresData(const RunFigures& f) {
  json d = {{"label", f.label}, {"found", f.found}};
  if (!f.found) return d;
  json phases = json::object();
  for (const std::string& name : f.phase_order) {
    const auto it = f.phases.find(name);
    if (it == f.phases.end()) continue;
    const PhaseFigures& p = it->second;
    phases[name] = {{"peak_bytes", p.peak_bytes},
                    {"peak_above_entry_median_bytes", p.peak_above_entry_median_bytes < 0
                                                          ? json(nullptr)
                                                          : json(p.peak_above_entry_median_bytes)},
                    {"allocated_bytes", p.allocated_bytes}};
  }
  const auto persistent = f.lifetime_bytes.find("persistent");
  d.update({{"pid", f.pid},
            {"device", f.device},
            {"peak_bytes", f.peak_bytes},
            {"iterations", f.iterations},
            // Lifetime classes exist only for runs with training iterations.
            {"lifetime_bytes", f.iterations > 0 ? json(f.lifetime_bytes) : json(nullptr)},
            {"persistent_bytes",
             f.iterations > 0 ? json(persistent == f.lifetime_bytes.end() ? 0 : persistent->second)
                              : json(nullptr)},
            {"activation_memory_bytes",
             f.iterations > 0 ? json(f.activation_memory_bytes) : json(nullptr)},
            {"phases", phases}});
  return d;
}

// b - a for the numbers both have, recursively; null where either lacks one.
json Difference(const json& a, const json& b) {
  if (a.is_object() && b.is_object()) {
    json d = json::object();
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (a.contains(it.key())) d[it.key()] = Difference(a.at(it.key()), it.value());
    }
    return d;
  }
  if (a.is_number() && b.is_number() && !a.is_boolean() && !b.is_boolean()) {
    return b.get<int64_t>() - a.get<int64_t>();
  }
  return nullptr;
}

}  // namespace

std::string CompareJson(const std::vector<RunFigures>& runs) {
  json out = {{"schema", "cumemtrace.compare/1"}, {"runs", json::array()}};
  json first;
  for (size_t i = 0; i < runs.size(); ++i) {
    json d = FiguresData(runs[i]);
    if (i == 0) first = d;
    if (i > 0 && first.value("found", false) && d.value("found", false)) {
      json diff = json::object();
      for (const char* key : {"peak_bytes", "persistent_bytes", "activation_memory_bytes",
                              "iterations", "lifetime_bytes", "phases"}) {
        if (first.contains(key) && d.contains(key)) diff[key] = Difference(first[key], d[key]);
      }
      d["difference_from_first"] = diff;
    }
    out["runs"].push_back(d);
  }
  return out.dump(2) + "\n";
}

std::string SweepJson(const std::string& parameter, const std::vector<SweepPoint>& points) {
  json out = {{"schema", "cumemtrace.sweep/1"}, {"parameter", parameter}, {"points", json::array()}};
  for (const SweepPoint& p : points) {
    json d = FiguresData(p.figures);
    d["label"] = p.label;
    d["value"] = p.value;
    d["exit_status"] = p.exit_status;
    d["page"] = p.page.empty() ? json(nullptr) : json(p.page);
    out["points"].push_back(d);
  }
  return out.dump(2) + "\n";
}

}  // namespace cumemtrace
