// The post-mortem of an out-of-memory (oom.h, docs/oom.md) on fabricated allocator streams: a
// fake caching allocator emits the bridge's events with the counters the real one would show,
// so the block sizes are settled as in a real trace, and the post-mortem rebuilds the cache
// from them.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/fake_allocator.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

using testing::Analyze;
using testing::FakeAllocator;
using testing::kMiB;
using testing::kTotal;
constexpr const char* kTorchApi = "PyTorch caching allocator";

// The failures of the one process, and the first one of PyTorch's allocator.
const FailedAllocationReport* TorchOom(const Report& report) {
  for (const FailedAllocationReport& f : report.processes.at(0).failed_allocations) {
    if (f.api == kTorchApi) return &f;
  }
  return nullptr;
}

// Whole pages of `page` bytes inside [from, to) counted from `segment`: the rule of docs/oom.md,
// written out again.
uint64_t Pages(uint64_t segment, uint64_t from, uint64_t to, uint64_t page) {
  uint64_t bytes = 0;
  for (uint64_t p = segment; p + page <= to; p += page) {
    if (p >= from) bytes += page;
  }
  return bytes;
}

constexpr uint64_t kSeg = 0x100000000ull;
constexpr uint64_t kSmallSeg = 0x200000000ull;

// A 512 MiB segment split into eight 64 MiB tensors, every other one freed: 256 MiB free in
// four 64 MiB holes; a small-pool segment holds one 512-byte tensor.
FakeAllocator Fragmented() {
  FakeAllocator a;
  a.Segment(kSeg, 512 * kMiB);
  for (uint64_t i = 0; i < 8; ++i) a.Alloc(kSeg + i * 64 * kMiB, 64 * kMiB);
  for (uint64_t i = 1; i < 8; i += 2) a.Free(kSeg + i * 64 * kMiB);
  a.Segment(kSmallSeg, 2 * kMiB).Alloc(kSmallSeg, 512);
  return a;
}

TEST(OomPostMortem, FragmentationNamesTheLargestFreeBlockAndWouldFitWithExpandableSegments) {
  FakeAllocator a = Fragmented();
  a.Oom(128 * kMiB, 40 * kMiB);
  auto report = Analyze(a.Chunks());
  const FailedAllocationReport* f = TorchOom(*report);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(report->processes[0].torch.counter_mismatches, 0u);
  EXPECT_EQ(f->error_name, "OutOfMemoryError");
  EXPECT_EQ(f->device_total_bytes, kTotal);
  EXPECT_EQ(f->phase, "forward");
  const OomPostMortem& pm = f->post_mortem;
  ASSERT_TRUE(pm.cache_known);
  EXPECT_EQ(pm.reason, "fragmentation");
  EXPECT_EQ(pm.pool, "large");
  EXPECT_EQ(pm.request_bytes, 128 * kMiB);
  EXPECT_EQ(pm.device_free_bytes, 40 * kMiB);
  EXPECT_EQ(pm.pool_free_bytes, 256 * kMiB);  // the small pool's free bytes are not its pool's
  EXPECT_EQ(pm.largest_free_block_bytes, 64 * kMiB);
  EXPECT_EQ(pm.cache_free_bytes, 256 * kMiB + 2 * kMiB - 512);
  EXPECT_EQ(pm.wholly_free_segment_bytes, 0u);
  ASSERT_EQ(pm.pools.size(), 2u);
  EXPECT_EQ(pm.pools[0].pool, "large");
  EXPECT_EQ(pm.pools[0].free_blocks, 4u);
  EXPECT_EQ(pm.pools[0].allocated_bytes, 256 * kMiB);
  EXPECT_EQ(pm.pools[1].pool, "small");
  EXPECT_EQ(pm.pools[1].largest_free_block_bytes, 2 * kMiB - 512);
  // expandable_segments: the whole 20 MiB pages inside the holes go back to the driver.
  uint64_t pages = 0;
  for (uint64_t i = 1; i < 8; i += 2) {
    pages += Pages(kSeg, kSeg + i * 64 * kMiB, kSeg + (i + 1) * 64 * kMiB, 20 * kMiB);
  }
  pages += Pages(kSmallSeg, kSmallSeg + 512, kSmallSeg + 2 * kMiB, 2 * kMiB);  // none
  EXPECT_TRUE(pm.expandable_segments.fits);
  EXPECT_EQ(pm.expandable_segments.available_bytes, 40 * kMiB + pages);
  EXPECT_EQ(pm.expandable_segments.needed_bytes, 140 * kMiB);  // 128 MiB in 20 MiB pages
  // Nothing wholly free: an empty_cache() gives nothing back.
  EXPECT_FALSE(pm.empty_cache.fits);
  EXPECT_EQ(pm.empty_cache.short_by_bytes, 128 * kMiB - 40 * kMiB);
  EXPECT_EQ(pm.largest_request_that_fits_bytes, 64 * kMiB);
  EXPECT_EQ(pm.smaller_request.short_by_bytes, 64 * kMiB);
  // What held the memory: the live tensors, all born in forward.
  EXPECT_EQ(pm.held_bytes, 256 * kMiB + 512);
  ASSERT_EQ(pm.held_by_phase.size(), 1u);
  EXPECT_EQ(pm.held_by_phase[0].name, "forward");
  EXPECT_EQ(pm.held_by_phase[0].count, 5u);
  ASSERT_FALSE(pm.held_by_kind.empty());
  EXPECT_EQ(pm.held_by_kind[0].name, "TORCH_ALLOCATED");
}

