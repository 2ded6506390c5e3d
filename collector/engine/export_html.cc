// WriteViewerHtml (export.h): viewer/src/template.html (with the viewer's CSS and JS already
// inlined at build time, viewer/embed.cmake) with this trace's data put in place of its
// {{CUMEMTRACE_DATA}} marker. The data is JSON whose big columns are base64 typed arrays
// (little-endian, as every browser's typed arrays are), so that a million allocations load as
// a few array views rather than a million parsed objects. viewer/src/viewer.js reads it; the
// layout is "cumemtrace.viewer/1", described in docs/exports.md.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "collector/engine/export.h"
#include "collector/engine/export_tracks.h"
#include "collector/engine/timeline.h"

namespace cumemtrace {
namespace internal {
extern const char kViewerHtml[];
extern const size_t kViewerHtmlSize;
}  // namespace internal

namespace {

using nlohmann::json;

// Kernel activity is drawn as busy time per bin over the whole run: ten million kernels
// cannot be embedded one by one and still load in a second.
constexpr size_t kKernelBins = 2000;

std::string Base64(const void* data, size_t size) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < size; i += 3) {
    const uint32_t n = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < size) {
    uint32_t n = uint32_t{bytes[i]} << 16;
    if (i + 1 < size) n |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

template <typename T>
std::string Column(const std::vector<T>& values) {
  return Base64(values.data(), values.size() * sizeof(T));
}

json DeviceData(const ProcessReport& p, const ProcessTimeline& t, size_t slot) {
  const DeviceTimeline& dt = t.devices[slot];
  const DeviceReport& dr = p.devices[slot];
  std::vector<double> step_time, step_bytes;
  step_time.reserve(dt.device_memory.size());
  step_bytes.reserve(dt.device_memory.size());
  for (const MemoryStep& s : dt.device_memory) {
    step_time.push_back(static_cast<double>(s.time_ns));
    step_bytes.push_back(static_cast<double>(s.bytes));
  }
  std::vector<uint32_t> birth, death, api, library;
  std::vector<int32_t> phase;
  std::vector<double> bytes;
  std::vector<uint8_t> kind;
  for (const TimelineAllocation& a : t.allocations) {
    if (a.device_slot != slot || !internal::IsDeviceMemory(a.kind)) continue;
    birth.push_back(a.birth_step);
    death.push_back(a.death_step);
    bytes.push_back(static_cast<double>(a.bytes));
    phase.push_back(a.phase);
    api.push_back(a.api);
    library.push_back(a.library);
    kind.push_back(a.kind);
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
  json d = {{"index", dr.index},
            {"name", dr.has_info ? json(dr.name) : json(nullptr)},
            {"total_memory_bytes", dr.has_info ? json(dr.total_memory_bytes) : json(nullptr)},
            {"peak_bytes", dr.peak.bytes},
            {"peak_time_ns", dr.peak.seen ? json(dr.peak.time_ns) : json(nullptr)},
            {"peak_step", dt.peak_step == kNoStep ? json(nullptr) : json(dt.peak_step)},
            {"peak_live_allocations", dr.peak.live_count},
            {"kernel_count", dr.kernel_count},
            {"steps", {{"n", step_time.size()}, {"time_ns", Column(step_time)},
                       {"bytes", Column(step_bytes)}}},
            {"allocations",
             {{"n", birth.size()}, {"birth_step", Column(birth)}, {"death_step", Column(death)},
              {"bytes", Column(bytes)}, {"phase", Column(phase)}, {"api", Column(api)},
              {"library", Column(library)}, {"kind", Column(kind)}}},
            {"kernel_busy", {{"bins", kKernelBins}, {"fraction", Column(busy)}}}};
  return d;
}

json ProcessData(const ProcessReport& p, const ProcessTimeline& t) {
  json phases = json::array();
  for (const PhaseReport& ph : p.phases) {
    json devices = json::array();
    for (const PhaseDeviceStats& d : ph.devices) {
      devices.push_back({{"index", d.index}, {"bytes_at_entry", d.bytes_at_entry},
                         {"peak_bytes", d.peak_bytes},
                         {"peak_above_entry_bytes", d.peak_above_entry_bytes},
                         {"allocated_bytes", d.allocated_bytes}, {"freed_bytes", d.freed_bytes},
                         {"allocations", d.allocations}, {"frees", d.frees},
                         {"failed_allocations", d.failed_allocations}, {"kernels", d.kernels}});
    }
    phases.push_back({{"name", ph.name}, {"occurrences", ph.occurrences},
                      {"total_ns", ph.total_ns}, {"devices", devices}});
  }
  json failed = json::array();
  for (const FailedAllocationReport& f : p.failed_allocations) {
    failed.push_back({{"time_ns", f.time_ns}, {"device", f.device}, {"api", f.api},
                      {"requested_bytes", f.requested_bytes}, {"error_name", f.error_name},
                      {"phase", f.phase.empty() ? json(nullptr) : json(f.phase)},
                      {"caller", f.caller}, {"device_in_use_bytes", f.device_in_use_bytes},
                      {"device_free_bytes", f.device_free_bytes}});
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
  return {{"label", internal::ProcessLabel(p)},
          {"pid", p.pid},
          {"command_line", p.command_line},
          {"allocator_mode", p.allocator_mode},
          {"duration_ns", p.duration_ns},
          {"strings", t.strings},
          {"phase_names", t.phase_names},
          {"phases", phases},
          {"failed_allocations", failed},
          {"ranges",
           {{"n", start.size()}, {"start_ns", Column(start)}, {"end_ns", Column(end)},
            {"phase", Column(phase)}, {"thread", Column(thread)}, {"depth", Column(depth)}}},
          {"devices", devices}};
}

}  // namespace

void WriteViewerHtml(const AnalyzedTrace& trace, std::ostream& out) {
  json data = {{"schema", "cumemtrace.viewer/1"},
               {"trace_file", trace.report->trace_file},
               {"truncated", trace.report->truncated},
               {"processes", json::array()}};
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    data["processes"].push_back(ProcessData(trace.report->processes[i], trace.timelines[i]));
  }
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  // Inside <script>, "</" could end the element early; JSON allows "<\/" for it.
  for (size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at + 3)) {
    text.replace(at, 2, "<\\/");
  }
  const std::string_view html(internal::kViewerHtml, internal::kViewerHtmlSize);
  constexpr std::string_view kMarker = "{{CUMEMTRACE_DATA}}";
  const size_t at = html.find(kMarker);
  out << html.substr(0, at);
  if (at != std::string_view::npos) out << text << html.substr(at + kMarker.size());
}

}  // namespace cumemtrace
