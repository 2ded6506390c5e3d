// SummaryJson: the Report as "cumemtrace.summary/1" (docs/summary.md documents every key).
#include <nlohmann/json.hpp>

#include "collector/output/report_json.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

using Json = nlohmann::ordered_json;  // keys in the documented order

const char* ExitSourceName(ExitStatus::Source source) {
  switch (source) {
    case ExitStatus::Source::kLauncher: return "launcher";
    case ExitStatus::Source::kTracer: return "tracer";
    default: return "unknown";
  }
}

Json ExitJson(const ExitStatus& exit) {
  Json j;
  j["source"] = ExitSourceName(exit.source);
  j["code"] = exit.source == ExitStatus::Source::kUnknown || exit.signal != 0 ? Json() : Json(exit.code);
  j["signal"] = exit.signal != 0 ? Json(exit.signal) : Json();
  j["core_dumped"] = exit.core_dumped;
  return j;
}

Json DeviceJson(const DeviceReport& d) {
  Json j;
  j["index"] = d.index;
  j["name"] = d.has_info ? Json(d.name) : Json();
  j["uuid"] = d.has_info ? Json(d.uuid) : Json();
  j["total_memory_bytes"] = d.has_info ? Json(d.total_memory_bytes) : Json();

  Json peak;
  peak["bytes"] = d.peak.bytes;
  peak["time_ns"] = d.peak.seen ? Json(d.peak.time_ns) : Json();
  peak["time_abs_ns"] = d.peak.seen ? Json(d.peak.time_abs_ns) : Json();
  peak["live_allocations"] = d.peak.live_count;
  Json groups = Json::array();
  for (const LiveGroup& g : d.peak.live_by_phase_and_kind) {
    groups.push_back({{"phase", g.phase.empty() ? Json() : Json(g.phase)},
                      {"kind", g.kind},
                      {"count", g.count},
                      {"bytes", g.bytes}});
  }
  peak["live_by_phase_and_kind"] = std::move(groups);
  Json largest = Json::array();
  for (const LiveAllocation& a : d.peak.largest) {
    largest.push_back({{"address", a.address},
                       {"bytes", a.bytes},
                       {"kind", a.kind},
                       {"phase", a.phase.empty() ? Json() : Json(a.phase)},
                       {"api", a.api.empty() ? Json() : Json(a.api)},
                       {"thread_id", a.thread_id},
                       {"birth_ns", a.birth_ns}});
  }
  peak["largest"] = std::move(largest);
  // Only with `run --stacks`, so that summaries of traces without stacks keep their shape.
  if (!d.peak.top_stacks.empty()) {
    Json stacks = Json::array();
    for (const StackAtPeak& st : d.peak.top_stacks) {
      stacks.push_back({{"bytes", st.bytes}, {"count", st.count}, {"frame", st.frame}});
    }
    peak["top_stacks"] = std::move(stacks);
  }
  j["peak"] = std::move(peak);

  Json kinds = Json::object();
  for (const auto& [name, k] : d.by_kind) {
    kinds[name] = {{"allocations", k.allocations},
                   {"releases", k.releases},
                   {"allocated_bytes", k.allocated_bytes},
                   {"released_bytes", k.released_bytes},
                   {"peak_bytes", k.peak_bytes},
                   {"live_at_exit", {{"count", k.live_at_exit_count}, {"bytes", k.live_at_exit_bytes}}}};
  }
  j["by_kind"] = std::move(kinds);
  auto origins = [](const std::map<std::string, OriginStats>& by_origin) {
    Json out = Json::object();
    for (const auto& [name, a] : by_origin) {
      out[name] = {{"allocations", a.allocations},
                   {"allocated_bytes", a.allocated_bytes},
                   {"peak_bytes", a.peak_bytes},
                   {"live_at_peak_bytes", a.live_at_peak_bytes},
                   {"live_at_exit_bytes", a.live_at_exit_bytes}};
    }
    return out;
  };
  j["by_api"] = origins(d.by_api);
  j["by_library"] = origins(d.by_library);

  const NotProgramMemory& n = d.not_program;
  j["not_program"] = {
      {"static", {{"peak_bytes", n.static_peak_bytes},
                  {"allocations", n.static_allocations},
                  {"releases", n.static_releases}}},
      {"tracer", {{"bytes", n.tracer_bytes},
                  {"description", n.tracer_description}}},
      {"released_unknown", {{"count", n.released_unknown_count},
                            {"bytes", n.released_unknown_bytes}}}};
  j["live_at_exit"] = {{"count", d.live_at_exit_count}, {"bytes", d.live_at_exit_bytes}};
  j["kernels"] = {{"count", d.kernel_count}, {"busy_ns", d.kernel_busy_ns}};
  j["reallocated_live_address"] = d.reallocated_live_address;
  j["lifetime_at_peak"] = internal::LifetimeAtPeakJson(d.lifetime_at_peak);
  if (d.torch.present) {
    const TorchLayers& t = d.torch;
    j["torch"] = {{"allocated_peak_bytes", t.allocated_peak_bytes},
                  {"reserved_peak_bytes", t.reserved_peak_bytes},
                  {"reserved_at_allocated_peak_bytes", t.reserved_at_allocated_peak_bytes},
                  {"fragmentation_at_peak_bytes", t.fragmentation_at_peak_bytes},
                  {"other_device_peak_bytes", t.other_device_peak_bytes}};
  }
  return j;
}