TEST(OomPostMortem, ATooLargeRequestIsNotFragmentation) {
  FakeAllocator a = Fragmented();
  a.Oom(1024 * kMiB, 40 * kMiB);
  auto report = Analyze(a.Chunks());
  const FailedAllocationReport* f = TorchOom(*report);
  ASSERT_NE(f, nullptr);
  const OomPostMortem& pm = f->post_mortem;
  EXPECT_EQ(pm.reason, "too_large");
  EXPECT_EQ(pm.largest_free_block_bytes, 64 * kMiB);
  EXPECT_FALSE(pm.expandable_segments.fits);
  EXPECT_EQ(pm.expandable_segments.short_by_bytes,
            1040 * kMiB - pm.expandable_segments.available_bytes);
  EXPECT_FALSE(pm.empty_cache.fits);
}

TEST(OomPostMortem, EmptyCacheWouldHaveMadeRoomForAnotherLibrarysAllocation) {
  FakeAllocator a;
  a.Segment(kSeg, 20 * kMiB).Alloc(kSeg, 8 * kMiB).Free(kSeg);               // wholly free, cached
  a.Segment(kSeg + 64 * kMiB, 20 * kMiB).Alloc(kSeg + 64 * kMiB, 4 * kMiB);  // split
  a.DriverFailure(24 * kMiB, 10 * kMiB);
  auto report = Analyze(a.Chunks());
  const auto& failures = report->processes.at(0).failed_allocations;
  ASSERT_EQ(failures.size(), 1u);
  const OomPostMortem& pm = failures[0].post_mortem;
  EXPECT_EQ(pm.reason, "cached_segments");
  EXPECT_EQ(pm.pool, "");
  EXPECT_EQ(pm.wholly_free_segment_bytes, 20 * kMiB);
  EXPECT_EQ(pm.cache_free_bytes, 20 * kMiB + 16 * kMiB);
  EXPECT_TRUE(pm.empty_cache.fits);
  EXPECT_EQ(pm.empty_cache.available_bytes, 30 * kMiB);
  EXPECT_EQ(pm.empty_cache.needed_bytes, 24 * kMiB);
  // A request 7 MiB larger would not have fitted even so.
  FakeAllocator b;
  b.Segment(kSeg, 20 * kMiB).Alloc(kSeg, 8 * kMiB).Free(kSeg);
  b.DriverFailure(31 * kMiB, 10 * kMiB);
  auto larger = Analyze(b.Chunks());
  const OomPostMortem& no = larger->processes.at(0).failed_allocations.at(0).post_mortem;
  EXPECT_EQ(no.reason, "too_large");
  EXPECT_FALSE(no.empty_cache.fits);
  EXPECT_EQ(no.empty_cache.short_by_bytes, 1 * kMiB);
}

