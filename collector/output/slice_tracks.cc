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

namespace {

// Splits `order` (indexes, in nesting order) into lanes and appends one track per lane.
template <typename Interval, typename MakeTrack>
void AddLaneTracks(const std::vector<uint32_t>& order, Interval interval, MakeTrack make,
                   std::vector<SliceTrack>* tracks) {
  std::vector<std::pair<uint64_t, uint64_t>> intervals;
  intervals.reserve(order.size());
  for (uint32_t i : order) intervals.push_back(interval(i));
  const std::vector<uint32_t> lanes = NestingLanes(intervals);
  const size_t base = tracks->size();
  for (size_t k = 0; k < order.size(); ++k) {
    while (tracks->size() <= base + lanes[k]) {
      tracks->push_back(make(static_cast<uint32_t>(tracks->size() - base)));
    }
    (*tracks)[base + lanes[k]].slices.push_back(order[k]);
  }
}

}  // namespace

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

  std::map<uint32_t, std::vector<uint32_t>> by_thread;
  for (uint32_t i : nesting_order(timeline.ranges)) {
    by_thread[timeline.ranges[i].thread_id].push_back(i);
  }
  for (const auto& [thread_key, order] : by_thread) {
    // A copy: lambdas may not capture structured bindings before C++20 (clang rejects it).
    const uint32_t thread = thread_key;
    auto name_it = report.thread_names.find(thread);
    const std::string thread_name =
        name_it != report.thread_names.end() ? name_it->second : "thread " + std::to_string(thread);
    AddLaneTracks(
        order,
        [&](uint32_t i) {
          return std::make_pair(timeline.ranges[i].start_ns, timeline.ranges[i].end_ns);
        },
        [&](uint32_t lane) {
          SliceTrack t;
          t.thread_id = thread;
          t.lane = lane;
          t.name = lane == 0 ? thread_name
                             : thread_name + " NVTX (overlapping " + std::to_string(lane) + ")";
          return t;
        },
        &tracks);
  }

  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> by_stream;
  for (uint32_t i : nesting_order(timeline.kernels)) {
    by_stream[{timeline.kernels[i].device, timeline.kernels[i].stream}].push_back(i);
  }
  for (const auto& [stream_key, order] : by_stream) {
    const std::pair<uint32_t, uint32_t> key = stream_key;  // captured below (see above)
    const std::string name = DeviceLabel(key.first) + " stream " + std::to_string(key.second);
    AddLaneTracks(
        order,
        [&](uint32_t i) {
          return std::make_pair(timeline.kernels[i].start_ns, timeline.kernels[i].end_ns);
        },
        [&](uint32_t lane) {
          SliceTrack t;
          t.kernels = true;
          t.device = key.first;
          t.stream = key.second;
          t.lane = lane;
          t.name = lane == 0 ? name + " kernels"
                             : name + " kernels (overlapping " + std::to_string(lane) + ")";
          return t;
        },
        &tracks);
  }
  return tracks;
}

std::string ProcessLabel(const ProcessReport& report) {
  std::string program = report.command_line.empty() ? "process" : report.command_line[0];
  const size_t slash = program.rfind('/');
  if (slash != std::string::npos) program = program.substr(slash + 1);
  return program + " (pid " + std::to_string(report.pid) + ")";
}

std::string DeviceLabel(uint32_t index) { return "GPU " + std::to_string(index); }

std::string PhaseLabel(const ProcessTimeline& timeline, int32_t phase, const char* none) {
  if (phase < 0 || static_cast<size_t>(phase) >= timeline.phase_names.size()) return none;
  return timeline.phase_names[static_cast<size_t>(phase)];
}

const char* PhaseCategory(const ProcessReport& report, const ProcessTimeline& timeline,
                          int32_t phase) {
  if (!report.phase_inference.applied || phase < 0 ||
      static_cast<size_t>(phase) >= timeline.phase_names.size()) {
    return "nvtx";
  }
  const std::string& name = timeline.phase_names[static_cast<size_t>(phase)];
  for (const PhaseReport& ph : report.phases) {
    if (ph.name == name) return ph.inferred ? "inferred_phase" : "nvtx";
  }
  return "nvtx";
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