Json SpreadJson(const Spread& s, bool empty_spreads) {
  if (s.count == 0 && !empty_spreads) return Json();
  return {{"count", s.count}, {"median", s.median}, {"min", s.min}, {"max", s.max}};
}

Json PhaseJson(const PhaseReport& p) {
  Json j;
  j["name"] = p.name;
  j["range_names"] = p.range_names;
  j["inferred"] = p.inferred;
  j["iteration"] = p.iteration;
  j["domain"] = p.domain.empty() ? Json() : Json(p.domain);
  j["message"] = p.message;
  j["occurrences"] = p.occurrences;
  j["total_ns"] = p.total_ns;
  j["still_open"] = p.still_open;
  j["first_open_ns"] = p.first_open_ns;
  auto window = [](const PhaseWindow& w) {
    return Json{{"bytes_at_entry", w.bytes_at_entry},
                {"peak_bytes", w.peak_bytes},
                {"peak_above_entry_bytes", w.peak_above_entry_bytes}};
  };
  Json devices = Json::array();
  for (const PhaseDeviceStats& d : p.devices) {
    Json steady = Json();
    if (d.steady_of > 0) {
      steady = window(d.steady);
      steady["of_occurrences"] = d.steady_of;
    }
    devices.push_back({{"index", d.index},
                       {"bytes_at_entry", d.bytes_at_entry},
                       {"peak_bytes", d.peak_bytes},
                       {"peak_above_entry_bytes", d.peak_above_entry_bytes},
                       {"first_occurrence", window(d.first)},
                       {"steady_state", steady},
                       {"allocated_bytes", d.allocated_bytes},
                       {"freed_bytes", d.freed_bytes},
                       {"allocations", d.allocations},
                       {"frees", d.frees},
                       {"failed_allocations", d.failed_allocations},
                       {"kernels", d.kernels}});
  }
  j["devices"] = std::move(devices);
  return j;
}

