#include "collector/output/run_figures.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

std::string Mib(int64_t bytes) {
  char text[64];
  snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string SignedMib(int64_t bytes) {
  return (bytes >= 0 ? "+" : "-") + Mib(bytes >= 0 ? bytes : -bytes);
}

// (metric name, value or -1 when the run lacks it), in a fixed order for every run.
std::vector<std::pair<std::string, int64_t>> Metrics(const RunFigures& r,
                                                     const std::vector<std::string>& phases) {
  std::vector<std::pair<std::string, int64_t>> m;
  auto lifetime = [&r](const char* c) -> int64_t {
    auto it = r.lifetime_bytes.find(c);
    return it == r.lifetime_bytes.end() ? 0 : static_cast<int64_t>(it->second);
  };
  m.emplace_back("peak", r.found ? static_cast<int64_t>(r.peak_bytes) : -1);
  // Lifetime figures only for a run with training phases; the class "activation" is named by
  // what it is, so that the one figure called activation is activation memory.
  const bool classes = r.found && r.lifetimes;
  m.emplace_back("persistent at peak", classes ? lifetime("persistent") : -1);
  m.emplace_back("activation memory (peak - persistent)",
                 classes ? static_cast<int64_t>(r.activation_memory_bytes) : -1);
  for (const char* c : {"activation", "gradient", "temporary", "other"}) {
    const std::string name = std::string(c) == "activation" ? "forward-to-backward" : c;
    m.emplace_back(name + " at peak", classes ? lifetime(c) : -1);
  }
  for (const std::string& phase : phases) {
    auto it = r.phases.find(phase);
    const bool has = it != r.phases.end();
    m.emplace_back(phase + ": peak", has ? static_cast<int64_t>(it->second.peak_bytes) : -1);
    m.emplace_back(phase + ": +above entry (median)",
                   has ? it->second.peak_above_entry_median_bytes : -1);
    m.emplace_back(phase + ": allocated",
                   has ? static_cast<int64_t>(it->second.allocated_bytes) : -1);
  }
  return m;
}

std::vector<std::string> AllPhases(const std::vector<const RunFigures*>& runs) {
  std::vector<std::string> phases;
  for (const RunFigures* r : runs) {
    for (const std::string& p : r->phase_order) {
      if (std::find(phases.begin(), phases.end(), p) == phases.end()) phases.push_back(p);
    }
  }
  return phases;
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream out;
  internal::PrintTable(out, "", rows, "l");
  return out.str();
}

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
  d.update(
      {{"pid", f.pid},
       {"device", f.device},
       {"peak_bytes", f.peak_bytes},
       {"iterations", f.iterations},
       // Lifetime classes exist only for runs with training phases.
       {"lifetime_bytes", f.lifetimes ? json(f.lifetime_bytes) : json(nullptr)},
       {"persistent_bytes",
        f.lifetimes ? json(persistent == f.lifetime_bytes.end() ? 0 : persistent->second)
                    : json(nullptr)},
       {"activation_memory_bytes", f.lifetimes ? json(f.activation_memory_bytes) : json(nullptr)},
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

bool HighestPeak(const Report& report, size_t* process, size_t* slot) {
  bool found = false;
  for (size_t i = 0; i < report.processes.size(); ++i) {
    const std::vector<DeviceReport>& devices = report.processes[i].devices;
    for (size_t s = 0; s < devices.size(); ++s) {
      if (!found ||
          devices[s].peak.bytes > report.processes[*process].devices[*slot].peak.bytes) {
        *process = i;
        *slot = s;
        found = true;
      }
    }
  }
  return found;
}

RunFigures FiguresOf(const Report& report, const std::string& label) {
  RunFigures f;
  f.label = label;
  size_t process = 0, slot = 0;
  if (!HighestPeak(report, &process, &slot)) return f;
  const ProcessReport* best_process = &report.processes[process];
  const DeviceReport* best_device = &best_process->devices[slot];
  f.found = true;
  f.pid = best_process->pid;
  f.device = best_device->index;
  f.peak_bytes = best_device->peak.bytes;
  f.lifetimes = best_device->lifetime_at_peak.given;
  f.lifetime_bytes = best_device->lifetime_at_peak.bytes_by_class;
  f.activation_memory_bytes = best_device->lifetime_at_peak.activation_memory_bytes;
  f.iterations = best_process->iterations.count;
  for (const PhaseReport& phase : best_process->phases) {
    if (phase.iteration) continue;
    for (const PhaseDeviceStats& d : phase.devices) {
      if (d.index != f.device) continue;
      PhaseFigures& pf = f.phases[phase.name];
      pf.peak_bytes = d.peak_bytes;
      pf.allocated_bytes = d.allocated_bytes;
      f.phase_order.push_back(phase.name);
    }
  }
  for (const IterationPhaseStats& s : best_process->iterations.phases) {
    auto it = f.phases.find(s.phase);
    if (it == f.phases.end()) continue;
    for (const IterationPhaseDevice& d : s.devices) {
      if (d.index == f.device && d.peak_above_entry_bytes.count > 0) {
        it->second.peak_above_entry_median_bytes = d.peak_above_entry_bytes.median;
      }
    }
  }
  return f;
}

std::string CompareText(const std::vector<RunFigures>& runs) {
  if (runs.empty()) return "";
  std::vector<const RunFigures*> pointers;
  for (const RunFigures& r : runs) pointers.push_back(&r);
  const std::vector<std::string> phases = AllPhases(pointers);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{""};
  for (size_t i = 0; i < runs.size(); ++i) {
    header.push_back(runs[i].label);
    if (i > 0) header.push_back("vs " + runs[0].label);
  }
  rows.push_back(header);
  std::vector<std::vector<std::pair<std::string, int64_t>>> metrics;
  for (const RunFigures& r : runs) metrics.push_back(Metrics(r, phases));
  for (size_t m = 0; m < metrics[0].size(); ++m) {
    std::vector<std::string> row{metrics[0][m].first};
    for (size_t i = 0; i < runs.size(); ++i) {
      const int64_t v = metrics[i][m].second;
      row.push_back(v < 0 ? "-" : Mib(v));
      if (i > 0) {
        const int64_t base = metrics[0][m].second;
        row.push_back(v < 0 || base < 0 ? "-" : SignedMib(v - base));
      }
    }
    rows.push_back(row);
  }
  std::string out = Table(rows);
  for (const RunFigures& r : runs) {
    if (!r.found) out += r.label + ": no device memory in this trace\n";
  }
  return out;
}

std::string CompareCsv(const std::vector<RunFigures>& runs) {
  std::vector<const RunFigures*> pointers;
  for (const RunFigures& r : runs) pointers.push_back(&r);
  const std::vector<std::string> phases = AllPhases(pointers);
  internal::CsvTable csv({"label", "pid", "device", "metric", "bytes", "difference_from_first"});
  if (runs.empty()) return csv.Text();
  const auto base = Metrics(runs[0], phases);
  for (const RunFigures& r : runs) {
    const auto metrics = Metrics(r, phases);
    for (size_t m = 0; m < metrics.size(); ++m) {
      const int64_t v = metrics[m].second;
      csv.Row()
          .Field(r.label)
          .Field(uint64_t{r.pid})
          .Field(uint64_t{r.device})
          .Field(metrics[m].first)
          .Field(v < 0 ? "" : std::to_string(v))
          .Field(v < 0 || base[m].second < 0 ? "" : std::to_string(v - base[m].second));
    }
  }
  return csv.Text();
}

std::string SweepText(const std::string& parameter, const std::vector<SweepPoint>& points) {
  std::vector<std::string> labels, values;
  for (const SweepPoint& p : points) {
    if (std::find(labels.begin(), labels.end(), p.label) == labels.end()) labels.push_back(p.label);
    if (std::find(values.begin(), values.end(), p.value) == values.end()) values.push_back(p.value);
  }
  const bool labeled = labels.size() > 1 || !labels[0].empty();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{parameter};
  for (const std::string& label : labels) {
    const std::string prefix = labeled ? label + " " : "";
    for (const char* h : {"peak", "persistent", "activation"}) header.push_back(prefix + h);
  }
  rows.push_back(header);
  for (const std::string& value : values) {
    std::vector<std::string> row{value};
    for (const std::string& label : labels) {
      const SweepPoint* point = nullptr;
      for (const SweepPoint& p : points) {
        if (p.label == label && p.value == value) point = &p;
      }
      if (point == nullptr || !point->figures.found) {
        const std::string why =
            point == nullptr ? "-" : "exit " + std::to_string(point->exit_status);
        row.insert(row.end(), {why, "-", "-"});
        continue;
      }
      const RunFigures& f = point->figures;
      auto it = f.lifetime_bytes.find("persistent");
      row.push_back(
          Mib(static_cast<int64_t>(f.peak_bytes)) +
          (point->exit_status != 0 ? " (exit " + std::to_string(point->exit_status) + ")" : ""));
      if (!f.lifetimes) {  // no training phases: no persistent or activation figure
        row.insert(row.end(), {"-", "-"});
        continue;
      }
      row.push_back(Mib(it == f.lifetime_bytes.end() ? 0 : static_cast<int64_t>(it->second)));
      row.push_back(Mib(static_cast<int64_t>(f.activation_memory_bytes)));
    }
    rows.push_back(row);
  }
  return Table(rows);
}

std::string SweepCsv(const std::string& parameter, const std::vector<SweepPoint>& points) {
  internal::CsvTable csv({"label", parameter, "exit_status", "peak_bytes", "persistent_bytes",
                          "activation_memory_bytes", "gradient_bytes", "temporary_bytes",
                          "iterations"});
  for (const SweepPoint& p : points) {
    const RunFigures& f = p.figures;
    auto bytes = [&f](const char* c) {
      auto it = f.lifetime_bytes.find(c);
      return std::to_string(it == f.lifetime_bytes.end() ? 0 : it->second);
    };
    csv.Row().Field(p.label).Field(p.value).Field(std::to_string(p.exit_status));
    if (f.found && f.lifetimes) {
      csv.Field(f.peak_bytes)
          .Field(bytes("persistent"))
          .Field(f.activation_memory_bytes)
          .Field(bytes("gradient"))
          .Field(bytes("temporary"))
          .Field(f.iterations);
    } else if (f.found) {  // no training phases: no lifetime figures
      csv.Field(f.peak_bytes);
      for (int i = 0; i < 4; ++i) csv.Field(std::string());
      csv.Field(f.iterations);
    } else {
      for (int i = 0; i < 6; ++i) csv.Field(std::string());
    }
  }
  return csv.Text();
}

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
  json out = {
      {"schema", "cumemtrace.sweep/1"}, {"parameter", parameter}, {"points", json::array()}};
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
