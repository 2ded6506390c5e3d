// WriteViewerHtml (exports.h): viewer/src/template.html (with the viewer's CSS and JS already
// inlined at build time, viewer/embed.cmake) with this trace's data put in place of its
// {{CUMEMTRACE_DATA}} marker. The data is JSON whose big columns are base64 typed arrays
// (little-endian, as every browser's typed arrays are), so that a million allocations load as
// a few array views rather than a million parsed objects. viewer/src/viewer.js reads it; the
// layout is "cumemtrace.viewer/1", described in docs/exports.md. One page shows one of three
// things, chosen by the data's "mode": a trace ("report"), traced runs on one time axis
// ("compare"), or memory against a swept parameter ("sweep").
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string_view>

#include "collector/output/category_series.h"
#include "collector/output/exports.h"
#include "collector/output/report_json.h"
#include "collector/output/slice_tracks.h"
#include "collector/engine/engine.h"

namespace cumemtrace {
namespace internal {
extern const char kViewerHtml[];
extern const size_t kViewerHtmlSize;
}  // namespace internal

namespace {

using internal::OrNull;
using nlohmann::json;

// Kernel activity is drawn as busy time per bin over the whole run: ten million kernels
// cannot be embedded one by one and still load in a second.
constexpr size_t kKernelBins = 2000;

// A column of the page data: the values' bytes in base64.
template <typename T>
std::string Column(const std::vector<T>& values) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const size_t size = values.size() * sizeof(T);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const size_t n = std::min<size_t>(3, size - i);  // bytes in this group: 4 - n pad chars
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k) group = (group << 8) | (k < n ? bytes[i + k] : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The viewer indexes lifetime classes in kLifetimeClassOrder (report.h); an allocation whose
// class is unknown gets kUnknownLifetimeClass.
constexpr uint8_t kUnknownLifetimeClass = 0xFF;

// A device's memory series and peak, which the report and compare pages both show.
json PeakData(const DeviceReport& dr, const DeviceTimeline& dt) {
  std::vector<double> step_time, step_bytes;
  step_time.reserve(dt.device_memory.size());
  step_bytes.reserve(dt.device_memory.size());
  for (const MemoryStep& s : dt.device_memory) {
    step_time.push_back(static_cast<double>(s.time_ns));
    step_bytes.push_back(static_cast<double>(s.bytes));
  }
  return {{"peak_bytes", dr.peak.bytes},
          {"peak_time_ns", OrNull(dr.peak.seen, dr.peak.time_ns)},
          {"peak_step", OrNull(dt.peak_step != kNoStep, dt.peak_step)},
          {"lifetime_at_peak", internal::LifetimeAtPeakJson(dr.lifetime_at_peak)},
          {"steps",
           {{"n", step_time.size()}, {"time_ns", Column(step_time)},
            {"bytes", Column(step_bytes)}}}};
}

// A device's memory by category (docs/exports.md "categories"): the report's figures as
// summary.json gives them, and the layers over time the chart stacks (category_series.h), at
// most kCategorySeriesPoints + 2 points.
json CategoryData(const DeviceCategories& c, const internal::CategorySeries& s) {
  const std::vector<double> bytes(s.bytes.begin(), s.bytes.end());
  return {{"figures", internal::CategoriesJson(c)},
          {"layers", s.layers},
          {"n", s.points()},
          {"step", Column(s.step)},
          {"time_ns", Column(s.time_ns)},
          {"bytes", Column(bytes)},
          {"sampled", s.sampled},
          {"max_points", internal::kCategorySeriesPoints},
          {"device_peak_point", OrNull(s.device_peak_point != kNoStep, s.device_peak_point)},
          {"tensor_peak_point", OrNull(s.tensor_peak_point != kNoStep, s.tensor_peak_point)}};
}

json DeviceData(const ProcessReport& p, const ProcessTimeline& t, size_t slot) {
  const DeviceTimeline& dt = t.devices[slot];
  const DeviceReport& dr = p.devices[slot];
  std::vector<uint32_t> birth, death, api, library, attribution;
  std::vector<int32_t> phase, stack;
  std::vector<double> bytes;
  std::vector<uint8_t> kind, lifetime_class;
  for (const TimelineAllocation& a : t.allocations) {
    if (a.device_slot != slot || !IsDeviceMemory(a.kind)) continue;
    if (!t.stacks.empty()) stack.push_back(a.stack);
    if (a.lifetime_class != nullptr) {
      const auto* end = std::end(kLifetimeClassOrder);
      const auto* it = std::find_if(std::begin(kLifetimeClassOrder), end, [&](const char* c) {
        return std::string_view(c) == a.lifetime_class;
      });
      lifetime_class.push_back(it == end ? kUnknownLifetimeClass
                                         : static_cast<uint8_t>(it - kLifetimeClassOrder));
    }
    birth.push_back(a.birth_step);
    death.push_back(a.death_step);
    bytes.push_back(static_cast<double>(a.bytes));
    phase.push_back(a.phase);
    api.push_back(a.api);
    library.push_back(a.library);
    kind.push_back(a.kind);
    if (t.attribution) attribution.push_back(a.attribution);
  }
  std::vector<float> busy(kKernelBins, 0.0f);
  const double width = std::max<double>(1.0, static_cast<double>(p.duration_ns)) / kKernelBins;
  for (const KernelSlice& k : t.kernels) {
    if (k.device != dt.index) continue;
    const double start = static_cast<double>(k.start_ns), end = static_cast<double>(k.end_ns);
    for (auto bin = static_cast<size_t>(start / width); bin < kKernelBins; ++bin) {
      const double lo = std::max(start, bin * width), hi = std::min(end, (bin + 1) * width);
      if (hi <= lo) break;
      busy[bin] += static_cast<float>((hi - lo) / width);
    }
  }
  json d = PeakData(dr, dt);
  d.update({{"index", dr.index},
            {"name", OrNull(dr.has_info, dr.name)},
            {"total_memory_bytes", OrNull(dr.has_info, dr.total_memory_bytes)},
            {"peak_live_allocations", dr.peak.live_count},
            {"kernel_count", dr.kernel_count},
            {"allocations",
             {{"n", birth.size()}, {"birth_step", Column(birth)}, {"death_step", Column(death)},
              {"bytes", Column(bytes)}, {"phase", Column(phase)}, {"api", Column(api)},
              {"library", Column(library)}, {"kind", Column(kind)}}},
            {"kernel_busy", {{"bins", kKernelBins}, {"fraction", Column(busy)}}}});
  // Only for a process with categories (null otherwise: CUDA programs without training phases).
  d["categories"] = dr.categories.given
                        ? CategoryData(dr.categories,
                                       internal::MakeCategorySeries(t, slot, dr.categories))
                        : json();
  // Only with the analysis' lifetimes; the viewer then groups a live set by class as well.
  if (!lifetime_class.empty()) d["allocations"]["lifetime_class"] = Column(lifetime_class);
  // With `run --stacks`: index into the process' "stacks".stacks, -1 for none (int32).
  if (!t.stacks.empty()) d["allocations"]["stack"] = Column(stack);
  // With `run --modules` / `--ops`: each allocation's attribution (index into the process'
  // "attributions", 0: none), one uint32 where its module and operators as columns would take
  // 17 bytes; the device's figures by module and operator as summary.json has them.
  if (t.attribution) {
    d["allocations"]["attribution"] = Column(attribution);
    if (dr.attribution.given) d["attribution"] = internal::AttributionJson(dr.attribution);
  }
  return d;
}

// The process' distinct attributions (`run --modules`, `--ops`) as columns of indices into its
// strings (0: none), [0] being none: few (bounded by the program's code), so JSON arrays.
json AttributionsData(const ProcessTimeline& t) {
  json module = json::array(), op = json::array(), inner = json::array(), backward = json::array(),
       forward = json::array();
  for (const TimelineAttribution& a : t.attributions) {
    module.push_back(a.module);
    op.push_back(a.op);
    inner.push_back(a.inner_op);
    backward.push_back(a.backward ? 1 : 0);
    forward.push_back(a.forward_op);
  }
  return {{"n", t.attributions.size()}, {"module", module},     {"operator", op},
          {"inner_operator", inner},    {"backward", backward}, {"forward_operator", forward}};
}

// The process' stack table (`run --stacks`): frames as columns, each stack a list of frame
// indices, innermost (the allocating call) first.
json StacksData(const StackTable& table) {
  return {{"frames",
           {{"function", table.function},
            {"file", table.file},
            {"line", table.line},
            {"kind", table.kind}}},
          {"stacks", table.stacks},
          // the engine's allocating frame per stack (stacks.h), which the text names too
          {"user_frame", table.user_frame}};
}

// How the process ended, for the page's header: "exited" (code), "killed" (signal, from the

// A failed allocation's post-mortem as the page shows it (docs/oom.md): why, and whether each
// change would have let it fit.
json PostMortemData(const OomPostMortem& pm) {
  auto verdict = [](const WouldFit& w) -> json {
    return {{"fits", w.fits}, {"short_by_bytes", w.short_by_bytes}};
  };
  return {{"reason", pm.reason},
          {"explanation", pm.explanation},
          {"request_bytes", pm.request_bytes},
          {"largest_request_that_fits_bytes", pm.largest_request_that_fits_bytes},
          {"expandable_segments_on", pm.expandable_segments_on},
          {"expandable_segments", pm.cache_known ? verdict(pm.expandable_segments) : json()},
          {"empty_cache", pm.cache_known ? verdict(pm.empty_cache) : json()}};
}

// launcher), or "unknown" (no exit record: the trace was cut short).
json ExitData(const ProcessReport& p) {
  const ExitStatus& e = p.exit;
  const char* how = e.source == ExitStatus::Source::kUnknown ? "unknown"
                    : e.signal != 0                         ? "killed"
                                                            : "exited";
  return {{"how", how}, {"code", e.code}, {"signal", e.signal}, {"core_dumped", e.core_dumped},
          {"seen_by", e.source == ExitStatus::Source::kLauncher ? "launcher"
                      : e.source == ExitStatus::Source::kTracer ? "tracer"
                                                                : ""}};
}

json ProcessData(const ProcessReport& p, const ProcessTimeline& t) {
  json phases = json::array();
  for (const PhaseReport& ph : p.phases) {
    json devices = json::array();
    for (const PhaseDeviceStats& d : ph.devices) {
      devices.push_back({{"index", d.index}, {"bytes_at_entry", d.bytes_at_entry},
                         {"peak_bytes", d.peak_bytes},
                         {"peak_above_entry_bytes", d.peak_above_entry_bytes},
                         {"first_above_entry_bytes", d.first.peak_above_entry_bytes},
                         {"steady_above_entry_bytes",
                          OrNull(d.steady_of > 0, d.steady.peak_above_entry_bytes)},
                         {"allocated_bytes", d.allocated_bytes}, {"freed_bytes", d.freed_bytes},
                         {"allocations", d.allocations}, {"frees", d.frees},
                         {"failed_allocations", d.failed_allocations}, {"kernels", d.kernels}});
    }
    phases.push_back({{"name", ph.name}, {"inferred", ph.inferred},
                      {"occurrences", ph.occurrences}, {"total_ns", ph.total_ns},
                      {"devices", devices}});
  }
  json failed = json::array();
  for (const FailedAllocationReport& f : p.failed_allocations) {
    failed.push_back({{"time_ns", f.time_ns}, {"device", f.device}, {"api", f.api},
                      {"requested_bytes", f.requested_bytes}, {"error_name", f.error_name},
                      {"phase", OrNull(!f.phase.empty(), f.phase)},
                      {"caller", f.caller}, {"device_in_use_bytes", f.device_in_use_bytes},
                      {"device_free_bytes", f.device_free_bytes},
                      {"post_mortem", f.post_mortem.reason.empty()
                                          ? json()
                                          : PostMortemData(f.post_mortem)}});
  }
  // NVTX ranges with their nesting depth on their thread (0: outermost), for phase bands.
  std::vector<double> start, end;
  std::vector<int32_t> phase;
  std::vector<uint32_t> thread;
  std::vector<uint8_t> depth;
  std::vector<std::pair<uint32_t, uint64_t>> open;  // (thread, end) of enclosing ranges
  for (const RangeSlice& r : t.ranges) {  // by start
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&r](const auto& o) { return o.second <= r.start_ns; }),
               open.end());
    uint32_t level = 0;
    for (const auto& [th, e] : open) {
      if (th == r.thread_id) ++level;
    }
    open.emplace_back(r.thread_id, r.end_ns);
    start.push_back(static_cast<double>(r.start_ns));
    end.push_back(static_cast<double>(r.end_ns));
    phase.push_back(r.phase);
    thread.push_back(r.thread_id);
    depth.push_back(static_cast<uint8_t>(std::min<uint32_t>(level, 255)));
  }
  json devices = json::array();
  for (size_t slot = 0; slot < t.devices.size(); ++slot) devices.push_back(DeviceData(p, t, slot));
  json process = {{"label", internal::ProcessLabel(p)},
          {"pid", p.pid},
          {"command_line", p.command_line},
          {"allocator_mode", p.allocator_mode},
          {"exit", ExitData(p)},
          {"phases_inferred", p.phase_inference.applied},
          {"duration_ns", p.duration_ns},
          {"strings", t.strings},
          {"phase_names", t.phase_names},
          {"phases", phases},
          {"failed_allocations", failed},
          {"iterations", internal::IterationsJson(p.iterations, true)},
          {"lifetime_classes", kLifetimeClassOrder},
          {"categories",
           {{"given", p.categories_given},
            {"tags", p.category_tags},
            {"tags_unmatched", p.category_tags_unmatched}}},
          {"ranges",
           {{"n", start.size()}, {"start_ns", Column(start)}, {"end_ns", Column(end)},
            {"phase", Column(phase)}, {"thread", Column(thread)}, {"depth", Column(depth)}}},
          {"devices", devices}};
  if (!t.stacks.empty()) process["stacks"] = StacksData(t.stacks);
  if (t.attribution) process["attributions"] = AttributionsData(t);
  return process;
}

