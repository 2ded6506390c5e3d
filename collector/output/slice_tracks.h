// Internal: the track layout that the Perfetto and Chrome exports share, so both show the
// same tracks with the same slices.
#pragma once

#include <cstdint>
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
  uint32_t device = 0;     // kernels: device ordinal
  uint32_t stream = 0;     // kernels: CUPTI stream
  uint32_t lane = 0;       // 0: the thread's or stream's own track; n: n-th overflow track
  std::vector<uint32_t> slices;
};

// NVTX tracks per thread (by thread id), then kernel tracks per device and stream.
std::vector<SliceTrack> PlanSliceTracks(const ProcessReport& report,
                                        const ProcessTimeline& timeline);

// "python3 (pid 1069)".
std::string ProcessLabel(const ProcessReport& report);
// "GPU 0".
std::string DeviceLabel(uint32_t index);
// Display name of a timeline phase index; `none` for -1.
std::string PhaseLabel(const ProcessTimeline& timeline, int32_t phase,
                       const char* none = "(no phase)");
// Category of a phase range in the Chrome and Perfetto exports: "inferred_phase" for a phase
// synthesized by phase inference (the program marked no NVTX range there), else "nvtx".
const char* PhaseCategory(const ProcessReport& report, const ProcessTimeline& timeline,
                          int32_t phase);

// The earliest first timestamp over the processes: time 0 of the exports, so that processes
// keep their relative placement.
uint64_t TraceOrigin(const Report& report);

}  // namespace cumemtrace::internal
