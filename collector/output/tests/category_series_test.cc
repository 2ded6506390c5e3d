// The viewer's memory by category over time (category_series.h) against the report's
// category figures: at the device and tensor peaks every layer is the report's figure, at every
// point the tensors and the memory PyTorch never sees add up to the device memory in use, and
// a long trace's series is sampled to its bound with both peaks kept exactly.
#include "collector/output/category_series.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/exports.h"
#include "collector/output/summary.h"
#include "collector/output/tests/category_trace.h"

namespace cumemtrace::testing {
namespace {

using internal::CategorySeries;
using internal::MakeCategorySeries;
using nlohmann::json;

constexpr uint64_t MiB = 1 << 20;

std::unique_ptr<AnalyzedTrace> LoadCategoryTrace(int churn) {
  AnalysisOptions options;
  options.timelines = options.sorted = true;  // as `export` asks
  const std::string path = WriteTempFile(
      "category_series." + std::to_string(churn) + "." + std::to_string(getpid()) + ".cmtrace",
      FileBytes(CategoryTraceChunks(churn)));
  std::string error;
  auto trace = Analyze({path, {}}, options, &error);
  EXPECT_NE(trace, nullptr) << error;
  return trace;
}

// The layers of point `point` by name.
std::map<std::string, uint64_t> Row(const CategorySeries& s, uint32_t point) {
  std::map<std::string, uint64_t> row;
  for (size_t layer = 0; layer < s.layers.size(); ++layer)
    row[s.layers[layer]] = s.at(point, layer);
  return row;
}

// What the report says of one peak, as layers.
std::map<std::string, uint64_t> ReportAt(const DeviceCategories& c, bool device_peak) {
  std::map<std::string, uint64_t> row;
  for (const auto& [name, f] : c.by_category) {
    row[name] = (device_peak ? f.at_device_peak : f.at_tensor_peak).bytes;
  }
  row["not_torch"] =
      device_peak ? c.not_torch_at_device_peak_bytes : c.not_torch_at_tensor_peak_bytes;
  row["torch_cache"] = device_peak ? c.cache_at_device_peak_bytes : c.cache_at_tensor_peak_bytes;
  return row;
}

TEST(CategorySeries, LayersAtBothPeaksAreTheReportsFigures) {
  auto trace = LoadCategoryTrace(0);
  ASSERT_NE(trace, nullptr);
  const DeviceReport& d = trace->report->processes.at(0).devices.at(0);
  const DeviceCategories& c = d.categories;
  ASSERT_TRUE(c.given);
  ASSERT_EQ(c.tensor_layer, "torch_allocated");
  const DeviceTimeline& dt = trace->timelines.at(0).devices.at(0);
  const CategorySeries s = MakeCategorySeries(trace->timelines.at(0), 0, c);
  EXPECT_FALSE(s.sampled);
  ASSERT_EQ(s.points(), dt.device_memory.size());
  EXPECT_EQ(s.layers,
            (std::vector<std::string>{"parameter", "optimizer_state", "gradient", "activation",
                                      "temporary", "not_torch", "torch_cache"}));
  ASSERT_NE(s.device_peak_point, kNoStep);
  ASSERT_NE(s.tensor_peak_point, kNoStep);
  EXPECT_EQ(s.step[s.device_peak_point], dt.peak_step);
  EXPECT_NE(s.device_peak_point, s.tensor_peak_point);  // the trace is made so
  EXPECT_EQ(Row(s, s.device_peak_point), ReportAt(c, true));
  EXPECT_EQ(Row(s, s.tensor_peak_point), ReportAt(c, false));
  // The report's figures are what the trace was built with (category_trace.h).
  EXPECT_EQ(d.peak.bytes, 60 * MiB);
  EXPECT_EQ(c.cache_at_device_peak_bytes, 12 * MiB);
  EXPECT_EQ(c.not_torch_at_device_peak_bytes, 8 * MiB);
  EXPECT_EQ(c.tensor_peak_bytes, 58 * MiB);
  EXPECT_EQ(c.cache_at_tensor_peak_bytes, 38 * MiB);
  EXPECT_EQ(c.by_category.at("temporary").at_tensor_peak.bytes, 10 * MiB);
  uint64_t tensors = 0;
  for (const auto& [name, bytes] : Row(s, s.tensor_peak_point)) {
    if (name != "not_torch" && name != "torch_cache") tensors += bytes;
  }
  EXPECT_EQ(tensors, c.tensor_peak_bytes);
  // Everywhere: the tensors and not_torch are the memory in use; the cache lies above it.
  for (uint32_t k = 0; k < s.points(); ++k) {
    uint64_t in_use = 0;
    for (size_t layer = 0; layer + 1 < s.layers.size(); ++layer) in_use += s.at(k, layer);
    EXPECT_EQ(in_use, dt.device_memory[s.step[k]].bytes) << "point " << k;
    EXPECT_EQ(s.time_ns[k], static_cast<double>(dt.device_memory[s.step[k]].time_ns));
  }
  // Each category's own peak is the highest its layer reaches.
  for (const auto& [name, f] : c.by_category) {
    const size_t layer =
        static_cast<size_t>(std::find(s.layers.begin(), s.layers.end(), name) - s.layers.begin());
    uint64_t top = 0;
    for (uint32_t k = 0; k < s.points(); ++k) top = std::max(top, s.at(k, layer));
    EXPECT_EQ(top, f.own_peak.bytes) << name;
  }
}

TEST(CategorySeries, ALongTraceIsSampledToItsBoundWithThePeaksExact) {
  auto trace = LoadCategoryTrace(3000);
  ASSERT_NE(trace, nullptr);
  const ProcessTimeline& t = trace->timelines.at(0);
  const DeviceCategories& c = trace->report->processes.at(0).devices.at(0).categories;
  const CategorySeries full = MakeCategorySeries(t, 0, c, 1'000'000);
  ASSERT_GT(full.points(), 6000u);
  EXPECT_FALSE(full.sampled);
  constexpr size_t kBound = 100;
  const CategorySeries s = MakeCategorySeries(t, 0, c, kBound);
  EXPECT_TRUE(s.sampled);
  EXPECT_LE(s.points(), kBound + 2);
  EXPECT_TRUE(std::is_sorted(s.step.begin(), s.step.end()));
  EXPECT_EQ(Row(s, s.device_peak_point), ReportAt(c, true));
  EXPECT_EQ(Row(s, s.tensor_peak_point), ReportAt(c, false));
  // Each sampled point is the full series at its step.
  for (uint32_t k = 0; k < s.points(); ++k) EXPECT_EQ(Row(s, k), Row(full, s.step[k]));
  // The default bound holds too, and a short trace's default series is every step.
  EXPECT_LE(MakeCategorySeries(t, 0, c).points(), internal::kCategorySeriesPoints + 2);
}

TEST(CategorySeries, PageDataCarriesTheSeriesAndTheSummarysFigures) {
  auto trace = LoadCategoryTrace(0);
  ASSERT_NE(trace, nullptr);
  std::ostringstream page;
  WriteViewerHtml(*trace, page);
  const std::string html = page.str();
  const std::string open = "<script id=\"cumemtrace-data\" type=\"application/json\">";
  const size_t at = html.find(open) + open.size();
  const json data = json::parse(html.substr(at, html.find("</script>", at) - at));
  const json summary = json::parse(SummaryJson(*trace->report));
  const json& device = data.at("processes").at(0).at("devices").at(0);
  const json& categories = device.at("categories");
  EXPECT_EQ(categories.at("figures"),
            summary.at("processes").at(0).at("devices").at(0).at("categories"));
  EXPECT_EQ(categories.at("layers").size(), 7u);
  EXPECT_EQ(categories.at("n"), device.at("steps").at("n"));
  EXPECT_EQ(categories.at("max_points"), internal::kCategorySeriesPoints);
  EXPECT_EQ(data.at("processes").at(0).at("categories").at("tags"), 3);

  // A CUDA program without training phases or tags: no categories, said once.
  StreamBuilder plain(1, 10);
  plain.String(1, "load").Push(1, 10, 1).Alloc(2, 0, 0x1000, 1000, kDevice, 10).Pop(3, 10);
  plain.Exit(4, 0).LauncherExit(0, 0);
  AnalysisOptions options;
  options.timelines = options.sorted = true;
  std::string error;
  auto cuda = Analyze({WriteTempFile("no_categories_page." + std::to_string(getpid()) + ".cmtrace",
                                     FileBytes(plain.Chunks())),
                       {}},
                      options, &error);
  ASSERT_NE(cuda, nullptr) << error;
  std::ostringstream cuda_page;
  WriteViewerHtml(*cuda, cuda_page);
  const std::string text = cuda_page.str();
  const size_t from = text.find(open) + open.size();
  const json cuda_data = json::parse(text.substr(from, text.find("</script>", from) - from));
  EXPECT_TRUE(cuda_data.at("processes").at(0).at("devices").at(0).at("categories").is_null());
  EXPECT_EQ(cuda_data.at("processes").at(0).at("categories").at("given"), false);
}

}  // namespace
}  // namespace cumemtrace::testing
