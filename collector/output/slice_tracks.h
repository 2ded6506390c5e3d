// Internal: the track layout that the Perfetto and Chrome exports share, so both show the
// same tracks with the same slices.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collector/engine/engine.h"

namespace cumemtrace::internal {

// For intervals sorted by start (ties: longer first), a lane per interval such that the
// intervals of each lane nest (never overlap partially). Greedy, first lane that fits.
std::vector<uint32_t> NestingLanes(const std::vector<std::pair<uint64_t, uint64_t>>& intervals);

// Slices of one track, in nesting order (start ascending, end descending).
struct SliceTrack {
  std::string name;
  bool kernels = false;    // slices index ProcessTimeline::kernels, else ::ranges
  uint32_t thread_id = 0;  // NVTX: the thread whose ranges these are
  uint32_t lane = 0;       // 0: the thread's or stream's own track; n: n-th overflow track
  std::vector<uint32_t> slices;
};

// NVTX tracks per thread (by thread id), then kernel tracks per device and stream; the
// overflow tracks of a thread or stream follow its own track.
std::vector<SliceTrack> PlanSliceTracks(const ProcessReport& report,
                                        const ProcessTimeline& timeline);

// Slice `i` of `track` as the exports show it. Phase ranges have the category
// "inferred_phase" when phase inference synthesized them (the program marked no NVTX range
// there), else "nvtx"; kernels have "kernel".
struct Slice {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  std::string name;
  const char* category = nullptr;
};
Slice SliceOf(const ProcessReport& report, const ProcessTimeline& timeline, const SliceTrack& track,
              uint32_t i);

// The counter tracks of device `slot` that have steps, in export order: fn(name, steps,
// from_zero), where `from_zero` says the series starts from 0 bytes at time 0.
void DeviceCounters(
    const ProcessReport& report, const ProcessTimeline& timeline, size_t slot,
    const std::function<void(const std::string&, const std::vector<MemoryStep>&, bool)>& fn);

// "python3 (pid 1069)".
std::string ProcessLabel(const ProcessReport& report);
// "GPU 0".
std::string DeviceLabel(uint32_t index);
// Display name of a timeline phase index; `none` for -1.
std::string PhaseLabel(const ProcessTimeline& timeline, int32_t phase,
                       const char* none = "(no phase)");

// The earliest first timestamp over the processes: time 0 of the exports, so that processes
// keep their relative placement.
uint64_t TraceOrigin(const Report& report);

}  // namespace cumemtrace::internal