TEST(OomPostMortem, TheAllocatorsOwnReleaseBeforeItRaisesIsCounted) {
  FakeAllocator a = Fragmented();
  a.Segment(0x300000000ull, 20 * kMiB).Alloc(0x300000000ull, 8 * kMiB).Free(0x300000000ull);
  // Its retry: release_cached_blocks gives the wholly free segment back, then it raises.
  a.SegmentFree(0x300000000ull, 20 * kMiB).Oom(128 * kMiB, 60 * kMiB);
  auto report = Analyze(a.Chunks());
  const FailedAllocationReport* f = TorchOom(*report);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->post_mortem.released_before_bytes, 20 * kMiB);
  EXPECT_EQ(f->post_mortem.wholly_free_segment_bytes, 0u);  // already given back
  EXPECT_EQ(f->post_mortem.reason, "fragmentation");
}

TEST(OomPostMortem, PoolsArePerStream) {
  // Stream 7: 128 MiB free in two 64 MiB holes. Stream 9: one 256 MiB hole.
  constexpr uint64_t kSeg9 = 0x400000000ull;
  auto build = [&](uint64_t request) {
    FakeAllocator a;
    a.Segment(kSeg, 256 * kMiB, 7);
    for (uint64_t i = 0; i < 4; ++i) a.Alloc(kSeg + i * 64 * kMiB, 64 * kMiB, 7);
    a.Free(kSeg + 64 * kMiB).Free(kSeg + 192 * kMiB);
    a.Segment(kSeg9, 512 * kMiB, 9).Alloc(kSeg9, 256 * kMiB, 9);
    a.Oom(request, 40 * kMiB, 7);
    return Analyze(a.Chunks());
  };
  auto report = build(128 * kMiB);
  const OomPostMortem& pm = TorchOom(*report)->post_mortem;
  EXPECT_EQ(pm.reason, "fragmentation");
  EXPECT_EQ(pm.stream, 7u);
  EXPECT_EQ(pm.pool_free_bytes, 128 * kMiB);
  EXPECT_EQ(pm.largest_free_block_bytes, 64 * kMiB);  // not stream 9's 256 MiB block
  ASSERT_EQ(pm.pools.size(), 2u);
  EXPECT_EQ(pm.pools[0].stream, 9u);
  EXPECT_EQ(pm.pools[0].largest_free_block_bytes, 256 * kMiB);
  EXPECT_EQ(pm.pools[1].stream, 7u);
  EXPECT_EQ(pm.pools[1].largest_free_block_bytes, 64 * kMiB);
  // More than its stream's free bytes, less than the device's and the whole cache's.
  auto elsewhere = build(200 * kMiB);
  EXPECT_EQ(TorchOom(*elsewhere)->post_mortem.reason, "split");
}

TEST(OomPostMortem, ExpandableMappingsMergeAndSplit) {
  FakeAllocator a;
  a.Map(kSeg, 20 * kMiB).Map(kSeg + 20 * kMiB, 20 * kMiB).Map(kSeg + 40 * kMiB, 20 * kMiB);
  a.Alloc(kSeg, 8 * kMiB).Alloc(kSeg + 50 * kMiB, 4 * kMiB);
  a.Unmap(kSeg + 20 * kMiB, 20 * kMiB);
  a.Oom(30 * kMiB, 10 * kMiB);
  auto report = Analyze(a.Chunks());
  const OomPostMortem& pm = TorchOom(*report)->post_mortem;
  EXPECT_TRUE(pm.expandable_segments_on);
  ASSERT_EQ(pm.pools.size(), 1u);
  EXPECT_TRUE(pm.pools[0].expandable);
  EXPECT_EQ(pm.pools[0].segments, 2u);  // [0, 20) and [40, 60) MiB
  EXPECT_EQ(pm.pools[0].segment_bytes, 40 * kMiB);
  // Free: [8, 20) and [40, 50) and [54, 60) MiB.
  EXPECT_EQ(pm.cache_free_bytes, 28 * kMiB);
  EXPECT_EQ(pm.largest_free_block_bytes, 12 * kMiB);
  EXPECT_EQ(pm.reason, "split");  // 10 MiB on the device, 28 MiB in pieces
}

