// SummaryJson: the Report as "cumemtrace.summary/1" (docs/summary.md documents every key).
#include <nlohmann/json.hpp>

#include "collector/output/report_json.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

using Json = nlohmann::ordered_json;  // keys in the documented order
using internal::OrNull;

// A JSON array of `to_json` of each item.
template <typename List, typename F>
Json Array(const List& list, F to_json) {
  Json out = Json::array();
  for (const auto& item : list) out.push_back(to_json(item));
  return out;
}

// A JSON object of `to_json` of each value of a map, by its key.
template <typename Map, typename F>
Json Object(const Map& map, F to_json) {
  Json out = Json::object();
  for (const auto& [key, value] : map) out[key] = to_json(value);
  return out;
}

Json ExitJson(const ExitStatus& exit) {
  const char* source = exit.source == ExitStatus::Source::kLauncher ? "launcher"
                       : exit.source == ExitStatus::Source::kTracer ? "tracer"
                                                                    : "unknown";
  return {
      {"source", source},
      {"code", OrNull(exit.source != ExitStatus::Source::kUnknown && exit.signal == 0, exit.code)},
      {"signal", OrNull(exit.signal != 0, exit.signal)},
      {"core_dumped", exit.core_dumped}};
}

Json OriginsJson(const std::map<std::string, OriginStats>& by_origin) {
  return Object(by_origin, [](const OriginStats& a) -> Json {
    return {{"allocations", a.allocations},
            {"allocated_bytes", a.allocated_bytes},
            {"peak_bytes", a.peak_bytes},
            {"live_at_peak_bytes", a.live_at_peak_bytes},
            {"live_at_exit_bytes", a.live_at_exit_bytes}};
  });
}

// Where a tensor was born (`run --modules`, `--ops`).
Json BornJson(const LiveAllocation& a) {
  Json j = {{"module", OrNull(a.module)},
            {"operator", OrNull(a.op)},
            {"inner_operator", OrNull(a.inner_op)},
            {"backward", a.backward},
            {"text", BornText(a)}};
  if (a.backward) {
    j["linked"] = a.linked;
    j["module_from_forward"] = a.module_inherited;
    j["module_from_earlier_op"] = a.module_from_earlier;
    j["forward_operator"] = OrNull(a.forward_op);
    j["forward_inner_operator"] = OrNull(a.forward_inner_op);
    j["forward_line"] = OrNull(a.forward_line);
  }
  return j;
}

