// Categories of tensor memory (docs/phases.md "Categories") on fabricated traces: tags from
// the program's objects (TensorCategory) before and after a birth, again, of addresses not
// live, their priority; the categories inferred without them; the figures at the peaks, at
// the end and each category's own peak.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {
namespace {

using testing::Analyze;
using testing::FindDevice;
using testing::StreamBuilder;

constexpr uint64_t MiB = 1 << 20;
constexpr uint32_t kThread = 10;
constexpr uint64_t kWeights = 0x1000, kBuffer = 0x2000, kAct1 = 0x3000, kAct2 = 0x4000,
                   kScratch = 0x5000, kState = 0x6000, kLate = 0x7000, kBatch = 0x8000,
                   kGrad = 0x9000;

void Tag(StreamBuilder& s, uint64_t ts, uint64_t address, uint64_t bytes, v1::Category c,
         uint32_t device = 0) {
  v1::Event e;
  e.set_timestamp_ns(ts);
  v1::TensorCategory* t = e.mutable_tensor_category();
  t->set_device(device);
  t->set_address(address);
  t->set_bytes(bytes);
  t->set_category(c);
  s.Raw(e);
}

// One backprop step whose device peak is in the optimizer (weights + gradients + the
// optimizer's state), while the activations (40 MiB) peaked earlier, in forward, and were
// freed in backward. With `tags`, the program's objects name weights, buffer, batch,
// gradients and optimizer state, some of them twice, one address before it was allocated
// and one that is never live.
StreamBuilder OneStep(bool tags) {
  StreamBuilder s(1, 10);
  s.String(1, "forward").String(2, "backward").String(3, "optimizer");
  s.Alloc(1, 0, kWeights, 100 * MiB, testing::kDevice, kThread);
  if (tags) Tag(s, 2, kWeights, 100 * MiB, v1::CATEGORY_PARAMETER);  // after its birth
  if (tags) Tag(s, 3, kGrad, 100 * MiB, v1::CATEGORY_GRADIENT);      // before it: ignored
  s.Alloc(5, 0, kBuffer, 1 * MiB, testing::kDevice, kThread);
  if (tags) Tag(s, 6, kBuffer, 1 * MiB, v1::CATEGORY_BUFFER);
  if (tags) Tag(s, 7, kBuffer, 1 * MiB, v1::CATEGORY_GRADIENT);  // lower priority: still buffer
  s.Alloc(8, 0, kBatch, 2 * MiB, testing::kDevice, kThread);     // outside every phase
  if (tags) Tag(s, 9, kBatch, 2 * MiB, v1::CATEGORY_INPUT);
  s.Push(10, kThread, 1);
  s.Alloc(11, 0, kAct1, 30 * MiB, testing::kDevice, kThread);
  s.Alloc(12, 0, kAct2, 10 * MiB, testing::kDevice, kThread);
  s.Alloc(13, 0, kScratch, 5 * MiB, testing::kDevice, kThread);
  s.Free(14, 0, kScratch, 5 * MiB, testing::kDevice, kThread);
  s.Pop(15, kThread);
  if (tags) Tag(s, 16, kLate, 2 * MiB, v1::CATEGORY_PARAMETER);  // not live yet: ignored
  s.Push(20, kThread, 2);
  s.Alloc(21, 0, kGrad, 100 * MiB, testing::kDevice, kThread);
  s.Alloc(21, 0, kLate, 2 * MiB, testing::kDevice, kThread);
  if (tags) Tag(s, 22, kGrad, 100 * MiB, v1::CATEGORY_INPUT);
  if (tags) Tag(s, 23, kGrad, 100 * MiB, v1::CATEGORY_GRADIENT);  // higher than input: wins
  s.Free(24, 0, kAct1, 30 * MiB, testing::kDevice, kThread);
  s.Free(25, 0, kAct2, 10 * MiB, testing::kDevice, kThread);
  s.Free(25, 0, kLate, 2 * MiB, testing::kDevice, kThread);
  s.Pop(26, kThread);
  s.Free(27, 0, kBatch, 2 * MiB, testing::kDevice, kThread);
  s.Push(30, kThread, 3);
  s.Alloc(31, 0, kState, 200 * MiB, testing::kDevice, kThread);
  if (tags) Tag(s, 32, kState, 200 * MiB, v1::CATEGORY_OPTIMIZER_STATE);
  s.Pop(33, kThread);
  s.Exit(40, 0).Flush();
  return s;
}

const CategoryFigures& Figures(const DeviceReport& d, const std::string& category) {
  static const CategoryFigures kNone;
  auto it = d.categories.by_category.find(category);
  return it == d.categories.by_category.end() ? kNone : it->second;
}

TEST(Categories, TagsNameTheirAllocationAndTheHighestPriorityWins) {
  auto report = Analyze(OneStep(/*tags=*/true).Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_TRUE(p.categories_given);
  EXPECT_EQ(p.category_tags, 9u);
  EXPECT_EQ(p.category_tags_unmatched, 2u);  // the gradient before its birth, kLate
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->categories.given);
  EXPECT_EQ(d->categories.tensor_layer, "device");
  // The device peak is in the optimizer step.
  EXPECT_EQ(d->peak.bytes, 401 * MiB);
  EXPECT_EQ(Figures(*d, "parameter").at_device_peak.bytes, 100 * MiB);
  EXPECT_EQ(Figures(*d, "parameter").at_device_peak.objects_bytes, 100 * MiB);
  EXPECT_EQ(Figures(*d, "buffer").at_device_peak.objects_bytes, 1 * MiB);
  EXPECT_EQ(Figures(*d, "gradient").at_device_peak.objects_bytes, 100 * MiB);
  EXPECT_EQ(Figures(*d, "optimizer_state").at_device_peak.objects_bytes, 200 * MiB);
  EXPECT_EQ(Figures(*d, "input").own_peak.objects_bytes, 2 * MiB);
  // What no object named is inferred: the activations, the forward scratch, and the tensor
  // tagged before it was allocated (freed in the phase it was born in).
  EXPECT_EQ(Figures(*d, "activation").at_device_peak.bytes, 0u);
  EXPECT_EQ(Figures(*d, "activation").own_peak.bytes, 40 * MiB);
  EXPECT_EQ(Figures(*d, "activation").own_peak.objects_bytes, 0u);
  EXPECT_EQ(Figures(*d, "activation").own_peak_time_ns, 11u);  // the trace starts at 1
  EXPECT_EQ(Figures(*d, "temporary").own_peak.bytes, 5 * MiB);
  EXPECT_EQ(Figures(*d, "temporary").allocations, 2u);  // the forward scratch and kLate
  EXPECT_EQ(Figures(*d, "temporary").objects_allocations, 0u);
  // Every byte at the peak has one category: no device memory beside the tensors here.
  uint64_t sum = 0;
  for (const auto& [name, f] : d->categories.by_category) sum += f.at_device_peak.bytes;
  EXPECT_EQ(sum, d->peak.bytes);
  EXPECT_EQ(d->categories.tensor_peak_bytes, 401 * MiB);
  EXPECT_EQ(d->categories.not_torch_at_device_peak_bytes, 0u);
  // Live at the end: what the program never freed.
  EXPECT_EQ(Figures(*d, "parameter").at_end.bytes, 100 * MiB);
  EXPECT_EQ(Figures(*d, "optimizer_state").at_end.bytes, 200 * MiB);
  EXPECT_EQ(Figures(*d, "input").at_end.bytes, 0u);
}

TEST(Categories, InferredWithoutTagsFromLifetimesAndBirthPhases) {
  auto report = Analyze(OneStep(/*tags=*/false).Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_TRUE(p.categories_given);  // training phases, no tag
  EXPECT_EQ(p.category_tags, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  // Weights and buffer, born before the first forward and kept: parameters, inferred.
  EXPECT_EQ(Figures(*d, "parameter").at_device_peak.bytes, 101 * MiB);
  EXPECT_EQ(Figures(*d, "parameter").at_device_peak.objects_bytes, 0u);
  EXPECT_EQ(Figures(*d, "buffer").allocations, 0u);                    // never inferred
  EXPECT_EQ(Figures(*d, "gradient").at_device_peak.bytes, 100 * MiB);  // born in backward
  EXPECT_EQ(Figures(*d, "optimizer_state").at_device_peak.bytes, 200 * MiB);
  EXPECT_EQ(Figures(*d, "input").own_peak.bytes, 2 * MiB);
  EXPECT_EQ(Figures(*d, "activation").at_device_peak.bytes, 0u);
  EXPECT_EQ(Figures(*d, "activation").own_peak.bytes, 40 * MiB);
  EXPECT_EQ(Figures(*d, "temporary").own_peak.bytes, 5 * MiB);
  EXPECT_EQ(Figures(*d, "temporary").allocations, 2u);
}

TEST(Categories, EveryOrderAndRetentionAgreeAndRowsCarryTheirCategory) {
  auto window = Analyze(OneStep(true).Chunks());
  AnalysisOptions sorted;
  sorted.sorted = true;
  AnalysisOptions keep;
  keep.keep_lifetimes = true;
  for (const AnalysisOptions& options : {sorted, keep}) {
    auto other = Analyze(OneStep(true).Chunks(), options);
    const DeviceReport* a = FindDevice(window->processes.at(0), 0);
    const DeviceReport* b = FindDevice(other->processes.at(0), 0);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a->categories.by_category.size(), b->categories.by_category.size());
    for (const auto& [name, f] : a->categories.by_category) {
      const CategoryFigures& g = Figures(*b, name);
      EXPECT_EQ(f.at_device_peak.bytes, g.at_device_peak.bytes) << name;
      EXPECT_EQ(f.own_peak.bytes, g.own_peak.bytes) << name;
      EXPECT_EQ(f.at_end.objects_bytes, g.at_end.objects_bytes) << name;
    }
  }
  auto rows = Analyze(OneStep(true).Chunks(), keep);
  std::map<uint64_t, std::string> category;
  std::map<uint64_t, bool> objects;
  for (const AllocationLifetime& r : rows->processes.at(0).lifetimes) {
    category[r.address] = r.category;
    objects[r.address] = r.category_from_objects;
  }
  EXPECT_EQ(category[kWeights], "parameter");
  EXPECT_TRUE(objects[kWeights]);
  EXPECT_EQ(category[kBuffer], "buffer");
  EXPECT_EQ(category[kGrad], "gradient");
  EXPECT_EQ(category[kLate], "temporary");
  EXPECT_FALSE(objects[kLate]);
  EXPECT_EQ(category[kAct1], "activation");
  EXPECT_EQ(category[kBatch], "input");
  EXPECT_EQ(category[kState], "optimizer_state");
}

TEST(Categories, NotGivenWithoutTrainingPhasesOrTags) {
  StreamBuilder s(1, 10);
  s.String(1, "inference").Push(1, kThread, 1);
  s.Alloc(2, 0, kWeights, 10 * MiB, testing::kDevice, kThread).Pop(3, kThread);
  s.Exit(4, 0).Flush();
  auto report = Analyze(s.Chunks());
  EXPECT_FALSE(report->processes.at(0).categories_given);
  EXPECT_FALSE(FindDevice(report->processes.at(0), 0)->categories.given);

  // One tag is enough: the rest is inferred as well as it can be.
  StreamBuilder t(1, 10);
  t.Alloc(2, 0, kWeights, 10 * MiB, testing::kDevice, kThread);
  Tag(t, 3, kWeights, 10 * MiB, v1::CATEGORY_PARAMETER);
  t.Alloc(4, 0, kBatch, 1 * MiB, testing::kDevice, kThread);
  t.Exit(5, 0).Flush();
  auto tagged = Analyze(t.Chunks());
  const DeviceReport* d = FindDevice(tagged->processes.at(0), 0);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->categories.given);
  EXPECT_EQ(Figures(*d, "parameter").at_end.objects_bytes, 10 * MiB);
  EXPECT_EQ(Figures(*d, "autograd_other").at_end.bytes, 1 * MiB);
}

// With PyTorch's bridge, a tag names the tensor (the allocator's block), not the segment that
// starts at the same address; memory PyTorch never sees stays out of the categories.
TEST(Categories, TagsNameTensorsNotTheirSegments) {
  StreamBuilder s(1, 10);
  s.String(1, "forward").String(2, "backward").String(3, "cuMemAlloc_v2");
  s.String(4, "libc10_cuda.so").String(5, "libcublasLt.so");
  v1::Event state;
  state.set_timestamp_ns(1);
  state.mutable_torch_bridge()->set_attached(true);
  state.mutable_torch_bridge()->set_library("libc10_cuda.so");
  s.Raw(state);
  auto torch = [&](uint64_t ts, v1::TorchAllocatorAction action, uint64_t sequence,
                   uint64_t address, uint64_t requested, uint64_t total, uint64_t current) {
    s.Torch(ts, action, sequence, address, requested, total, current, kThread);
  };
  s.Alloc(10, 0, 0x1000000, 20 * MiB, testing::kDevice, kThread, 3, 4);
  torch(11, v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC, 1, 0x1000000, 20 * MiB, 0, 0);
  torch(12, v1::TORCH_ALLOCATOR_ACTION_ALLOC, 2, 0x1000000, 4 * MiB, 0, 0);
  torch(13, v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE, 2, 0, 0, 4 * MiB, 4 * MiB);
  Tag(s, 14, 0x1000000, 4 * MiB, v1::CATEGORY_PARAMETER);
  s.Alloc(15, 0, 0x9000000, 8 * MiB, testing::kDevice, 900, 3, 5);  // cuBLAS's own
  s.Push(20, kThread, 1);
  torch(21, v1::TORCH_ALLOCATOR_ACTION_ALLOC, 3, 0x1400000, 6 * MiB, 4 * MiB, 4 * MiB);
  torch(22, v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE, 3, 0, 0, 10 * MiB, 10 * MiB);
  s.Pop(23, kThread).Push(24, kThread, 2);
  torch(25, v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, 4, 0x1400000, 6 * MiB, 10 * MiB, 4 * MiB);
  s.Pop(26, kThread).Exit(30, 0).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.category_tags_unmatched, 0u);
  const DeviceReport* d = FindDevice(p, 0);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->categories.given);
  EXPECT_EQ(d->categories.tensor_layer, "torch_allocated");
  EXPECT_EQ(d->categories.tensor_peak_bytes, 10 * MiB);  // = max_memory_allocated
  EXPECT_EQ(d->categories.tensor_peak_bytes, d->torch.allocated_peak_bytes);
  EXPECT_EQ(Figures(*d, "parameter").at_tensor_peak.objects_bytes, 4 * MiB);
  EXPECT_EQ(Figures(*d, "activation").at_tensor_peak.bytes, 6 * MiB);
  EXPECT_EQ(d->categories.cache_at_tensor_peak_bytes, 10 * MiB);  // 20 reserved - 10
  EXPECT_EQ(d->categories.not_torch_at_tensor_peak_bytes, 8 * MiB);
  EXPECT_EQ(d->categories.not_torch_at_tensor_peak_by_library.at("libcublasLt.so"), 8 * MiB);
  EXPECT_EQ(d->categories.not_torch_at_device_peak_bytes, 8 * MiB);
}

