#include "tracer/record_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace cumemtrace::tracer {
namespace {

HostRecord At(uint64_t t) {
  HostRecord r;
  r.timestamp_ns = t;
  return r;
}

TEST(RecordQueue, DropsAndCountsWhenFullWithTheTimeWindow) {
  RecordQueue queue(2);
  EXPECT_TRUE(queue.Push(At(1)));
  EXPECT_TRUE(queue.Push(At(2)));
  EXPECT_FALSE(queue.Push(At(3)));
  EXPECT_FALSE(queue.Push(At(4)));
  std::vector<HostRecord> out;
  DropWindow drops = queue.TakeAll(&out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].timestamp_ns, 2u);
  EXPECT_EQ(drops.count, 2u);
  EXPECT_EQ(drops.first_ns, 3u);
  EXPECT_EQ(drops.last_ns, 4u);
  // Room again, and the drop counter restarts.
  EXPECT_TRUE(queue.Push(At(5)));
  drops = queue.TakeAll(&out);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(drops.count, 0u);
}

TEST(RecordQueue, ConcurrentProducersLoseNothingBelowCapacity) {
  RecordQueue queue(1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&queue] {
      for (int i = 0; i < 10000; ++i) queue.Push(At(static_cast<uint64_t>(i)));
    });
  }
  size_t total = 0;
  std::vector<HostRecord> out;
  for (int round = 0; round < 50; ++round) {
    queue.TakeAll(&out);
    total += out.size();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(queue.TakeAll(&out).count, 0u);
  total += out.size();
  EXPECT_EQ(total, 40000u);
}

}  // namespace
}  // namespace cumemtrace::tracer