TEST(OomPostMortem, WithoutTheBridgeOnlyTheDeviceIsKnown) {
  FakeAllocator a(/*attached=*/false);
  a.DriverFailure(24 * kMiB, 10 * kMiB);
  auto report = Analyze(a.Chunks());
  const OomPostMortem& pm = report->processes.at(0).failed_allocations.at(0).post_mortem;
  EXPECT_FALSE(pm.cache_known);
  EXPECT_EQ(pm.reason, "device_full");
  EXPECT_EQ(pm.smaller_request.short_by_bytes, 14 * kMiB);
}

TEST(OomPostMortem, SummaryTextAndJsonSayIt) {
  FakeAllocator a = Fragmented();
  a.Oom(128 * kMiB, 40 * kMiB);
  auto report = Analyze(a.Chunks());
  std::ostringstream text;
  PrintSummaryText(*report, text);
  EXPECT_NE(text.str().find("why: fragmentation: PyTorch's cache held 268,435,456 B free in the "
                            "large pool of stream 0"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("expandable_segments:True  yes"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(*report));
  const nlohmann::json& failures = j["processes"][0]["failed_allocations"];
  ASSERT_EQ(failures.size(), 1u);
  const nlohmann::json& pm = failures[0]["post_mortem"];
  EXPECT_EQ(pm["reason"], "fragmentation");
  EXPECT_EQ(pm["largest_free_block_bytes"], 64 * kMiB);
  EXPECT_EQ(pm["pool_free_bytes"], 256 * kMiB);
  EXPECT_EQ(pm["would_fit"]["expandable_segments"]["fits"], true);
  EXPECT_EQ(pm["would_fit"]["empty_cache"]["short_by_bytes"], 88 * kMiB);
  EXPECT_EQ(pm["pools"][0]["largest_free_block_bytes"], 64 * kMiB);
  EXPECT_EQ(pm["held_by_phase"][0]["name"], "forward");
}

// What held the memory at the OOM by category: the state of that instant (not the end's), the
// tensors only, every byte in one category; the largest holders with theirs.
TEST(OomPostMortem, ByCategoryIsTheStateOfThatInstant) {
  constexpr uint64_t kBlock = 64 * kMiB;
  std::map<uint64_t, uint64_t> live;  // the tensors live, as the stream keeps them
  FakeAllocator a = testing::OomWithCategories(&live);
  auto report = Analyze(a.Chunks());
  const FailedAllocationReport* f = TorchOom(*report);
  ASSERT_NE(f, nullptr);
  const OomPostMortem& pm = f->post_mortem;
  ASSERT_TRUE(pm.categories_given);
  uint64_t tensors = 0;
  for (const auto& [address, bytes] : live) tensors += bytes;
  EXPECT_EQ(pm.held_tensor_bytes, tensors);
  EXPECT_EQ(pm.held_bytes, tensors + 10 * kMiB);
  uint64_t sum = 0, count = 0;
  std::map<std::string, uint64_t> by_category;
  for (const HeldGroup& g : pm.held_by_category) {
    sum += g.bytes;
    count += g.count;
    by_category[g.name] = g.bytes;
  }
  EXPECT_EQ(sum, pm.held_tensor_bytes);
  EXPECT_EQ(count, live.size());
  EXPECT_EQ(by_category["parameter"], kBlock);
  EXPECT_EQ(by_category["optimizer_state"], kBlock);
  // The tagged activation; the untagged block and the small one are inferred, somewhere.
  EXPECT_GE(by_category["activation"], kBlock);
  // The end differs: what the post-mortem shows is not the end's figures.
  const DeviceReport* d = testing::FindDevice(report->processes.at(0), 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->categories.by_category.at("optimizer_state").at_end.bytes, 0u);
  EXPECT_EQ(d->categories.by_category.at("parameter").at_end.bytes, 2 * kBlock);
  // The largest holders, largest first, ties by address, each with its category.
  ASSERT_GE(pm.largest_held.size(), 6u);
  EXPECT_EQ(pm.largest_held[0].address, kSeg);
  EXPECT_EQ(pm.largest_held[0].bytes, kBlock);
  EXPECT_EQ(pm.largest_held[0].category, "parameter");
  EXPECT_TRUE(pm.largest_held[0].category_from_objects);
  EXPECT_EQ(pm.largest_held[0].phase, "forward");
  EXPECT_EQ(pm.largest_held[1].category, "optimizer_state");
  EXPECT_EQ(pm.largest_held[2].category, "activation");
  EXPECT_FALSE(pm.largest_held[3].category.empty());  // inferred
  EXPECT_FALSE(pm.largest_held[3].category_from_objects);
  EXPECT_EQ(pm.largest_held[4].address, testing::kExampleLibrary);
  EXPECT_EQ(pm.largest_held[4].category, "");  // another library's: no tensor
  EXPECT_EQ(pm.largest_held[4].kind, "DEVICE");

  std::ostringstream text;
  PrintSummaryText(*report, text);
  EXPECT_NE(text.str().find("    by category: "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("parameter 64.0 MiB"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("; tensors 256 MiB (268,435,968 B), not tensors 10.0 MiB"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("largest held then:"), std::string::npos) << text.str();
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(*report));
  const nlohmann::json& jpm = j["processes"][0]["failed_allocations"][0]["post_mortem"];
  uint64_t json_sum = 0;
  for (const auto& g : jpm["held_by_category"]) json_sum += g["bytes"].get<uint64_t>();
  EXPECT_EQ(jpm["held_tensor_bytes"], tensors);
  EXPECT_EQ(json_sum, tensors);
  EXPECT_EQ(jpm["largest_held"][0]["category"], "parameter");
  EXPECT_EQ(jpm["largest_held"][4]["category"], nullptr);
}

// A failed cudaMallocHost says nothing about the device: no post-mortem.
TEST(OomPostMortem, HostMemoryHasNone) {
  FakeAllocator a = Fragmented();
  v1::Event e;
  e.set_timestamp_ns(1000);
  v1::FailedAllocation* f = e.mutable_failed_allocation();
  f->set_requested_bytes(64 * kMiB);
  f->set_error_code(2);
  f->set_kind(v1::MEMORY_KIND_PINNED);
  a.Raw(e);
  auto report = Analyze(a.Chunks());
  const auto& failures = report->processes.at(0).failed_allocations;
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].kind, "PINNED");
  EXPECT_EQ(failures[0].post_mortem.reason, "");
}

// A program that retries (a batch-size search) fails many times: the text shows three.
TEST(OomPostMortem, TheTextShowsTheFirstThreeAndCountsTheOthers) {
  FakeAllocator a = Fragmented();
  for (int i = 0; i < 5; ++i) a.Oom(128 * kMiB, 40 * kMiB);
  auto report = Analyze(a.Chunks());
  EXPECT_EQ(report->processes.at(0).failed_allocations.size(), 5u);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  size_t shown = 0;
  for (size_t at = 0; (at = text.str().find("  out of memory at ", at)) != std::string::npos;
       ++at) {
    ++shown;
  }
  EXPECT_EQ(shown, 3u);
  EXPECT_NE(text.str().find("(2 more out-of-memory post-mortems in summary.json)"),
            std::string::npos);
}

}  // namespace
}  // namespace cumemtrace
