// Internal: a device's memory by category over time, as the viewer stacks it (docs/exports.md
// "categories"). Made from the timeline (engine.h): the tensor allocations' categories, the
// device memory in use at each step and PyTorch's segments live between the steps, with the
// same rules as the report's figures (report.h DeviceCategories), so that at the device and
// tensor peaks the layers are those figures, to the byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collector/engine/engine.h"

namespace cumemtrace::internal {

// The most points a series has before it is sampled (plus the two peaks): what bounds the
// page's category data whatever the trace's length.
constexpr size_t kCategorySeriesPoints = 2000;

// The layers, bottom to top: the categories with allocations in kCategoryOrder, then
// "not_torch" (device memory that is no tensor allocation: cuBLAS workspaces, NCCL, the
// program's own cudaMalloc), then "torch_cache" (PyTorch's segments beyond its tensors: only
// with the allocator bridge). Categories and not_torch sum to the device memory in use (the
// timeline's steps); torch_cache lies above it.
struct CategorySeries {
  std::vector<std::string> layers;
  // Each point: a step of DeviceTimeline::device_memory, its time, and the bytes of each
  // layer right after it (bytes[point * layers.size() + layer]).
  std::vector<uint32_t> step;
  std::vector<double> time_ns;
  std::vector<uint64_t> bytes;
  // Every step is a point unless there are more than max_points; then the steps are cut into
  // max_points / 2 runs of consecutive steps and each run gives its lowest and highest step
  // (by in use + cache, in step order), and both peaks are kept.
  bool sampled = false;
  // Points of the device peak (DeviceTimeline::peak_step) and the tensors' peak (the first
  // tensor birth at the highest tensor bytes); kNoStep when there is none.
  uint32_t device_peak_point = kNoStep;
  uint32_t tensor_peak_point = kNoStep;

  size_t points() const { return step.size(); }
  uint64_t at(size_t point, size_t layer) const { return bytes[point * layers.size() + layer]; }
};

// The series of device slot `slot` of a process whose categories are given (`categories`,
// that device's report figures, names which categories have allocations and the tensor layer).
CategorySeries MakeCategorySeries(const ProcessTimeline& timeline, size_t slot,
                                  const DeviceCategories& categories,
                                  size_t max_points = kCategorySeriesPoints);

}  // namespace cumemtrace::internal
