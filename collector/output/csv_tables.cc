// SummaryCsvTables (exports.h): the tables of summary.json as CSV (RFC 4180: comma-separated,
// fields with a comma, quote or line break quoted, quotes doubled). Every row starts with the
// process's stream_id and pid so that tables join. Columns are documented in docs/exports.md.
#include "collector/output/exports.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::CellIf;
using internal::CsvTable;
using internal::PhaseName;

// A row that starts with the process's stream_id and pid.
template <typename... T>
CsvTable& ProcessRow(CsvTable& table, const ProcessReport& p, const T&... fields) {
  return table.Row(p.stream_id, p.pid, fields...);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> SummaryCsvTables(const Report& report) {
  CsvTable devices({"stream_id", "pid", "device", "name", "total_memory_bytes", "peak_bytes",
                    "peak_time_ns", "peak_live_allocations", "live_at_exit_count",
                    "live_at_exit_bytes", "static_peak_bytes", "tracer_bytes",
                    "released_unknown_count", "released_unknown_bytes", "kernels",
                    "kernel_busy_ns"});
  CsvTable live({"stream_id", "pid", "device", "phase", "kind", "count", "bytes"});
  CsvTable kinds({"stream_id", "pid", "device", "kind", "allocations", "releases",
                  "allocated_bytes", "released_bytes", "peak_bytes", "live_at_exit_count",
                  "live_at_exit_bytes"});
  const std::vector<std::string> origin_header = {
      "stream_id", "pid", "device", "name", "allocations", "allocated_bytes", "peak_bytes",
      "live_at_peak_bytes", "live_at_exit_bytes"};
  CsvTable apis(origin_header);
  CsvTable libraries(origin_header);
  CsvTable phases({"stream_id", "pid", "phase", "device", "occurrences", "total_ns",
                   "still_open", "bytes_at_entry", "peak_bytes", "peak_above_entry_bytes",
                   "allocated_bytes", "allocations", "freed_bytes", "frees",
                   "failed_allocations", "kernels", "first_bytes_at_entry", "first_peak_bytes",
                   "first_peak_above_entry_bytes", "steady_bytes_at_entry", "steady_peak_bytes",
                   "steady_peak_above_entry_bytes"});
  CsvTable failed({"stream_id", "pid", "time_ns", "device", "api", "caller", "requested_bytes",
                   "error_code", "error_name", "kind", "thread_id", "phase",
                   "device_in_use_bytes", "device_free_bytes", "device_total_bytes"});
  // Per-phase statistics over iterations, lifetime classes at the peak, and (when the analysis
  // kept them) one row per allocation's life.
  CsvTable iterations({"stream_id", "pid", "phase", "inferred", "device", "iterations_with_phase",
                       "warmup_ns", "time_ns_median", "time_ns_min", "time_ns_max",
                       "warmup_peak_above_entry_bytes", "peak_above_entry_bytes_median",
                       "peak_above_entry_bytes_min", "peak_above_entry_bytes_max",
                       "warmup_net_change_bytes", "net_change_bytes_median",
                       "net_change_bytes_min", "net_change_bytes_max"});
  CsvTable classes({"stream_id", "pid", "device", "lifetime_class", "bytes_at_peak",
                    "activation_memory_bytes"});
  CsvTable lifetimes({"stream_id", "pid", "device", "stream", "kind", "api", "library", "address",
                      "bytes", "birth_ns", "death_ns", "birth_phase", "death_phase",
                      "birth_iteration", "death_iteration", "lifetime_class", "category",
                      "category_source"});
  auto spread = [](CsvTable& t, const Spread& s) {
    for (int64_t v : {s.median, s.min, s.max}) t.Field(CellIf(s.count > 0, v));
  };

  for (const ProcessReport& p : report.processes) {
    for (const DeviceReport& d : p.devices) {
      const NotProgramMemory& n = d.not_program;
      ProcessRow(devices, p, d.index, d.name, CellIf(d.has_info, d.total_memory_bytes),
                 d.peak.bytes, CellIf(d.peak.seen, d.peak.time_ns), d.peak.live_count,
                 d.live_at_exit_count, d.live_at_exit_bytes, n.static_peak_bytes, n.tracer_bytes,
                 n.released_unknown_count, n.released_unknown_bytes, d.kernel_count,
                 d.kernel_busy_ns);
      for (const LiveGroup& g : d.peak.live_by_phase_and_kind) {
        ProcessRow(live, p, d.index, PhaseName(g.phase), g.kind, g.count, g.bytes);
      }
      for (const auto& [kind, k] : d.by_kind) {
        ProcessRow(kinds, p, d.index, kind, k.allocations, k.releases, k.allocated_bytes,
                   k.released_bytes, k.peak_bytes, k.live_at_exit_count, k.live_at_exit_bytes);
      }
      for (auto [table, groups] : {std::pair(&apis, &d.by_api), {&libraries, &d.by_library}}) {
        for (const auto& [name, g] : *groups) {
          ProcessRow(*table, p, d.index, name, g.allocations, g.allocated_bytes, g.peak_bytes,
                     g.live_at_peak_bytes, g.live_at_exit_bytes);
        }
      }
      for (const auto& [name, bytes] : d.lifetime_at_peak.bytes_by_class) {
        ProcessRow(classes, p, d.index, name, bytes, d.lifetime_at_peak.activation_memory_bytes);
      }
    }
    for (const PhaseReport& ph : p.phases) {
      for (const PhaseDeviceStats& d : ph.devices) {
        ProcessRow(phases, p, ph.name, d.index, ph.occurrences, ph.total_ns, ph.still_open,
                   d.bytes_at_entry, d.peak_bytes, d.peak_above_entry_bytes, d.allocated_bytes,
                   d.allocations, d.freed_bytes, d.frees, d.failed_allocations, d.kernels,
                   d.first.bytes_at_entry, d.first.peak_bytes, d.first.peak_above_entry_bytes);
        for (uint64_t v : {d.steady.bytes_at_entry, d.steady.peak_bytes,
                           d.steady.peak_above_entry_bytes}) {
          phases.Field(CellIf(d.steady_of > 0, v));
        }
      }
    }
    for (const FailedAllocationReport& f : p.failed_allocations) {
      ProcessRow(failed, p, f.time_ns, f.device, f.api, f.caller, f.requested_bytes, f.error_code,
                 f.error_name, f.kind, f.thread_id, PhaseName(f.phase), f.device_in_use_bytes,
                 f.device_free_bytes, f.device_total_bytes);
    }
    for (const IterationPhaseStats& s : p.iterations.phases) {
      for (const IterationPhaseDevice& d : s.devices) {
        ProcessRow(iterations, p, s.phase, s.inferred ? "true" : "false", d.index,
                   s.iterations_with_phase, CellIf(s.in_warmup, s.warmup_ns));
        spread(iterations, s.time_ns);
        iterations.Field(CellIf(s.in_warmup, d.warmup_peak_above_entry_bytes));
        spread(iterations, d.peak_above_entry_bytes);
        iterations.Field(CellIf(s.in_warmup, d.warmup_net_change_bytes));
        spread(iterations, d.net_change_bytes);
      }
    }
    for (const AllocationLifetime& a : p.lifetimes) {
      const bool dead = a.death_ns >= 0;
      ProcessRow(lifetimes, p, a.device, a.stream, a.kind, a.api, a.library, a.address, a.bytes,
                 a.birth_ns, CellIf(dead, a.death_ns), PhaseName(a.birth_phase),
                 dead ? PhaseName(a.death_phase) : std::string(),
                 CellIf(a.birth_iteration >= 0, a.birth_iteration),
                 CellIf(a.death_iteration >= 0, a.death_iteration), a.lifetime_class, a.category,
                 a.category.empty()        ? ""
                 : a.category_from_objects ? "objects"
                                           : "inferred");
    }
  }
  return {{"devices.csv", devices.Text()},
          {"live_at_peak.csv", live.Text()},
          {"by_kind.csv", kinds.Text()},
          {"by_api.csv", apis.Text()},
          {"by_library.csv", libraries.Text()},
          {"phases.csv", phases.Text()},
          {"failed_allocations.csv", failed.Text()},
          {"iteration_phases.csv", iterations.Text()},
          {"lifetime_at_peak.csv", classes.Text()},
          {"lifetimes.csv", lifetimes.Text()}};
}

}  // namespace cumemtrace
