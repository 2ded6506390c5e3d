#include "collector/engine/run_figures.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

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

std::string Csv(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
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
  m.emplace_back("persistent at peak", r.found ? lifetime("persistent") : -1);
  m.emplace_back("activation memory (peak - persistent)",
                 r.found ? static_cast<int64_t>(r.activation_memory_bytes) : -1);
  for (const char* c : {"activation", "gradient", "temporary", "other"}) {
    m.emplace_back(std::string(c) + " at peak", r.found ? lifetime(c) : -1);
  }
  for (const std::string& phase : phases) {
    auto it = r.phases.find(phase);
    const bool has = it != r.phases.end();
    m.emplace_back(phase + ": peak", has ? static_cast<int64_t>(it->second.peak_bytes) : -1);
    m.emplace_back(phase + ": +above entry (median)",
                   has ? it->second.peak_above_entry_median_bytes : -1);
    m.emplace_back(phase + ": allocated", has ? static_cast<int64_t>(it->second.allocated_bytes) : -1);
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
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string& cell = row[i];
      if (i == 0) {
        line += cell + std::string(width[i] - cell.size(), ' ');
      } else {
        line += "  " + std::string(width[i] - cell.size(), ' ') + cell;
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

RunFigures FiguresOf(const Report& report, const std::string& label) {
  RunFigures f;
  f.label = label;
  const ProcessReport* best_process = nullptr;
  const DeviceReport* best_device = nullptr;
  for (const ProcessReport& p : report.processes) {
    for (const DeviceReport& d : p.devices) {
      if (best_device == nullptr || d.peak.bytes > best_device->peak.bytes) {
        best_process = &p;
        best_device = &d;
      }
    }
  }
  if (best_device == nullptr) return f;
  f.found = true;
  f.pid = best_process->pid;
  f.device = best_device->index;
  f.peak_bytes = best_device->peak.bytes;
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
  std::string out = "label,pid,device,metric,bytes,difference_from_first\r\n";
  if (runs.empty()) return out;
  const auto base = Metrics(runs[0], phases);
  for (const RunFigures& r : runs) {
    const auto metrics = Metrics(r, phases);
    for (size_t m = 0; m < metrics.size(); ++m) {
      const int64_t v = metrics[m].second;
      out += Csv(r.label) + "," + std::to_string(r.pid) + "," + std::to_string(r.device) + "," +
             Csv(metrics[m].first) + "," + (v < 0 ? "" : std::to_string(v)) + "," +
             (v < 0 || base[m].second < 0 ? "" : std::to_string(v - base[m].second)) + "\r\n";
    }
  }
  return out;
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
        const std::string why = point == nullptr ? "-"
                                                 : "exit " + std::to_string(point->exit_status);
        row.insert(row.end(), {why, "-", "-"});
        continue;
      }
      const RunFigures& f = point->figures;
      auto it = f.lifetime_bytes.find("persistent");
      row.push_back(Mib(static_cast<int64_t>(f.peak_bytes)) +
                    (point->exit_status != 0 ? " (exit " + std::to_string(point->exit_status) + ")"
                                             : ""));
      row.push_back(Mib(it == f.lifetime_bytes.end() ? 0 : static_cast<int64_t>(it->second)));
      row.push_back(Mib(static_cast<int64_t>(f.activation_memory_bytes)));
    }
    rows.push_back(row);
  }
  return Table(rows);
}

std::string SweepCsv(const std::string& parameter, const std::vector<SweepPoint>& points) {
  std::string out = "label," + Csv(parameter) +
                    ",exit_status,peak_bytes,persistent_bytes,activation_memory_bytes,"
                    "gradient_bytes,temporary_bytes,iterations\r\n";
  for (const SweepPoint& p : points) {
    const RunFigures& f = p.figures;
    auto bytes = [&f](const char* c) {
      auto it = f.lifetime_bytes.find(c);
      return std::to_string(it == f.lifetime_bytes.end() ? 0 : it->second);
    };
    out += Csv(p.label) + "," + Csv(p.value) + "," + std::to_string(p.exit_status) + ",";
    if (f.found) {
      out += std::to_string(f.peak_bytes) + "," + bytes("persistent") + "," +
             std::to_string(f.activation_memory_bytes) + "," + bytes("gradient") + "," +
             bytes("temporary") + "," + std::to_string(f.iterations);
    } else {
      out += ",,,,,";
    }
    out += "\r\n";
  }
  return out;
}

}  // namespace cumemtrace