Json DeviceJson(const DeviceReport& d) {
  Json peak = {{"bytes", d.peak.bytes},
               {"time_ns", OrNull(d.peak.seen, d.peak.time_ns)},
               {"time_abs_ns", OrNull(d.peak.seen, d.peak.time_abs_ns)},
               {"live_allocations", d.peak.live_count},
               {"live_by_phase_and_kind", Array(d.peak.live_by_phase_and_kind,
                                                [](const LiveGroup& g) -> Json {
                                                  return {{"phase", OrNull(g.phase)},
                                                          {"kind", g.kind},
                                                          {"count", g.count},
                                                          {"bytes", g.bytes}};
                                                })},
               {"largest", Array(d.peak.largest, [](const LiveAllocation& a) -> Json {
                  Json j = {{"address", a.address},  {"bytes", a.bytes},
                            {"kind", a.kind},        {"phase", OrNull(a.phase)},
                            {"api", OrNull(a.api)},  {"thread_id", a.thread_id},
                            {"birth_ns", a.birth_ns}};
                  // Only with `run --modules` / `--ops`, as top_stacks below.
                  if (a.attributed) j["born"] = BornJson(a);
                  return j;
                })}};
  // Only with `run --stacks`, so that summaries of traces without stacks keep their shape.
  if (!d.peak.top_stacks.empty()) {
    peak["top_stacks"] = Array(d.peak.top_stacks, [](const StackAtPeak& st) -> Json {
      return {{"bytes", st.bytes}, {"count", st.count}, {"frame", st.frame}};
    });
  }
  const NotProgramMemory& n = d.not_program;
  Json j = {{"index", d.index},
            {"name", OrNull(d.has_info, d.name)},
            {"uuid", OrNull(d.has_info, d.uuid)},
            {"total_memory_bytes", OrNull(d.has_info, d.total_memory_bytes)},
            {"peak", std::move(peak)},
            {"by_kind",
             Object(d.by_kind,
                    [](const KindStats& k) -> Json {
                      return {{"allocations", k.allocations},
                              {"releases", k.releases},
                              {"allocated_bytes", k.allocated_bytes},
                              {"released_bytes", k.released_bytes},
                              {"peak_bytes", k.peak_bytes},
                              {"live_at_exit",
                               {{"count", k.live_at_exit_count}, {"bytes", k.live_at_exit_bytes}}}};
                    })},
            {"by_api", OriginsJson(d.by_api)},
            {"by_library", OriginsJson(d.by_library)},
            {"not_program",
             {{"static",
               {{"peak_bytes", n.static_peak_bytes},
                {"allocations", n.static_allocations},
                {"releases", n.static_releases}}},
              {"tracer", {{"bytes", n.tracer_bytes}, {"description", n.tracer_description}}},
              {"released_unknown",
               {{"count", n.released_unknown_count}, {"bytes", n.released_unknown_bytes}}}}},
            {"live_at_exit", {{"count", d.live_at_exit_count}, {"bytes", d.live_at_exit_bytes}}},
            {"kernels", {{"count", d.kernel_count}, {"busy_ns", d.kernel_busy_ns}}},
            {"reallocated_live_address", d.reallocated_live_address},
            {"lifetime_at_peak", internal::LifetimeAtPeakJson(d.lifetime_at_peak)},
            {"categories", internal::CategoriesJson(d.categories)}};
  if (d.attribution.given) j["attribution"] = internal::AttributionJson(d.attribution);
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
  auto window = [](const PhaseWindow& w) -> Json {
    return {{"bytes_at_entry", w.bytes_at_entry},
            {"peak_bytes", w.peak_bytes},
            {"peak_above_entry_bytes", w.peak_above_entry_bytes}};
  };
  return {{"name", p.name},
          {"range_names", p.range_names},
          {"inferred", p.inferred},
          {"iteration", p.iteration},
          {"domain", OrNull(p.domain)},
          {"message", p.message},
          {"occurrences", p.occurrences},
          {"total_ns", p.total_ns},
          {"still_open", p.still_open},
          {"first_open_ns", p.first_open_ns},
          {"devices", Array(p.devices, [&window](const PhaseDeviceStats& d) -> Json {
             Json steady;
             if (d.steady_of > 0) {
               steady = window(d.steady);
               steady["of_occurrences"] = d.steady_of;
             }
             return {{"index", d.index},
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
                     {"kernels", d.kernels}};
           })}};
}

Json HeldJson(const std::vector<HeldGroup>& groups) {
  return Array(groups, [](const HeldGroup& g) -> Json {
    return {{"name", OrNull(g.name)}, {"bytes", g.bytes}, {"count", g.count}};
  });
}

Json WouldFitJson(const WouldFit& w) {
  return {{"fits", w.fits},
          {"available_bytes", w.available_bytes},
          {"needed_bytes", w.needed_bytes},
          {"short_by_bytes", w.short_by_bytes}};
}

Json PostMortemJson(const OomPostMortem& pm) {
  const bool known = pm.cache_known;
  return {{"reason", pm.reason},
          {"explanation", pm.explanation},
          {"cache_known", known},
          {"request_bytes", pm.request_bytes},
          {"pool", OrNull(pm.pool)},
          {"stream", OrNull(!pm.pool.empty(), pm.stream)},
          {"device_free_bytes", pm.device_free_bytes},
          {"expandable_segments_on", pm.expandable_segments_on},
          {"cache_free_bytes", OrNull(known, pm.cache_free_bytes)},
          {"pool_free_bytes", OrNull(known && !pm.pool.empty(), pm.pool_free_bytes)},
          {"largest_free_block_bytes",
           OrNull(known && !pm.pool.empty(), pm.largest_free_block_bytes)},
          {"wholly_free_segment_bytes", OrNull(known, pm.wholly_free_segment_bytes)},
          {"released_before_bytes", OrNull(known, pm.released_before_bytes)},
          {"largest_request_that_fits_bytes", pm.largest_request_that_fits_bytes},
          {"would_fit",
           {{"expandable_segments", known ? WouldFitJson(pm.expandable_segments) : Json()},
            {"empty_cache", known ? WouldFitJson(pm.empty_cache) : Json()},
            {"smaller_request", WouldFitJson(pm.smaller_request)}}},
          {"pools", Array(pm.pools,
                          [](const CachePoolState& c) -> Json {
                            return {{"pool", c.pool},
                                    {"stream", c.stream},
                                    {"pool_id", {c.pool_id_first, c.pool_id_second}},
                                    {"expandable", c.expandable},
                                    {"segments", c.segments},
                                    {"segment_bytes", c.segment_bytes},
                                    {"allocated_bytes", c.allocated_bytes},
                                    {"free_bytes", c.free_bytes},
                                    {"free_blocks", c.free_blocks},
                                    {"largest_free_block_bytes", c.largest_free_block_bytes},
                                    {"wholly_free_segment_bytes", c.wholly_free_segment_bytes}};
                          })},
          {"held_bytes", pm.held_bytes},
          {"held_by_phase", HeldJson(pm.held_by_phase)},
          {"held_by_kind", HeldJson(pm.held_by_kind)},
          {"held_by_library", HeldJson(pm.held_by_library)},
          {"held_by_stack", HeldJson(pm.held_by_stack)},
          {"held_tensor_bytes", OrNull(pm.categories_given, pm.held_tensor_bytes)},
          {"held_by_category", pm.categories_given ? HeldJson(pm.held_by_category) : Json()},
          {"largest_held", Array(pm.largest_held, [&pm](const HeldBlock& b) -> Json {
             return {{"address", b.address},
                     {"bytes", b.bytes},
                     {"time_ns", b.time_ns},
                     {"phase", OrNull(b.phase)},
                     {"kind", b.kind},
                     {"library", OrNull(b.library)},
                     {"stack", OrNull(b.stack)},
                     {"category", pm.categories_given ? OrNull(b.category) : Json()},
                     {"category_from_objects", b.category_from_objects}};
           })}};
}

