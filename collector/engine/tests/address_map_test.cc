// The live-allocation map is hand-written open addressing; check it against std::unordered_map.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "collector/engine/address_map.h"

namespace cumemtrace::internal {
namespace {

TEST(AddressMap, AgreesWithUnorderedMapUnderRandomInsertAndErase) {
  std::mt19937_64 rng(7);
  AddressMap map;
  std::unordered_map<uint64_t, uint32_t> reference;
  std::vector<uint64_t> keys;
  for (uint32_t step = 0; step < 200000; ++step) {
    // Keys from a small, clustered pool (page-aligned addresses, like allocators hand out)
    // so probe runs are long and deletions shift entries around.
    const uint64_t key = 0x7f0000000000ull + (rng() % 5000) * 0x200000ull;
    const size_t pos = map.Find(key);
    auto it = reference.find(key);
    ASSERT_EQ(pos != AddressMap::kNotFound, it != reference.end()) << "step " << step;
    if (it != reference.end()) {
      ASSERT_EQ(map.ValueAt(pos), it->second);
      if (rng() % 2) {
        map.EraseAt(pos);
        reference.erase(it);
      }
    } else {
      map.Insert(key, step);
      reference.emplace(key, step);
    }
  }
  size_t count = 0;
  map.ForEachValue([&count](uint32_t) { ++count; });
  EXPECT_EQ(count, reference.size());
  for (const auto& [key, value] : reference) {
    const size_t pos = map.Find(key);
    ASSERT_NE(pos, AddressMap::kNotFound);
    EXPECT_EQ(map.ValueAt(pos), value);
  }
}

TEST(AddressMap, KeyZeroIsAValidKey) {
  AddressMap map;
  map.Insert(0, 5);
  ASSERT_NE(map.Find(0), AddressMap::kNotFound);
  EXPECT_EQ(map.ValueAt(map.Find(0)), 5u);
  map.EraseAt(map.Find(0));
  EXPECT_EQ(map.Find(0), AddressMap::kNotFound);
}

}  // namespace
}  // namespace cumemtrace::internal