// One run of a compare page: the process and device with the highest peak, its memory series
// and what lines runs up: the start of its first iteration (or of its trace).
json CompareRunData(const ViewerRun& run) {
  const Report& report = *run.trace->report;
  size_t best_process = 0, best_slot = 0;
  const bool found = HighestPeak(report, &best_process, &best_slot);
  json r = {{"label", run.label}, {"trace_file", report.trace_file},
            {"truncated", report.truncated}, {"found", found}};
  if (!found) return r;
  const ProcessReport& p = report.processes[best_process];
  const DeviceReport& dr = p.devices[best_slot];
  const DeviceTimeline& dt = run.trace->timelines[best_process].devices[best_slot];
  const IterationReport& it = p.iterations;
  r.update(PeakData(dr, dt));
  r.update({{"process", internal::ProcessLabel(p)},
            {"pid", p.pid},
            {"allocator_mode", p.allocator_mode},
            {"duration_ns", p.duration_ns},
            {"device", {{"index", dr.index}, {"name", OrNull(dr.has_info, dr.name)}}},
            {"align_ns", it.windows_ns.empty() ? 0 : it.windows_ns.front().first},
            {"aligned_at", it.windows_ns.empty() ? "trace start" : "first iteration start"},
            {"iterations", internal::IterationsJson(it, true)}});
  return r;
}

