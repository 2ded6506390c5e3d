// WriteChromeTrace (exports.h): Chrome's trace event format, one event per line so that a
// trace with millions of kernels is streamed, not built as one JSON value.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using nlohmann::json;

// Tracks that are not OS threads (kernel streams, overflow lanes) get thread ids from here
// up; Linux thread ids stay below 2^22 (pid_max).
constexpr uint64_t kSyntheticTidBase = uint64_t{1} << 30;

double Micros(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

class ChromeWriter {
 public:
  explicit ChromeWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":[\n"; }
  void Event(const json& event) {
    if (!first_) out_ << ",\n";
    first_ = false;
    out_ << event.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  void Finish(const json& metadata) {
    out_ << "\n],\"displayTimeUnit\":\"ns\",\"metadata\":"
         << metadata.dump(-1, ' ', false, json::error_handler_t::replace) << "}\n";
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

void WriteProcess(ChromeWriter& w, const ProcessReport& p, const ProcessTimeline& t,
                  uint64_t origin, uint64_t* next_tid) {
  const uint64_t offset = internal::Since(origin, p.first_timestamp_abs_ns);  // time 0's place
  auto at = [offset](uint64_t time_ns) { return Micros(offset + time_ns); };
  auto event = [&](uint64_t tid, json e) {
    e["pid"] = p.pid;
    e["tid"] = tid;
    w.Event(e);
  };
  auto metadata = [&](uint64_t tid, const char* what, const std::string& name) {
    event(tid, {{"ph", "M"}, {"name", what}, {"args", {{"name", name}}}});
  };
  metadata(0, "process_name", internal::ProcessLabel(p));

  for (size_t slot = 0; slot < t.devices.size(); ++slot) {
    // Each "C" name is one counter track; its args keys are the series. Every series starts
    // from 0 here, the tracer's buffers too.
    internal::DeviceCounters(
        p, t, slot, [&](const std::string& name, const std::vector<MemoryStep>& steps, bool) {
          event(0, {{"ph", "C"}, {"name", name}, {"ts", at(0)}, {"args", {{"bytes", 0}}}});
          for (const MemoryStep& s : steps) {
            event(0, {{"ph", "C"}, {"name", name}, {"ts", at(s.time_ns)},
                      {"args", {{"bytes", s.bytes}}}});
          }
        });
    const DeviceReport& dr = p.devices[slot];
    if (dr.peak.seen) {
      event(0, {{"ph", "i"}, {"s", "p"}, {"name", "peak device memory"}, {"cat", "memory"},
                {"ts", at(dr.peak.time_ns)},
                {"args",
                 {{"device", dr.index}, {"bytes", dr.peak.bytes},
                  {"live_allocations", dr.peak.live_count}}}});
    }
  }
  for (const FailedAllocationReport& f : p.failed_allocations) {
    event(f.thread_id,
          {{"ph", "i"}, {"s", "p"}, {"name", "failed allocation"}, {"cat", "memory"},
           {"ts", at(f.time_ns)},
           {"args",
            {{"device", f.device}, {"api", f.api}, {"requested_bytes", f.requested_bytes},
             {"error", f.error_name}, {"phase", internal::PhaseName(f.phase)},
             {"device_in_use_bytes", f.device_in_use_bytes},
             {"device_free_bytes", f.device_free_bytes}}}});
  }

  // Records lost before they reached the trace: explicit gaps on their own row.
  uint64_t drops_tid = 0;
  for (const DropSummary& d : p.dropped) {
    for (const DropWindow& window : d.windows) {
      if (!window.has_window) continue;
      if (drops_tid == 0) {
        drops_tid = (*next_tid)++;
        metadata(drops_tid, "thread_name", "records dropped (gaps)");
      }
      const uint64_t duration = std::max<uint64_t>(window.last_ns - window.first_ns, 1000);
      event(drops_tid, {{"ph", "X"}, {"cat", "gap"}, {"name", "records dropped (" + d.source + ")"},
                        {"ts", at(window.first_ns)}, {"dur", Micros(duration)},
                        {"args", {{"count", window.count}}}});
    }
  }

  for (const internal::SliceTrack& plan : internal::PlanSliceTracks(p, t)) {
    const uint64_t tid = !plan.kernels && plan.lane == 0 ? plan.thread_id : (*next_tid)++;
    metadata(tid, "thread_name", plan.name);
    for (uint32_t i : plan.slices) {
      const internal::Slice s = internal::SliceOf(p, t, plan, i);
      json e = {{"ph", "X"}, {"cat", s.category}, {"name", s.name}, {"ts", at(s.start_ns)},
                {"dur", Micros(s.end_ns - s.start_ns)}};
      if (plan.kernels) {
        e["args"] = {{"device", t.kernels[i].device}, {"stream", t.kernels[i].stream}};
      } else if (t.ranges[i].still_open) {
        e["args"] = {{"still_open_at_exit", true}};
      }
      event(tid, e);
    }
  }
  for (const MarkInstant& m : t.marks) {
    event(m.thread_id, {{"ph", "i"}, {"s", "t"}, {"cat", "nvtx"}, {"name", t.strings[m.name]},
                        {"ts", at(m.time_ns)}});
  }
}

}  // namespace

void WriteChromeTrace(const AnalyzedTrace& trace, std::ostream& out) {
  ChromeWriter writer(out);
  const uint64_t origin = internal::TraceOrigin(*trace.report);
  uint64_t next_tid = kSyntheticTidBase;
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    WriteProcess(writer, trace.report->processes[i], trace.timelines[i], origin, &next_tid);
  }
  writer.Finish({{"exporter", "cumemtrace"},
                 {"trace_file", trace.report->trace_file},
                 {"time_origin_abs_ns", origin}});
}

}  // namespace cumemtrace