// A model of `depth` layers, one backprop step with no tag: 4 MiB of weights, 4 MiB of
// gradients and 8 MiB of Adam state per layer, 10 MiB of activations per layer saved in
// forward and freed in backward, and a 16 MiB library workspace whatever the depth.
StreamBuilder Layers(uint64_t depth) {
  StreamBuilder s(1, 10);
  s.String(1, "forward").String(2, "backward").String(3, "optimizer").String(4, "cudaMalloc");
  s.String(5, "cudaMallocAsync");
  uint64_t t = 1;
  for (uint64_t k = 0; k < depth; ++k) {
    s.Alloc(t++, 0, 0x100000 + k, 4 * MiB, testing::kDevice, kThread, 5);
  }
  s.Alloc(t++, 0, 0x900000, 16 * MiB, testing::kDevice, kThread, 4);  // cuBLAS's own
  s.Push(t++, kThread, 1);
  for (uint64_t k = 0; k < depth; ++k) {
    s.Alloc(t++, 0, 0x200000 + k, 10 * MiB, testing::kDevice, kThread, 5);
  }
  s.Pop(t, kThread).Push(t + 1, kThread, 2);
  t += 2;
  for (uint64_t k = depth; k-- > 0;) {
    s.Alloc(t++, 0, 0x300000 + k, 4 * MiB, testing::kDevice, kThread, 5);
    s.Free(t++, 0, 0x200000 + k, 10 * MiB, testing::kDevice, kThread);
  }
  s.Pop(t, kThread).Push(t + 1, kThread, 3);
  t += 2;
  for (uint64_t k = 0; k < depth; ++k) {
    s.Alloc(t++, 0, 0x400000 + k, 8 * MiB, testing::kDevice, kThread, 5);
  }
  s.Pop(t, kThread).Exit(t + 10, 0).Flush();
  return s;
}