// `post_mortems`: the failures the program saw; retries have none.
Json FailuresJson(const std::vector<FailedAllocationReport>& list, bool post_mortems) {
  return Array(list, [post_mortems](const FailedAllocationReport& f) -> Json {
    return {{"time_ns", f.time_ns},
            {"time_abs_ns", f.time_abs_ns},
            {"api", f.api},
            {"caller", OrNull(f.caller)},
            {"requested_bytes", f.requested_bytes},
            {"error_code", f.error_code},
            {"error_name", f.error_name},
            {"kind", f.kind},
            {"device", f.device},
            {"device_free_bytes", f.device_free_bytes},
            {"device_total_bytes", f.device_total_bytes},
            {"thread_id", f.thread_id},
            {"phase", OrNull(f.phase)},
            {"device_in_use_bytes", f.device_in_use_bytes},
            {"post_mortem", post_mortems && !f.post_mortem.reason.empty()
                                ? PostMortemJson(f.post_mortem)
                                : Json()}};
  });
}

Json ProcessJson(const ProcessReport& p) {
  Json j = {{"stream_id", p.stream_id},
            {"pid", p.pid},
            {"ppid", p.ppid},
            {"command_line", p.command_line},
            {"hostname", p.hostname},
            {"tracer_version", p.tracer_version},
            {"timestamp_clock", p.timestamp_clock},
            {"injection_mode", p.injection_mode},
            {"kernels_enabled", p.kernels_enabled}};
  // Written only when true, so summaries of traces from before this field read the same.
  if (p.kernel_launches_enabled) j["kernel_launches_enabled"] = true;
  j.update(
      {{"rank", OrNull(p.rank >= 0, p.rank)},
       {"local_rank", OrNull(p.local_rank >= 0, p.local_rank)},
       {"world_size", OrNull(p.world_size > 0, p.world_size)},
       {"allocator", {{"mode", p.allocator_mode}, {"pytorch_alloc_conf", p.pytorch_alloc_conf}}},
       {"exit", ExitJson(p.exit)},
       {"complete", p.complete},
       {"incomplete_reasons", p.incomplete_reasons},
       {"damaged", p.damaged},
       {"damage", p.damage},
       {"notices", Array(p.notices, [](const Notice& n) -> Json {
          return {{"level", n.level}, {"code", n.code}, {"text", n.text}};
        })}});
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
                         {"rounded_blocks", t.rounded_blocks},
                         {"estimated_block_sizes", t.estimated_block_sizes},
                         {"counter_mismatches", t.counter_mismatches},
                         {"lost_events", t.lost_events},
                         {"unknown_frees", t.unknown_frees},
                         {"out_of_memory", t.out_of_memory}};
  }
  j["dropped"] = Array(p.dropped, [](const DropSummary& d) -> Json {
    return {{"source", d.source},
            {"count", d.total},
            {"windows", Array(d.windows, [](const DropWindow& w) -> Json {
               return {{"count", w.count},
                       {"first_ns", OrNull(w.has_window, w.first_ns)},
                       {"last_ns", OrNull(w.has_window, w.last_ns)}};
             })}};
  });
  j["lost_batches"] = {{"count", p.lost_batches},
                       {"gaps", Array(p.sequence_gaps, [](const SequenceGap& g) -> Json {
                          return {{"after_sequence", OrNull(!g.at_start, g.after_sequence)},
                                  {"next_sequence", g.next_sequence},
                                  {"missing", g.missing}};
                        })}};
  j["batches"] = p.batches;
  j["events"] = p.events;
  // Only when some arrived too late for the reorder window: absent means none.
  if (p.late_events > 0) j["late_events"] = p.late_events;
  const PhaseInferenceReport& inf = p.phase_inference;
  j.update({{"first_timestamp_abs_ns", p.first_timestamp_abs_ns},
            {"duration_ns", p.duration_ns},
            {"threads", Array(p.thread_names,
                              [](const auto& thread) -> Json {
                                return {{"thread_id", thread.first}, {"name", thread.second}};
                              })},
            {"devices", Array(p.devices, DeviceJson)},
            {"phases", Array(p.phases, PhaseJson)},
            {"rolled_up_ranges", p.rolled_up_ranges},
            {"phase_inference",
             {{"applied", inf.applied},
              {"reason", inf.reason},
              {"signal", OrNull(inf.signal)},
              {"calling_thread", inf.calling_thread},
              {"autograd_threads", inf.autograd_threads},
              {"backward_passes", inf.backward_passes},
              {"optimizers_inferred", inf.optimizers_inferred}}},
            {"iterations", internal::IterationsJson(p.iterations)},
            {"categories",
             {{"given", p.categories_given},
              {"tags", p.category_tags},
              {"tags_unmatched", p.category_tags_unmatched},
              {"source", !p.categories_given   ? Json()
                         : p.category_tags > 0 ? Json("objects_and_inferred")
                                               : Json("inferred")}}},
            {"nvtx_marks", p.nvtx_marks},
            {"unmatched_range_closes", p.unmatched_range_closes},
            {"failed_allocations", FailuresJson(p.failed_allocations, true)},
            {"driver_retries", FailuresJson(p.driver_retries, false)}});
  return j;
}

}  // namespace