Json ProcessJson(const ProcessReport& p) {
  Json j;
  j["stream_id"] = p.stream_id;
  j["pid"] = p.pid;
  j["ppid"] = p.ppid;
  j["command_line"] = p.command_line;
  j["hostname"] = p.hostname;
  j["tracer_version"] = p.tracer_version;
  j["timestamp_clock"] = p.timestamp_clock;
  j["injection_mode"] = p.injection_mode;
  j["kernels_enabled"] = p.kernels_enabled;
  // Written only when true, so summaries of traces from before this field read the same.
  if (p.kernel_launches_enabled) j["kernel_launches_enabled"] = true;
  j["rank"] = p.rank >= 0 ? Json(p.rank) : Json();
  j["local_rank"] = p.local_rank >= 0 ? Json(p.local_rank) : Json();
  j["world_size"] = p.world_size > 0 ? Json(p.world_size) : Json();
  j["allocator"] = {{"mode", p.allocator_mode}, {"pytorch_alloc_conf", p.pytorch_alloc_conf}};
  j["exit"] = ExitJson(p.exit);
  j["complete"] = p.complete;
  j["incomplete_reasons"] = p.incomplete_reasons;
  j["damaged"] = p.damaged;
  j["damage"] = p.damage;
  Json notices = Json::array();
  for (const Notice& n : p.notices) {
    notices.push_back({{"level", n.level}, {"code", n.code}, {"text", n.text}});
  }
  j["notices"] = std::move(notices);
  if (p.torch.seen || p.torch.events > 0) {
    const TorchBridgeReport& t = p.torch;
    j["torch_bridge"] = {{"attached", t.attached},
                         {"torch_version", t.torch_version},
                         {"bridge_torch_version", t.bridge_torch_version},
                         {"library", t.library},
                         {"allocator", t.allocator},
                         {"reason", t.reason},
                         {"events", t.events},
                         {"blocks", t.blocks},
                         {"estimated_block_sizes", t.estimated_block_sizes},
                         {"counter_mismatches", t.counter_mismatches},
                         {"lost_events", t.lost_events},
                         {"unknown_frees", t.unknown_frees},
                         {"out_of_memory", t.out_of_memory}};
  }
  Json dropped = Json::array();
  for (const DropSummary& d : p.dropped) {
    Json windows = Json::array();
    for (const DropWindow& w : d.windows) {
      windows.push_back({{"count", w.count},
                         {"first_ns", w.has_window ? Json(w.first_ns) : Json()},
                         {"last_ns", w.has_window ? Json(w.last_ns) : Json()}});
    }
    dropped.push_back({{"source", d.source}, {"count", d.total}, {"windows", std::move(windows)}});
  }
  j["dropped"] = std::move(dropped);
  Json gaps = Json::array();
  for (const SequenceGap& g : p.sequence_gaps) {
    gaps.push_back({{"after_sequence", g.at_start ? Json() : Json(g.after_sequence)},
                    {"next_sequence", g.next_sequence},
                    {"missing", g.missing}});
  }
  j["lost_batches"] = {{"count", p.lost_batches}, {"gaps", std::move(gaps)}};
  j["batches"] = p.batches;
  j["events"] = p.events;
  // Only when some arrived too late for the reorder window: absent means none.
  if (p.late_events > 0) j["late_events"] = p.late_events;
  j["first_timestamp_abs_ns"] = p.first_timestamp_abs_ns;
  j["duration_ns"] = p.duration_ns;
  Json threads = Json::array();
  for (const auto& [id, name] : p.thread_names) threads.push_back({{"thread_id", id}, {"name", name}});
  j["threads"] = std::move(threads);
  Json devices = Json::array();
  for (const DeviceReport& d : p.devices) devices.push_back(DeviceJson(d));
  j["devices"] = std::move(devices);
  Json phases = Json::array();
  for (const PhaseReport& ph : p.phases) phases.push_back(PhaseJson(ph));
  j["phases"] = std::move(phases);
  j["rolled_up_ranges"] = p.rolled_up_ranges;
  const PhaseInferenceReport& inf = p.phase_inference;
  j["phase_inference"] = {{"applied", inf.applied},
                          {"reason", inf.reason},
                          {"signal", inf.signal.empty() ? Json() : Json(inf.signal)},
                          {"calling_thread", inf.calling_thread},
                          {"autograd_threads", inf.autograd_threads},
                          {"backward_passes", inf.backward_passes},
                          {"optimizers_inferred", inf.optimizers_inferred}};
  j["iterations"] = internal::IterationsJson(p.iterations);
  j["nvtx_marks"] = p.nvtx_marks;
  j["unmatched_range_closes"] = p.unmatched_range_closes;
  auto failures = [](const std::vector<FailedAllocationReport>& list) {
    Json out = Json::array();
    for (const FailedAllocationReport& f : list) {
      out.push_back({{"time_ns", f.time_ns},
                      {"time_abs_ns", f.time_abs_ns},
                      {"api", f.api},
                      {"caller", f.caller.empty() ? Json() : Json(f.caller)},
                      {"requested_bytes", f.requested_bytes},
                      {"error_code", f.error_code},
                      {"error_name", f.error_name},
                      {"kind", f.kind},
                      {"device", f.device},
                      {"device_free_bytes", f.device_free_bytes},
                      {"device_total_bytes", f.device_total_bytes},
                      {"thread_id", f.thread_id},
                      {"phase", f.phase.empty() ? Json() : Json(f.phase)},
                      {"device_in_use_bytes", f.device_in_use_bytes}});
    }
    return out;
  };
  j["failed_allocations"] = failures(p.failed_allocations);
  j["driver_retries"] = failures(p.driver_retries);
  return j;
}

}  // namespace

