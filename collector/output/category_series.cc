#include "collector/output/category_series.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "collector/engine/lifetimes.h"

namespace cumemtrace::internal {
namespace {

// What is live right after a step, as the report's category pass counts it (accountant.cc
// CategoryBirth): each category's tensor bytes, all tensors, PyTorch's blocks and segments.
struct Live {
  std::array<uint64_t, kCategoryCount> category{};
  uint64_t tensors = 0;
  uint64_t torch_allocated = 0;
  uint64_t torch_reserved = 0;
};

bool IsTensor(const TimelineAllocation& a) {
  return IsDeviceMemory(a.kind) && a.category != 0 && a.category < kCategoryCount;
}

}  // namespace

CategorySeries MakeCategorySeries(const ProcessTimeline& t, size_t slot, const DeviceCategories& c,
                                  size_t max_points) {
  CategorySeries out;
  const DeviceTimeline& dt = t.devices[slot];
  std::array<int, kCategoryCount> layer_of;
  layer_of.fill(-1);
  for (const char* name : kCategoryOrder) {
    if (c.by_category.count(name) == 0) continue;
    for (uint8_t k = 1; k < kCategoryCount; ++k) {
      if (std::string_view(CategoryName(k)) == name)
        layer_of[k] = static_cast<int>(out.layers.size());
    }
    out.layers.emplace_back(name);
  }
  const size_t not_torch = out.layers.size();
  out.layers.emplace_back("not_torch");
  const bool torch = c.tensor_layer == "torch_allocated";
  if (torch) out.layers.emplace_back("torch_cache");
  const size_t n = dt.device_memory.size();
  if (n == 0) return out;

  // The births and deaths of each step, grouped by step (a counting sort): i a birth, ~i a
  // death of the allocation at t.allocations[i].
  std::vector<uint32_t> start(n + 1, 0);
  auto on_slot = [&](const TimelineAllocation& a) {
    return a.device_slot == slot && IsDeviceMemory(a.kind);
  };
  for (const TimelineAllocation& a : t.allocations) {
    if (!on_slot(a)) continue;
    if (a.birth_step < n) ++start[a.birth_step + 1];
    if (a.death_step < n) ++start[a.death_step + 1];
  }
  for (size_t s = 0; s < n; ++s) start[s + 1] += start[s];
  std::vector<int64_t> events(start[n]);
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < t.allocations.size(); ++i) {
    const TimelineAllocation& a = t.allocations[i];
    if (!on_slot(a)) continue;
    const auto index = static_cast<int64_t>(i);
    if (a.birth_step < n) events[fill[a.birth_step]++] = index;
    if (a.death_step < n) events[fill[a.death_step]++] = ~index;
  }

  // Steps in order; visit(s, live, tensor_born) after the events of step s.
  auto sweep = [&](auto&& visit) {
    Live live;
    size_t reserved = 0;
    for (size_t s = 0; s < n; ++s) {
      bool tensor_born = false;
      for (uint32_t e = start[s]; e < start[s + 1]; ++e) {
        const bool birth = events[e] >= 0;
        const TimelineAllocation& a = t.allocations[birth ? events[e] : ~events[e]];
        const uint64_t sign = birth ? 1 : ~uint64_t{0};  // + or - bytes, modulo 2^64
        if (a.kind == kTorchAllocatedKind) live.torch_allocated += sign * a.bytes;
        if (!IsTensor(a)) continue;
        live.category[a.category] += sign * a.bytes;
        live.tensors += sign * a.bytes;
        tensor_born |= birth;
      }
      while (reserved < dt.torch_reserved.size() && dt.torch_reserved[reserved].from_step <= s) {
        live.torch_reserved = dt.torch_reserved[reserved++].bytes;
      }
      visit(s, live, tensor_born);
    }
  };
  auto cache = [](const Live& live) {
    return live.torch_reserved - std::min(live.torch_reserved, live.torch_allocated);
  };

  // First sweep: the tensors' peak (the first tensor birth at their highest, as the report
  // takes it) and what the sampling ranks steps by.
  std::vector<uint64_t> total(n);
  uint32_t tensor_peak = kNoStep;
  uint64_t tensor_top = 0;
  sweep([&](size_t s, const Live& live, bool tensor_born) {
    total[s] = dt.device_memory[s].bytes + (torch ? cache(live) : 0);
    if (tensor_born && (tensor_peak == kNoStep || live.tensors > tensor_top)) {
      tensor_top = live.tensors;
      tensor_peak = static_cast<uint32_t>(s);
    }
  });

  std::vector<uint32_t> chosen;
  if (n <= max_points) {
    chosen.resize(n);
    for (size_t s = 0; s < n; ++s) chosen[s] = static_cast<uint32_t>(s);
  } else {
    out.sampled = true;
    const size_t runs = std::max<size_t>(1, max_points / 2), length = (n + runs - 1) / runs;
    for (size_t begin = 0; begin < n; begin += length) {
      const auto first = total.begin() + static_cast<std::ptrdiff_t>(begin);
      const auto last = total.begin() + static_cast<std::ptrdiff_t>(std::min(n, begin + length));
      const auto [low, high] = std::minmax_element(first, last);
      chosen.push_back(static_cast<uint32_t>(low - total.begin()));
      chosen.push_back(static_cast<uint32_t>(high - total.begin()));
    }
    if (dt.peak_step < n) chosen.push_back(dt.peak_step);
    if (tensor_peak < n) chosen.push_back(tensor_peak);
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  }
  auto point_of = [&](uint32_t s) {
    const auto it = std::lower_bound(chosen.begin(), chosen.end(), s);
    return it != chosen.end() && *it == s ? static_cast<uint32_t>(it - chosen.begin()) : kNoStep;
  };
  out.device_peak_point = dt.peak_step < n ? point_of(dt.peak_step) : kNoStep;
  out.tensor_peak_point = tensor_peak < n ? point_of(tensor_peak) : kNoStep;

  // Second sweep: the layers at the chosen steps.
  const size_t width = out.layers.size();
  out.step = chosen;
  out.time_ns.reserve(chosen.size());
  out.bytes.reserve(chosen.size() * width);
  size_t next = 0;
  sweep([&](size_t s, const Live& live, bool) {
    if (next >= chosen.size() || chosen[next] != s) return;
    ++next;
    out.time_ns.push_back(static_cast<double>(dt.device_memory[s].time_ns));
    const size_t row = out.bytes.size();
    out.bytes.resize(row + width, 0);
    for (uint8_t k = 1; k < kCategoryCount; ++k) {
      if (layer_of[k] >= 0) out.bytes[row + static_cast<size_t>(layer_of[k])] = live.category[k];
    }
    const uint64_t in_use = dt.device_memory[s].bytes;
    out.bytes[row + not_torch] = in_use - std::min(in_use, live.tensors);
    if (torch) out.bytes[row + not_torch + 1] = cache(live);
  });
  return out;
}

}  // namespace cumemtrace::internal
