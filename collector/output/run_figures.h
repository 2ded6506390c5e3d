// The headline figures of one traced run, picked from its Report, for putting runs side by
// side (`cumemtrace compare`) and for memory-vs-parameter tables (`cumemtrace sweep`): as a
// text table, CSV, or JSON (schemas cumemtrace.compare/1 and cumemtrace.sweep/1, docs/cli.md),
// each run with its difference from the first.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collector/engine/engine.h"

namespace cumemtrace {

struct PhaseFigures {
  uint64_t peak_bytes = 0;                     // highest inside the phase (all occurrences)
  int64_t peak_above_entry_median_bytes = -1;  // over iterations 2..N; -1 when unknown
  uint64_t allocated_bytes = 0;
};

struct RunFigures {
  std::string label;
  bool found = false;  // a process with device memory was found
  uint32_t pid = 0;
  uint32_t device = 0;
  uint64_t peak_bytes = 0;
  bool lifetimes = false;  // lifetime classes given (training phases; LifetimeAtPeak::given)
  std::map<std::string, uint64_t> lifetime_bytes;  // at the peak, by class
  uint64_t activation_memory_bytes = 0;            // peak - persistent
  uint64_t iterations = 0;
  // Categories (DeviceCategories::given): each one's bytes at the device peak and its own
  // peak, by name; and the device memory PyTorch never sees at the device peak.
  bool categories = false;
  std::map<std::string, uint64_t> category_at_peak;
  std::map<std::string, uint64_t> category_own_peak;
  uint64_t library_workspace_bytes = 0;
  std::map<std::string, PhaseFigures> phases;
  std::vector<std::string> phase_order;
};

// The process and the device (an index into its devices) with the highest device peak, the
// first of equals; false when no process has a device.
bool HighestPeak(const Report& report, size_t* process, size_t* slot);

// The process with the highest device peak, on its device with the highest peak.
RunFigures FiguresOf(const Report& report, const std::string& label);

// Runs side by side, with each run's difference from the first. The CSV has one row per run
// and metric: label,pid,device,metric,bytes,difference_from_first.
std::string CompareText(const std::vector<RunFigures>& runs);
std::string CompareCsv(const std::vector<RunFigures>& runs);
std::string CompareJson(const std::vector<RunFigures>& runs);

struct SweepPoint {
  std::string label;  // the command's label
  std::string value;  // the parameter's value
  int exit_status = 0;
  RunFigures figures;
  std::string page;  // the run's report.html, relative to the sweep's folder; "" if none
};
// The sweep's columns from categories, in order: (name, bytes) of a run with categories.
// parameters (parameter + buffer), gradients, optimizer state, activations, temporaries
// (each its own peak), library workspaces (device memory PyTorch never sees, at the peak),
// and the device peak.
std::vector<std::pair<std::string, int64_t>> SweepColumns(const RunFigures& f);

// A least-squares line through (x, y): the slope, in y per unit of x. False with fewer than
// two distinct x.
bool LeastSquaresSlope(const std::vector<double>& x, const std::vector<double>& y, double* slope);

// Memory versus the parameter: one row per value, one column group per label; then, where
// the values are numbers, each column's slope per unit of the parameter and which grows
// fastest.
std::string SweepText(const std::string& parameter, const std::vector<SweepPoint>& points);
std::string SweepCsv(const std::string& parameter, const std::vector<SweepPoint>& points);
std::string SweepJson(const std::string& parameter, const std::vector<SweepPoint>& points);

}  // namespace cumemtrace