TEST(Categories, SweepGivesEachPartItsSlopePerLayer) {
  std::vector<SweepPoint> points;
  for (uint64_t depth : {2, 4, 8}) {
    auto report = Analyze(Layers(depth).Chunks());
    points.push_back({"BP", std::to_string(depth), 0, FiguresOf(*report, "BP"), ""});
  }
  const RunFigures& deepest = points.back().figures;
  ASSERT_TRUE(deepest.categories);
  // Async mode: the tensors are the cudaMallocAsync allocations; cuBLAS's is a workspace.
  auto deep = Analyze(Layers(8).Chunks());
  EXPECT_EQ(FindDevice(deep->processes.at(0), 0)->categories.tensor_layer, "async");
  EXPECT_EQ(deepest.library_workspace_bytes, 16 * MiB);
  // The peak is in the optimizer, after the activations were freed: their own peak counts.
  EXPECT_EQ(deepest.category_at_peak.at("activation"), 0u);
  EXPECT_EQ(deepest.category_own_peak.at("activation"), 80 * MiB);
  std::map<std::string, double> slope;
  std::vector<double> x;
  std::map<std::string, std::vector<double>> y;
  for (const SweepPoint& p : points) {
    x.push_back(std::stod(p.value));
    for (const auto& [name, bytes] : SweepColumns(p.figures)) {
      y[name].push_back(static_cast<double>(bytes));
    }
  }
  for (const auto& [name, column] : y) ASSERT_TRUE(LeastSquaresSlope(x, column, &slope[name]));
  EXPECT_DOUBLE_EQ(slope["parameters"], 4.0 * MiB);
  EXPECT_DOUBLE_EQ(slope["gradients"], 4.0 * MiB);
  EXPECT_DOUBLE_EQ(slope["optimizer state"], 8.0 * MiB);
  EXPECT_DOUBLE_EQ(slope["activations"], 10.0 * MiB);
  EXPECT_DOUBLE_EQ(slope["library workspaces"], 0.0);
  EXPECT_DOUBLE_EQ(slope["peak"], 16.0 * MiB);  // weights + gradients + state
  const std::string text = SweepText("depth", points);
  EXPECT_NE(text.find("80.0 MiB"), std::string::npos) << text;  // the activations at depth 8
  EXPECT_NE(text.find("+10.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("grows fastest: BP: activations (+10.00 MiB per depth)"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace cumemtrace
