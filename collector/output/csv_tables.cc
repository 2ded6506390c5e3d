// SummaryCsvTables (exports.h): the tables of summary.json as CSV (RFC 4180: comma-separated,
// fields with a comma, quote or line break quoted, quotes doubled). Every row starts with the
// process's stream_id and pid so that tables join. Columns are documented in docs/exports.md.
#include <sstream>

#include "collector/output/exports.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::CsvTable;

// A row of a table that starts with the process's stream_id and pid.
CsvTable& ProcessRow(CsvTable& table, const ProcessReport& p) {
  return table.Row().Field(uint64_t{p.stream_id}).Field(uint64_t{p.pid});
}

std::string PhaseOrNone(const std::string& phase) { return phase.empty() ? "(no phase)" : phase; }

void OriginRows(CsvTable& table, const ProcessReport& p, const DeviceReport& d,
                const std::map<std::string, OriginStats>& groups) {
  for (const auto& [name, g] : groups) {
    ProcessRow(table, p).Field(uint64_t{d.index}).Field(name).Field(g.allocations)
        .Field(g.allocated_bytes).Field(g.peak_bytes).Field(g.live_at_peak_bytes)
        .Field(g.live_at_exit_bytes);
  }
}

std::string Signed(int64_t v) { return std::to_string(v); }

// Per-phase statistics over iterations, lifetime classes at the peak, and (when the analysis
// kept them) one row per allocation's life.
void AppendTrainingTables(const Report& report,
                          std::vector<std::pair<std::string, std::string>>* tables) {
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
                      "birth_iteration", "death_iteration", "lifetime_class"});
  auto spread = [](CsvTable& t, const Spread& s) -> CsvTable& {
    if (s.count == 0) return t.Field(std::string()).Field(std::string()).Field(std::string());
    return t.Field(Signed(s.median)).Field(Signed(s.min)).Field(Signed(s.max));
  };
  for (const ProcessReport& p : report.processes) {
    for (const IterationPhaseStats& s : p.iterations.phases) {
      for (const IterationPhaseDevice& d : s.devices) {
        ProcessRow(iterations, p).Field(s.phase).Field(s.inferred ? "true" : "false")
            .Field(uint64_t{d.index}).Field(s.iterations_with_phase)
            .Field(s.in_warmup ? Signed(s.warmup_ns) : std::string());
        spread(iterations, s.time_ns);
        iterations.Field(s.in_warmup ? Signed(d.warmup_peak_above_entry_bytes) : std::string());
        spread(iterations, d.peak_above_entry_bytes);
        iterations.Field(s.in_warmup ? Signed(d.warmup_net_change_bytes) : std::string());
        spread(iterations, d.net_change_bytes);
      }
    }
    for (const DeviceReport& d : p.devices) {
      for (const auto& [name, bytes] : d.lifetime_at_peak.bytes_by_class) {
        ProcessRow(classes, p).Field(uint64_t{d.index}).Field(name).Field(bytes)
            .Field(d.lifetime_at_peak.activation_memory_bytes);
      }
    }
    for (const AllocationLifetime& a : p.lifetimes) {
      ProcessRow(lifetimes, p).Field(uint64_t{a.device}).Field(uint64_t{a.stream}).Field(a.kind)
          .Field(a.api).Field(a.library).Field(a.address).Field(a.bytes).Field(a.birth_ns)
          .Field(a.death_ns < 0 ? std::string() : Signed(a.death_ns))
          .Field(PhaseOrNone(a.birth_phase))
          .Field(a.death_ns < 0 ? std::string() : PhaseOrNone(a.death_phase))
          .Field(a.birth_iteration < 0 ? std::string() : Signed(a.birth_iteration))
          .Field(a.death_iteration < 0 ? std::string() : Signed(a.death_iteration))
          .Field(a.lifetime_class);
    }
  }
  tables->emplace_back("iteration_phases.csv", iterations.Text());
  tables->emplace_back("lifetime_at_peak.csv", classes.Text());
  tables->emplace_back("lifetimes.csv", lifetimes.Text());
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

  for (const ProcessReport& p : report.processes) {
    for (const DeviceReport& d : p.devices) {
      ProcessRow(devices, p).Field(uint64_t{d.index}).Field(d.name)
          .Field(d.has_info ? std::to_string(d.total_memory_bytes) : std::string())
          .Field(d.peak.bytes).Field(d.peak.seen ? std::to_string(d.peak.time_ns) : std::string())
          .Field(d.peak.live_count).Field(d.live_at_exit_count).Field(d.live_at_exit_bytes)
          .Field(d.not_program.static_peak_bytes).Field(d.not_program.tracer_bytes)
          .Field(d.not_program.released_unknown_count)
          .Field(d.not_program.released_unknown_bytes).Field(d.kernel_count)
          .Field(d.kernel_busy_ns);
      for (const LiveGroup& g : d.peak.live_by_phase_and_kind) {
        ProcessRow(live, p).Field(uint64_t{d.index}).Field(PhaseOrNone(g.phase)).Field(g.kind)
            .Field(g.count).Field(g.bytes);
      }
      for (const auto& [kind, k] : d.by_kind) {
        ProcessRow(kinds, p).Field(uint64_t{d.index}).Field(kind).Field(k.allocations)
            .Field(k.releases).Field(k.allocated_bytes).Field(k.released_bytes)
            .Field(k.peak_bytes).Field(k.live_at_exit_count).Field(k.live_at_exit_bytes);
      }
      OriginRows(apis, p, d, d.by_api);
      OriginRows(libraries, p, d, d.by_library);
    }
    for (const PhaseReport& ph : p.phases) {
      for (const PhaseDeviceStats& d : ph.devices) {
        ProcessRow(phases, p).Field(ph.name).Field(uint64_t{d.index}).Field(ph.occurrences)
            .Field(ph.total_ns).Field(ph.still_open).Field(d.bytes_at_entry).Field(d.peak_bytes)
            .Field(d.peak_above_entry_bytes).Field(d.allocated_bytes).Field(d.allocations)
            .Field(d.freed_bytes).Field(d.frees).Field(d.failed_allocations).Field(d.kernels)
            .Field(d.first.bytes_at_entry).Field(d.first.peak_bytes)
            .Field(d.first.peak_above_entry_bytes);
        for (uint64_t v : {d.steady.bytes_at_entry, d.steady.peak_bytes,
                           d.steady.peak_above_entry_bytes}) {
          phases.Field(d.steady_of > 0 ? std::to_string(v) : std::string());
        }
      }
    }
    for (const FailedAllocationReport& f : p.failed_allocations) {
      ProcessRow(failed, p).Field(f.time_ns).Field(uint64_t{f.device}).Field(f.api)
          .Field(f.caller).Field(f.requested_bytes).Field(std::to_string(f.error_code))
          .Field(f.error_name).Field(f.kind).Field(uint64_t{f.thread_id})
          .Field(PhaseOrNone(f.phase)).Field(f.device_in_use_bytes).Field(f.device_free_bytes)
          .Field(f.device_total_bytes);
    }
  }
  std::vector<std::pair<std::string, std::string>> tables = {
      {"devices.csv", devices.Text()},         {"live_at_peak.csv", live.Text()},
      {"by_kind.csv", kinds.Text()},           {"by_api.csv", apis.Text()},
      {"by_library.csv", libraries.Text()},    {"phases.csv", phases.Text()},
      {"failed_allocations.csv", failed.Text()}};
  AppendTrainingTables(report, &tables);
  return tables;
}

}  // namespace cumemtrace
