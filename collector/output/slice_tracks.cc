#include "collector/output/slice_tracks.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace cumemtrace::internal {

std::vector<uint32_t> NestingLanes(const std::vector<std::pair<uint64_t, uint64_t>>& intervals) {
  std::vector<uint32_t> lanes(intervals.size(), 0);
  std::vector<std::vector<uint64_t>> open_ends;  // per lane, a stack of enclosing ends
  for (size_t i = 0; i < intervals.size(); ++i) {
    const auto [start, end] = intervals[i];
    size_t lane = 0;
    for (; lane < open_ends.size(); ++lane) {
      std::vector<uint64_t>& stack = open_ends[lane];
      while (!stack.empty() && stack.back() <= start) stack.pop_back();
      if (stack.empty() || stack.back() >= end) break;
    }
    if (lane == open_ends.size()) open_ends.emplace_back();
    open_ends[lane].push_back(end);
    lanes[i] = static_cast<uint32_t>(lane);
  }
  return lanes;
}

std::vector<SliceTrack> PlanSliceTracks(const ProcessReport& report,
                                        const ProcessTimeline& timeline) {
  std::vector<SliceTrack> tracks;
  auto nesting_order = [](const auto& slices) {
    std::vector<uint32_t> order(slices.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&slices](uint32_t x, uint32_t y) {
      if (slices[x].start_ns != slices[y].start_ns) return slices[x].start_ns < slices[y].start_ns;
      return slices[x].end_ns > slices[y].end_ns;
    });
    return order;
  };
  // Splits the slices of one thread or stream (`order`: in nesting order) into lanes and
  // appends a track per lane: `own`, then its overflow tracks.
  auto add_lanes = [&tracks](const SliceTrack& own, const std::string& overflow_name,
                             const auto& slices, const std::vector<uint32_t>& order) {
    std::vector<std::pair<uint64_t, uint64_t>> intervals;
    intervals.reserve(order.size());
    for (uint32_t i : order) intervals.emplace_back(slices[i].start_ns, slices[i].end_ns);
    const std::vector<uint32_t> lanes = NestingLanes(intervals);
    const size_t base = tracks.size();
    for (size_t k = 0; k < order.size(); ++k) {
      while (tracks.size() <= base + lanes[k]) {
        SliceTrack& track = tracks.emplace_back(own);
        track.lane = static_cast<uint32_t>(tracks.size() - 1 - base);
        if (track.lane > 0) {
          track.name = overflow_name + " (overlapping " + std::to_string(track.lane) + ")";
        }
      }
      tracks[base + lanes[k]].slices.push_back(order[k]);
    }
  };

  std::map<uint32_t, std::vector<uint32_t>> by_thread;
  for (uint32_t i : nesting_order(timeline.ranges)) {
    by_thread[timeline.ranges[i].thread_id].push_back(i);
  }
  for (const auto& [thread, order] : by_thread) {
    SliceTrack own;
    own.thread_id = thread;
    auto name_it = report.thread_names.find(thread);
    own.name =
        name_it != report.thread_names.end() ? name_it->second : "thread " + std::to_string(thread);
    add_lanes(own, own.name + " NVTX", timeline.ranges, order);
  }

  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> by_stream;
  for (uint32_t i : nesting_order(timeline.kernels)) {
    by_stream[{timeline.kernels[i].device, timeline.kernels[i].stream}].push_back(i);
  }
  for (const auto& [stream, order] : by_stream) {
    SliceTrack own;
    own.kernels = true;
    own.name = DeviceLabel(stream.first) + " stream " + std::to_string(stream.second) + " kernels";
    add_lanes(own, own.name, timeline.kernels, order);
  }
  return tracks;
}

namespace {

const char* PhaseCategory(const ProcessReport& report, const ProcessTimeline& timeline,
                          int32_t phase) {
  if (!report.phase_inference.applied || phase < 0 ||
      static_cast<size_t>(phase) >= timeline.phase_names.size()) {
    return "nvtx";
  }
  const std::string& name = timeline.phase_names[static_cast<size_t>(phase)];
  const auto it = std::find_if(report.phases.begin(), report.phases.end(),
                               [&name](const PhaseReport& ph) { return ph.name == name; });
  return it != report.phases.end() && it->inferred ? "inferred_phase" : "nvtx";
}

}  // namespace

Slice SliceOf(const ProcessReport& report, const ProcessTimeline& timeline, const SliceTrack& track,
              uint32_t i) {
  if (track.kernels) {
    const KernelSlice& k = timeline.kernels[i];
    return {k.start_ns, k.end_ns, timeline.strings[k.name], "kernel"};
  }
  const RangeSlice& r = timeline.ranges[i];
  return {r.start_ns, r.end_ns, PhaseLabel(timeline, r.phase),
          PhaseCategory(report, timeline, r.phase)};
}

void DeviceCounters(
    const ProcessReport& report, const ProcessTimeline& timeline, size_t slot,
    const std::function<void(const std::string&, const std::vector<MemoryStep>&, bool)>& fn) {
  const DeviceTimeline& dt = timeline.devices[slot];
  const std::string gpu = DeviceLabel(dt.index);
  auto series = [&](const char* what, const std::vector<MemoryStep>& steps, bool from_zero) {
    if (!steps.empty()) fn(gpu + what, steps, from_zero);
  };
  // Without the bridge, native mode sees the caching allocator's segments, not its tensors.
  series(report.allocator_mode == "native" && !report.torch.attached
             ? " device memory (allocator segments)"
             : " device memory in use",
         dt.device_memory, true);
  series(" module globals (not the program's)", dt.static_memory, true);
  const uint64_t tracer = report.devices[slot].not_program.tracer_bytes;
  if (tracer > 0) {
    series(" tracer buffers (not the program's)", {{0, tracer}, {report.duration_ns, tracer}},
           false);
  }
}

std::string ProcessLabel(const ProcessReport& report) {
  const std::string program = report.command_line.empty() ? "process" : report.command_line[0];
  return BaseName(program) + " (pid " + std::to_string(report.pid) + ")";
}

std::string DeviceLabel(uint32_t index) { return "GPU " + std::to_string(index); }

std::string PhaseLabel(const ProcessTimeline& timeline, int32_t phase, const char* none) {
  if (phase < 0 || static_cast<size_t>(phase) >= timeline.phase_names.size()) return none;
  return timeline.phase_names[static_cast<size_t>(phase)];
}

uint64_t TraceOrigin(const Report& report) {
  uint64_t origin = 0;
  bool seen = false;
  for (const ProcessReport& p : report.processes) {
    if (p.events == 0 && p.first_timestamp_abs_ns == 0) continue;
    if (!seen || p.first_timestamp_abs_ns < origin) origin = p.first_timestamp_abs_ns;
    seen = true;
  }
  return origin;
}

}  // namespace cumemtrace::internal