namespace internal {

Json IterationsJson(const IterationReport& r, bool empty_spreads) {
  auto device = [&](bool in_warmup, const IterationPhaseDevice& d) -> Json {
    return {{"index", d.index},
            {"warmup_peak_above_entry_bytes", OrNull(in_warmup, d.warmup_peak_above_entry_bytes)},
            {"warmup_net_change_bytes", OrNull(in_warmup, d.warmup_net_change_bytes)},
            {"peak_above_entry_bytes", SpreadJson(d.peak_above_entry_bytes, empty_spreads)},
            {"net_change_bytes", SpreadJson(d.net_change_bytes, empty_spreads)}};
  };
  return {{"source", OrNull(r.source)},
          {"range", OrNull(r.range)},
          {"note", OrNull(r.note)},
          {"count", r.count},
          {"windows_ns", r.windows_ns},
          {"warmup_ns", OrNull(r.count > 0, r.warmup_ns)},
          {"duration_ns", SpreadJson(r.duration_ns, empty_spreads)},
          {"phases", Array(r.phases, [&](const IterationPhaseStats& s) -> Json {
             return {{"phase", s.phase},
                     {"inferred", s.inferred},
                     {"iterations_with_phase", s.iterations_with_phase},
                     {"warmup_ns", OrNull(s.in_warmup, s.warmup_ns)},
                     {"time_ns", SpreadJson(s.time_ns, empty_spreads)},
                     {"devices", Array(s.devices, [&](const IterationPhaseDevice& d) {
                        return device(s.in_warmup, d);
                      })}};
           })}};
}

static Json CategoryBytesJson(const CategoryBytes& b) {
  return {{"bytes", b.bytes},
          {"objects_bytes", b.objects_bytes},
          {"inferred_bytes", b.bytes - b.objects_bytes}};
}

// Beside the tensors at one peak: PyTorch's cache and the memory it never sees.
static Json BesideTensorsJson(uint64_t cache, uint64_t not_torch,
                       const std::map<std::string, uint64_t>& by_library) {
  return {{"torch_cache_bytes", cache},
          {"not_torch_bytes", not_torch},
          {"not_torch_by_library", by_library}};
}

Json CategoriesJson(const DeviceCategories& c) {
  if (!c.given) return Json();
  Json by_category = Json::object();
  for (const char* name : kCategoryOrder) {
    auto it = c.by_category.find(name);
    const CategoryFigures f = it == c.by_category.end() ? CategoryFigures() : it->second;
    Json own = CategoryBytesJson(f.own_peak);
    own["time_ns"] = OrNull(f.allocations > 0, f.own_peak_time_ns);
    by_category[name] = {{"allocations", f.allocations},
                         {"objects_allocations", f.objects_allocations},
                         {"at_tensor_peak", CategoryBytesJson(f.at_tensor_peak)},
                         {"at_device_peak", CategoryBytesJson(f.at_device_peak)},
                         {"at_end", CategoryBytesJson(f.at_end)},
                         {"own_peak", std::move(own)}};
  }
  return {{"tensor_layer", c.tensor_layer},
          {"tensor_peak", {{"bytes", c.tensor_peak_bytes}, {"time_ns", c.tensor_peak_time_ns}}},
          {"at_tensor_peak",
           BesideTensorsJson(c.cache_at_tensor_peak_bytes, c.not_torch_at_tensor_peak_bytes,
                             c.not_torch_at_tensor_peak_by_library)},
          {"at_device_peak",
           BesideTensorsJson(c.cache_at_device_peak_bytes, c.not_torch_at_device_peak_bytes,
                             c.not_torch_at_device_peak_by_library)},
          {"by_category", std::move(by_category)}};
}

// null without training phases: no classes, no activation figure (report.h).
Json LifetimeAtPeakJson(const LifetimeAtPeak& l) {
  if (!l.given) return nullptr;
  return {{"bytes_by_class", l.bytes_by_class},
          {"activation_memory_bytes", l.activation_memory_bytes}};
}

// A device's tensors by module and operator (DeviceAttribution::given).
Json AttributionJson(const DeviceAttribution& a) {
  return {{"tensor_peak", {{"bytes", a.tensor_peak_bytes}, {"time_ns", a.tensor_peak_time_ns}}},
          {"by_module",
           Array(a.modules,
                 [](const ModuleBytes& m) -> Json {
                   return {{"module", OrNull(m.module)}, {"depth", m.depth},
                           {"bytes", m.bytes},           {"self_bytes", m.self_bytes},
                           {"count", m.count},           {"own_peak_bytes", m.own_peak_bytes}};
                 })},
          {"by_operator",
           Array(a.operators,
                 [](const OperatorBytes& o) -> Json {
                   return {{"operator", OrNull(o.op)}, {"bytes", o.bytes}, {"count", o.count}};
                 })},
          {"backward",
           {{"allocations", a.backward_allocations},
            {"bytes", a.backward_bytes},
            {"unlinked_allocations", a.unlinked_backward_allocations},
            {"unlinked_bytes", a.unlinked_backward_bytes}}}};
}

}  // namespace internal

