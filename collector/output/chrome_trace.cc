// WriteChromeTrace (exports.h): Chrome's trace event format, one event per line so that a
// trace with millions of kernels is streamed, not built as one JSON value.
#include <nlohmann/json.hpp>

#include <unordered_map>

#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"

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
                  uint64_t offset, uint64_t* next_tid) {
  const uint32_t pid = p.pid;
  w.Event({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
           {"args", {{"name", internal::ProcessLabel(p)}}}});

  for (size_t slot = 0; slot < t.devices.size(); ++slot) {
    const DeviceTimeline& dt = t.devices[slot];
    const DeviceReport& dr = p.devices[slot];
    const std::string gpu = internal::DeviceLabel(dt.index);
    // Each "C" name is one counter track; its args keys are the series.
    auto counter = [&](const std::string& name, const std::vector<MemoryStep>& steps) {
      if (steps.empty()) return;
      w.Event({{"ph", "C"}, {"name", name}, {"pid", pid}, {"tid", 0}, {"ts", Micros(offset)},
               {"args", {{"bytes", 0}}}});
      for (const MemoryStep& s : steps) {
        w.Event({{"ph", "C"}, {"name", name}, {"pid", pid}, {"tid", 0},
                 {"ts", Micros(offset + s.time_ns)}, {"args", {{"bytes", s.bytes}}}});
      }
    };
    counter(gpu + (p.allocator_mode == "native" && !p.torch.attached ? " device memory (allocator segments)"
                                                 : " device memory in use"),
            dt.device_memory);
    counter(gpu + " module globals (not the program's)", dt.static_memory);
    if (dr.not_program.tracer_bytes > 0) {
      counter(gpu + " tracer buffers (not the program's)",
              {MemoryStep{0, dr.not_program.tracer_bytes},
               MemoryStep{p.duration_ns, dr.not_program.tracer_bytes}});
    }
    if (dr.peak.seen) {
      w.Event({{"ph", "i"}, {"s", "p"}, {"name", "peak device memory"}, {"cat", "memory"},
               {"pid", pid}, {"tid", 0}, {"ts", Micros(offset + dr.peak.time_ns)},
               {"args",
                {{"device", dr.index}, {"bytes", dr.peak.bytes},
                 {"live_allocations", dr.peak.live_count}}}});
    }
  }
  for (const FailedAllocationReport& f : p.failed_allocations) {
    w.Event({{"ph", "i"}, {"s", "p"}, {"name", "failed allocation"}, {"cat", "memory"},
             {"pid", pid}, {"tid", f.thread_id}, {"ts", Micros(offset + f.time_ns)},
             {"args",
              {{"device", f.device}, {"api", f.api}, {"requested_bytes", f.requested_bytes},
               {"error", f.error_name},
               {"phase", f.phase.empty() ? std::string("(no phase)") : f.phase},
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
        w.Event({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", drops_tid},
                 {"args", {{"name", "records dropped (gaps)"}}}});
      }
      const uint64_t duration = std::max<uint64_t>(window.last_ns - window.first_ns, 1000);
      w.Event({{"ph", "X"}, {"cat", "gap"}, {"name", "records dropped (" + d.source + ")"},
               {"pid", pid}, {"tid", drops_tid}, {"ts", Micros(offset + window.first_ns)},
               {"dur", Micros(duration)}, {"args", {{"count", window.count}}}});
    }
  }

  for (const internal::SliceTrack& plan : internal::PlanSliceTracks(p, t)) {
    const bool own_thread = !plan.kernels && plan.lane == 0;
    const uint64_t tid = own_thread ? plan.thread_id : (*next_tid)++;
    w.Event({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid},
             {"args", {{"name", plan.name}}}});
    for (uint32_t i : plan.slices) {
      if (plan.kernels) {
        const KernelSlice& k = t.kernels[i];
        w.Event({{"ph", "X"}, {"cat", "kernel"}, {"name", t.strings[k.name]}, {"pid", pid},
                 {"tid", tid}, {"ts", Micros(offset + k.start_ns)},
                 {"dur", Micros(k.end_ns - k.start_ns)},
                 {"args", {{"device", k.device}, {"stream", k.stream}}}});
      } else {
        const RangeSlice& r = t.ranges[i];
        json event = {{"ph", "X"}, {"cat", internal::PhaseCategory(p, t, r.phase)},
                      {"name", internal::PhaseLabel(t, r.phase)},
                      {"pid", pid}, {"tid", tid}, {"ts", Micros(offset + r.start_ns)},
                      {"dur", Micros(r.end_ns - r.start_ns)}};
        if (r.still_open) event["args"] = {{"still_open_at_exit", true}};
        w.Event(event);
      }
    }
  }
  for (const MarkInstant& m : t.marks) {
    w.Event({{"ph", "i"}, {"s", "t"}, {"cat", "nvtx"}, {"name", t.strings[m.name]},
             {"pid", pid}, {"tid", m.thread_id}, {"ts", Micros(offset + m.time_ns)}});
  }
}

}  // namespace

void WriteChromeTrace(const AnalyzedTrace& trace, std::ostream& out) {
  ChromeWriter writer(out);
  const uint64_t origin = internal::TraceOrigin(*trace.report);
  uint64_t next_tid = kSyntheticTidBase;
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    const ProcessReport& p = trace.report->processes[i];
    const uint64_t offset =
        p.first_timestamp_abs_ns >= origin ? p.first_timestamp_abs_ns - origin : 0;
    WriteProcess(writer, p, trace.timelines[i], offset, &next_tid);
  }
  writer.Finish({{"exporter", "cumemtrace"},
                 {"trace_file", trace.report->trace_file},
                 {"time_origin_abs_ns", origin}});
}

}  // namespace cumemtrace
