#include "collector/output/run_figures.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "collector/output/report_json.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::CellIf;
using internal::LifetimeClassLabel;
using internal::OrNull;
using internal::Row;

std::string Mib(int64_t bytes) {
  return internal::Format("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string SignedMib(int64_t bytes) {
  return (bytes >= 0 ? "+" : "-") + Mib(bytes >= 0 ? bytes : -bytes);
}

// The bytes of a lifetime class at the peak; 0 for a class with none.
int64_t ClassBytes(const RunFigures& r, const char* lifetime_class) {
  auto it = r.lifetime_bytes.find(lifetime_class);
  return it == r.lifetime_bytes.end() ? 0 : static_cast<int64_t>(it->second);
}

// (metric name, value or -1 when the run lacks it), in a fixed order for every run.
std::vector<std::pair<std::string, int64_t>> Metrics(const RunFigures& r,
                                                     const std::vector<std::string>& phases,
                                                     const std::vector<std::string>& categories) {
  std::vector<std::pair<std::string, int64_t>> m;
  m.emplace_back("peak", r.found ? static_cast<int64_t>(r.peak_bytes) : -1);
  // Lifetime figures only for a run with training phases.
  const bool classes = r.found && r.lifetimes;
  for (const char* c : kLifetimeClassOrder) {
    m.emplace_back(LifetimeClassLabel(c) + " at peak", classes ? ClassBytes(r, c) : -1);
    if (std::string_view(c) == "persistent") {  // then what the rest of the peak is
      m.emplace_back("activation memory (peak - persistent)",
                     classes ? static_cast<int64_t>(r.activation_memory_bytes) : -1);
    }
  }
  // Categories: only those some run has, at the device peak and at their own peak.
  auto bytes = [&r](const std::map<std::string, uint64_t>& of, const std::string& c) {
    auto it = of.find(c);
    return !r.found || !r.categories ? -1 : it == of.end() ? 0 : static_cast<int64_t>(it->second);
  };
  for (const std::string& c : categories) {
    m.emplace_back(c + " at peak", bytes(r.category_at_peak, c));
    m.emplace_back(c + " own peak", bytes(r.category_own_peak, c));
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

std::vector<std::string> AllPhases(const std::vector<RunFigures>& runs) {
  std::vector<std::string> phases;
  for (const RunFigures& r : runs) {
    for (const std::string& p : r.phase_order) internal::AddOnce(phases, p);
  }
  return phases;
}

// The categories any run has allocations of, in kCategoryOrder.
std::vector<std::string> AllCategories(const std::vector<RunFigures>& runs) {
  std::vector<std::string> categories;
  for (const char* c : kCategoryOrder) {
    for (const RunFigures& r : runs) {
      if (r.categories && r.category_own_peak.count(c) > 0) {
        categories.push_back(c);
        break;
      }
    }
  }
  return categories;
}

std::string Table(const std::vector<Row>& rows) {
  std::ostringstream out;
  internal::PrintTable(out, "", rows, "l");
  return out.str();
}

using nlohmann::json;

json FiguresData(const RunFigures& f) {
  json d = {{"label", f.label}, {"found", f.found}};
  if (!f.found) return d;
  json phases = json::object();
  for (const auto& [name, p] : f.phases) {  // json sorts the keys
    phases[name] = {{"peak_bytes", p.peak_bytes},
                    {"peak_above_entry_median_bytes",
                     OrNull(p.peak_above_entry_median_bytes >= 0, p.peak_above_entry_median_bytes)},
                    {"allocated_bytes", p.allocated_bytes}};
  }
  d.update(
      {{"pid", f.pid},
       {"device", f.device},
       {"peak_bytes", f.peak_bytes},
       {"iterations", f.iterations},
       // Lifetime classes exist only for runs with training phases.
       {"lifetime_bytes", OrNull(f.lifetimes, f.lifetime_bytes)},
       {"persistent_bytes", OrNull(f.lifetimes, ClassBytes(f, "persistent"))},
       {"activation_memory_bytes", OrNull(f.lifetimes, f.activation_memory_bytes)},
       {"categories", f.categories ? json{{"at_peak_bytes", f.category_at_peak},
                                          {"own_peak_bytes", f.category_own_peak},
                                          {"library_workspace_bytes", f.library_workspace_bytes}}
                                   : json()},
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
      if (!found || devices[s].peak.bytes > report.processes[*process].devices[*slot].peak.bytes) {
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
  const ProcessReport& best_process = report.processes[process];
  const DeviceReport& best_device = best_process.devices[slot];
  const LifetimeAtPeak& lifetime = best_device.lifetime_at_peak;
  f.found = true;
  f.pid = best_process.pid;
  f.device = best_device.index;
  f.peak_bytes = best_device.peak.bytes;
  f.lifetimes = lifetime.given;
  f.lifetime_bytes = lifetime.bytes_by_class;
  f.activation_memory_bytes = lifetime.activation_memory_bytes;
  f.iterations = best_process.iterations.count;
  const DeviceCategories& categories = best_device.categories;
  f.categories = categories.given;
  for (const auto& [name, c] : categories.by_category) {
    f.category_at_peak[name] = c.at_device_peak.bytes;
    f.category_own_peak[name] = c.own_peak.bytes;
  }
  f.library_workspace_bytes = categories.not_torch_at_device_peak_bytes;
  for (const PhaseReport& phase : best_process.phases) {
    if (phase.iteration) continue;
    for (const PhaseDeviceStats& d : phase.devices) {
      if (d.index != f.device) continue;
      f.phases[phase.name] = {d.peak_bytes, -1, d.allocated_bytes};
      f.phase_order.push_back(phase.name);
    }
  }
  for (const IterationPhaseStats& s : best_process.iterations.phases) {
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
  const std::vector<std::string> phases = AllPhases(runs);
  const std::vector<std::string> categories = AllCategories(runs);
  std::vector<Row> rows{{""}};
  for (size_t i = 0; i < runs.size(); ++i) {
    rows[0].push_back(runs[i].label);
    if (i > 0) rows[0].push_back("vs " + runs[0].label);
  }
  std::vector<std::vector<std::pair<std::string, int64_t>>> metrics;
  for (const RunFigures& r : runs) metrics.push_back(Metrics(r, phases, categories));
  for (size_t m = 0; m < metrics[0].size(); ++m) {
    Row row{metrics[0][m].first};
    const int64_t base = metrics[0][m].second;
    for (size_t i = 0; i < runs.size(); ++i) {
      const int64_t v = metrics[i][m].second;
      row.push_back(v < 0 ? "-" : Mib(v));
      if (i > 0) row.push_back(v < 0 || base < 0 ? "-" : SignedMib(v - base));
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
  internal::CsvTable csv({"label", "pid", "device", "metric", "bytes", "difference_from_first"});
  if (runs.empty()) return csv.Text();
  const std::vector<std::string> phases = AllPhases(runs);
  const std::vector<std::string> categories = AllCategories(runs);
  const auto base = Metrics(runs[0], phases, categories);
  for (const RunFigures& r : runs) {
    const auto metrics = Metrics(r, phases, categories);
    for (size_t m = 0; m < metrics.size(); ++m) {
      const int64_t v = metrics[m].second;
      csv.Row(r.label, r.pid, r.device, metrics[m].first, CellIf(v >= 0, v),
              CellIf(v >= 0 && base[m].second >= 0, v - base[m].second));
    }
  }
  return csv.Text();
}

std::vector<std::pair<std::string, int64_t>> SweepColumns(const RunFigures& f) {
  auto own = [&f](const char* c) {
    auto it = f.category_own_peak.find(c);
    return it == f.category_own_peak.end() ? int64_t{0} : static_cast<int64_t>(it->second);
  };
  return {{"parameters", own("parameter") + own("buffer")},
          {"gradients", own("gradient")},
          {"optimizer state", own("optimizer_state")},
          {"activations", own("activation")},
          {"temporaries", own("temporary")},
          {"library workspaces", static_cast<int64_t>(f.library_workspace_bytes)},
          {"peak", static_cast<int64_t>(f.peak_bytes)}};
}

bool LeastSquaresSlope(const std::vector<double>& x, const std::vector<double>& y, double* slope) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return false;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  if (sxx == 0) return false;
  *slope = sxy / sxx;
  return true;
}

namespace {

// The parameter's value as a number; false when it is not one ("small", "1e").
bool NumericValue(const std::string& text, double* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// Per label: each sweep column's least-squares slope per unit of the parameter, over the
// points with categories and a numeric value, and the column that grows fastest.
std::string SlopeText(const std::string& parameter, const std::vector<std::string>& labels,
                      const std::vector<SweepPoint>& points) {
  std::vector<Row> rows;
  std::vector<std::string> fastest;
  for (const std::string& label : labels) {
    std::vector<double> x;
    std::vector<std::vector<double>> y;
    std::vector<std::string> names;
    for (const SweepPoint& p : points) {
      double value = 0;
      if (p.label != label || !p.figures.found || !p.figures.categories ||
          !NumericValue(p.value, &value)) {
        continue;
      }
      const auto columns = SweepColumns(p.figures);
      if (names.empty()) {
        for (const auto& [name, bytes] : columns) names.push_back(name);
        y.resize(columns.size());
      }
      x.push_back(value);
      for (size_t c = 0; c < columns.size(); ++c) {
        y[c].push_back(static_cast<double>(columns[c].second));
      }
    }
    if (rows.empty()) rows.push_back({""});
    std::vector<double> slopes;
    for (const std::vector<double>& column : y) {
      double slope = 0;
      if (!LeastSquaresSlope(x, column, &slope)) break;
      slopes.push_back(slope);
    }
    if (slopes.empty()) continue;
    rows[0].push_back(label.empty() ? "per " + parameter : label + " per " + parameter);
    size_t best = 0;
    for (size_t c = 0; c < slopes.size(); ++c) {
      if (rows.size() <= c + 1) rows.push_back({names[c]});
      const double mib = slopes[c] / (1 << 20);
      rows[c + 1].push_back(internal::Format("%+.2f MiB", mib));
      // The fastest of the parts; the peak is their sum.
      if (names[c] != "peak" && slopes[c] > slopes[best]) best = c;
    }
    fastest.push_back((label.empty() ? std::string() : label + ": ") + names[best] + " (" +
                      internal::Format("%+.2f MiB", slopes[best] / (1 << 20)) + " per " +
                      parameter + ")");
  }
  if (fastest.empty()) return "";
  std::string out = "\nslope per unit of " + parameter + " (least squares over the values):\n";
  std::ostringstream table;
  internal::PrintTable(table, "  ", rows, "l");
  out += table.str();
  for (const std::string& f : fastest) out += "grows fastest: " + f + "\n";
  return out;
}

}  // namespace

std::string SweepText(const std::string& parameter, const std::vector<SweepPoint>& points) {
  std::vector<std::string> labels, values;
  for (const SweepPoint& p : points) {
    internal::AddOnce(labels, p.label);
    internal::AddOnce(values, p.value);
  }
  const bool labeled = labels.size() > 1 || !labels[0].empty();
  const std::vector<std::string> kColumns = {"peak",        "parameters",  "gradients", "optimizer",
                                             "activations", "temporaries", "workspaces"};
  std::vector<Row> rows{{parameter}};
  for (const std::string& label : labels) {
    const std::string prefix = labeled ? label + " " : "";
    for (const std::string& h : kColumns) rows[0].push_back(prefix + h);
  }
  for (const std::string& value : values) {
    Row row{value};
    for (const std::string& label : labels) {
      // The last point of the label and value.
      auto point = std::find_if(points.rbegin(), points.rend(), [&](const SweepPoint& p) {
        return p.label == label && p.value == value;
      });
      if (point == points.rend() || !point->figures.found) {
        const bool ran = point != points.rend();
        row.push_back(ran ? "exit " + std::to_string(point->exit_status) : "-");
        row.insert(row.end(), kColumns.size() - 1, "-");
        continue;
      }
      const RunFigures& f = point->figures;
      const int exit_status = point->exit_status;
      row.push_back(Mib(static_cast<int64_t>(f.peak_bytes)) +
                    (exit_status != 0 ? " (exit " + std::to_string(exit_status) + ")" : ""));
      // Without categories (no training phases, no tag), no parts.
      const auto columns = SweepColumns(f);
      for (size_t c = 0; c + 1 < columns.size(); ++c) {
        row.push_back(f.categories ? Mib(columns[c].second) : "-");
      }
    }
    rows.push_back(row);
  }
  return Table(rows) + SlopeText(parameter, labels, points);
}

std::string SweepCsv(const std::string& parameter, const std::vector<SweepPoint>& points) {
  internal::CsvTable csv({"label", parameter, "exit_status", "peak_bytes", "persistent_bytes",
                          "activation_memory_bytes", "gradient_bytes", "temporary_bytes",
                          "iterations", "parameters_bytes", "gradients_bytes",
                          "optimizer_state_bytes", "activations_own_peak_bytes",
                          "temporaries_own_peak_bytes", "library_workspace_bytes"});
  for (const SweepPoint& p : points) {
    const RunFigures& f = p.figures;
    const bool classes = f.found && f.lifetimes;  // lifetime figures need training phases
    const bool parts = f.found && f.categories;
    const auto columns = SweepColumns(f);
    csv.Row(p.label, p.value, p.exit_status, CellIf(f.found, f.peak_bytes),
            CellIf(classes, ClassBytes(f, "persistent")),
            CellIf(classes, f.activation_memory_bytes), CellIf(classes, ClassBytes(f, "gradient")),
            CellIf(classes, ClassBytes(f, "temporary")), CellIf(f.found, f.iterations),
            CellIf(parts, columns[0].second), CellIf(parts, columns[1].second),
            CellIf(parts, columns[2].second), CellIf(parts, columns[3].second),
            CellIf(parts, columns[4].second), CellIf(parts, columns[5].second));
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
  for (const SweepPoint& p : points) out["points"].push_back(internal::SweepPointJson(p));
  // Per label: each part's least-squares slope in bytes per unit of the parameter.
  json slopes = json::object();
  std::vector<std::string> labels;
  for (const SweepPoint& p : points) internal::AddOnce(labels, p.label);
  for (const std::string& label : labels) {
    std::vector<double> x;
    std::map<std::string, std::vector<double>> y;
    for (const SweepPoint& p : points) {
      double value = 0;
      if (p.label != label || !p.figures.found || !p.figures.categories ||
          !NumericValue(p.value, &value)) {
        continue;
      }
      x.push_back(value);
      for (const auto& [name, bytes] : SweepColumns(p.figures)) {
        y[name].push_back(static_cast<double>(bytes));
      }
    }
    json per = json::object();
    for (const auto& [name, column] : y) {
      double slope = 0;
      if (LeastSquaresSlope(x, column, &slope)) per[name] = slope;
    }
    if (!per.empty()) slopes[label] = per;
  }
  out["slopes_bytes_per_unit"] = slopes;
  return out.dump(2) + "\n";
}

json internal::SweepPointJson(const SweepPoint& point) {
  json d = FiguresData(point.figures);
  d["label"] = point.label;
  d["value"] = point.value;
  d["exit_status"] = point.exit_status;
  d["page"] = OrNull(point.page);
  return d;
}

}  // namespace cumemtrace