std::string SummaryJson(const Report& report) {
  const JobReport& job = report.job;
  Json j = {{"schema", "cumemtrace.summary/1"},
            {"trace_file", report.trace_file},
            {"truncated", report.truncated},
            {"truncation_reason", OrNull(report.truncated, report.truncation_reason)},
            {"processes", Array(report.processes, ProcessJson)},
            {"job", nullptr}};
  auto rank = [](const RankFigures& r) -> Json {
    return {{"rank", r.rank},
            {"local_rank", OrNull(r.local_rank >= 0, r.local_rank)},
            {"pid", r.pid},
            {"hostname", r.hostname},
            {"device", r.device},
            {"device_uuid", r.device_uuid},
            {"peak_bytes", r.peak_bytes},
            {"peak_realtime_ns", r.peak_abs_ns},
            {"nccl_bytes_at_peak", r.nccl_bytes_at_peak},
            {"phase_peak_bytes", r.phase_peak_bytes}};
  };
  if (!job.ranks.empty()) {
    j["job"] = {{"world_size", OrNull(job.world_size > 0, job.world_size)},
                {"hosts", job.hosts},
                {"ranks", Array(job.ranks, rank)},
                {"highest_rank", job.highest_rank},
                {"highest_peak_bytes", job.highest_peak_bytes},
                {"lowest_peak_bytes", job.lowest_peak_bytes},
                {"imbalance", job.imbalance}};
  }
  // Replace invalid UTF-8 (command lines are arbitrary bytes) instead of throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace cumemtrace