// A point of sweep.json, without its per-phase figures (the page draws none).
json SweepPointData(const SweepPoint& point) {
  json d = internal::SweepPointJson(point);
  d.erase("phases");
  return d;
}

// The viewer page of `mode` with `data` in place of the template's {{CUMEMTRACE_DATA}} marker.
void WriteViewerPage(const char* mode, json data, std::ostream& out) {
  data["schema"] = "cumemtrace.viewer/1";
  data["mode"] = mode;
  const std::string text =
      EscapeJsonForScript(data.dump(-1, ' ', false, json::error_handler_t::replace));
  const std::string_view html(internal::kViewerHtml, internal::kViewerHtmlSize);
  constexpr std::string_view kMarker = "{{CUMEMTRACE_DATA}}";
  const size_t at = html.find(kMarker);
  out << html.substr(0, at);
  if (at != std::string_view::npos) out << text << html.substr(at + kMarker.size());
}

}  // namespace

std::string EscapeJsonForScript(std::string_view json_text) {
  // Inside <script>, "</script", "<!--" (which makes a later "<script" swallow the page)
  // and "-->" change how the HTML parser reads the element; JSON strings may spell "<" and
  // ">" as \u003c and \u003e instead, and "&" as \u0026. U+2028 and U+2029 end a line in
  // older JavaScript. These characters only occur inside JSON strings, so the escapes keep
  // the same JSON.
  std::string out;
  out.reserve(json_text.size());
  for (size_t i = 0; i < json_text.size(); ++i) {
    const char ch = json_text[i];
    const std::string_view rest = json_text.substr(i, 3);
    if (ch == '<' || ch == '>' || ch == '&') {
      out += ch == '<' ? "\\u003c" : ch == '>' ? "\\u003e" : "\\u0026";
    } else if (rest == "\xe2\x80\xa8" || rest == "\xe2\x80\xa9") {
      out += rest[2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += ch;
    }
  }
  return out;
}

void WriteViewerHtml(const AnalyzedTrace& trace, std::ostream& out) {
  json data = {{"trace_file", trace.report->trace_file},
               {"truncated", trace.report->truncated},
               {"processes", json::array()}};
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    data["processes"].push_back(ProcessData(trace.report->processes[i], trace.timelines[i]));
  }
  WriteViewerPage("report", std::move(data), out);
}

void WriteCompareViewerHtml(const std::vector<ViewerRun>& runs, std::ostream& out) {
  json data = {{"runs", json::array()}};
  for (const ViewerRun& run : runs) data["runs"].push_back(CompareRunData(run));
  WriteViewerPage("compare", std::move(data), out);
}

void WriteSweepViewerHtml(const std::string& parameter, const std::vector<SweepPoint>& points,
                          std::ostream& out) {
  json data = {{"parameter", parameter}, {"points", json::array()}};
  for (const SweepPoint& point : points) data["points"].push_back(SweepPointData(point));
  WriteViewerPage("sweep", std::move(data), out);
}

}  // namespace cumemtrace