namespace internal {

Json IterationsJson(const IterationReport& r, bool empty_spreads) {
  Json j;
  j["source"] = r.source.empty() ? Json() : Json(r.source);
  j["range"] = r.range.empty() ? Json() : Json(r.range);
  j["note"] = r.note.empty() ? Json() : Json(r.note);
  j["count"] = r.count;
  Json windows = Json::array();
  for (const auto& [start, end] : r.windows_ns) windows.push_back({start, end});
  j["windows_ns"] = std::move(windows);
  j["warmup_ns"] = r.count > 0 ? Json(r.warmup_ns) : Json();
  j["duration_ns"] = SpreadJson(r.duration_ns, empty_spreads);
  Json phases = Json::array();
  for (const IterationPhaseStats& s : r.phases) {
    Json devices = Json::array();
    for (const IterationPhaseDevice& d : s.devices) {
      devices.push_back(
          {{"index", d.index},
           {"warmup_peak_above_entry_bytes",
            s.in_warmup ? Json(d.warmup_peak_above_entry_bytes) : Json()},
           {"warmup_net_change_bytes", s.in_warmup ? Json(d.warmup_net_change_bytes) : Json()},
           {"peak_above_entry_bytes", SpreadJson(d.peak_above_entry_bytes, empty_spreads)},
           {"net_change_bytes", SpreadJson(d.net_change_bytes, empty_spreads)}});
    }
    phases.push_back({{"phase", s.phase},
                      {"inferred", s.inferred},
                      {"iterations_with_phase", s.iterations_with_phase},
                      {"warmup_ns", s.in_warmup ? Json(s.warmup_ns) : Json()},
                      {"time_ns", SpreadJson(s.time_ns, empty_spreads)},
                      {"devices", std::move(devices)}});
  }
  j["phases"] = std::move(phases);
  return j;
}

// null without training phases: no classes, no activation figure (report.h).
Json LifetimeAtPeakJson(const LifetimeAtPeak& l) {
  if (!l.given) return nullptr;
  return {{"bytes_by_class", l.bytes_by_class}, {"activation_memory_bytes", l.activation_memory_bytes}};
}

}  // namespace internal

std::string SummaryJson(const Report& report) {
  Json j;
  j["schema"] = "cumemtrace.summary/1";
  j["trace_file"] = report.trace_file;
  j["truncated"] = report.truncated;
  j["truncation_reason"] = report.truncated ? Json(report.truncation_reason) : Json();
  Json processes = Json::array();
  for (const ProcessReport& p : report.processes) processes.push_back(ProcessJson(p));
  j["processes"] = std::move(processes);
  if (!report.job.ranks.empty()) {
    const JobReport& job = report.job;
    Json ranks = Json::array();
    for (const RankFigures& r : job.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"local_rank", r.local_rank >= 0 ? Json(r.local_rank) : Json()},
                       {"pid", r.pid},
                       {"hostname", r.hostname},
                       {"device", r.device},
                       {"device_uuid", r.device_uuid},
                       {"peak_bytes", r.peak_bytes},
                       {"peak_realtime_ns", r.peak_abs_ns},
                       {"nccl_bytes_at_peak", r.nccl_bytes_at_peak},
                       {"phase_peak_bytes", r.phase_peak_bytes}});
    }
    j["job"] = {{"world_size", job.world_size > 0 ? Json(job.world_size) : Json()},
                {"hosts", job.hosts},
                {"ranks", std::move(ranks)},
                {"highest_rank", job.highest_rank},
                {"highest_peak_bytes", job.highest_peak_bytes},
                {"lowest_peak_bytes", job.lowest_peak_bytes},
                {"imbalance", job.imbalance}};
  } else {
    j["job"] = Json();
  }
  // Replace invalid UTF-8 (command lines are arbitrary bytes) instead of throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace cumemtrace
