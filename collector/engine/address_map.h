// Internal: live allocations by key (device slot and address, accountant.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace cumemtrace::internal {

// Live allocations by (device slot, address): open addressing with linear probing and
// backward-shift deletion, so the hot path allocates nothing per event (std::unordered_map
// allocates a node per insertion).
class AddressMap {
 public:
  static constexpr size_t kNotFound = ~size_t{0};

  size_t Find(uint64_t key) const {
    if (values_.empty()) return kNotFound;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      if (values_[i] == 0) return kNotFound;
      if (keys_[i] == key) return i;
    }
  }
  uint32_t ValueAt(size_t pos) const { return values_[pos] - 1; }
  // The key must be absent.
  void Insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > values_.size()) Grow();
    size_t i = Home(key);
    while (values_[i] != 0) i = (i + 1) & mask_;
    keys_[i] = key;
    values_[i] = value + 1;
    ++size_;
  }
  void EraseAt(size_t pos) {
    // Shift later members of the probe run back so that no lookup stops early.
    size_t hole = pos;
    for (size_t i = (pos + 1) & mask_; values_[i] != 0; i = (i + 1) & mask_) {
      const size_t home = Home(keys_[i]);
      // Move i into the hole when its home is not in the cyclic range (hole, i].
      if (((i - home) & mask_) >= ((i - hole) & mask_)) {
        keys_[hole] = keys_[i];
        values_[hole] = values_[i];
        hole = i;
      }
    }
    values_[hole] = 0;
    --size_;
  }
  template <typename F>
  void ForEachValue(F&& f) const {
    for (size_t i = 0; i < values_.size(); ++i) {
      if (values_[i] != 0) f(values_[i] - 1);
    }
  }

 private:
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void Grow() {
    const std::vector<uint64_t> old_keys = std::move(keys_);
    const std::vector<uint32_t> old_values = std::move(values_);
    const size_t capacity = old_values.empty() ? 1024 : old_values.size() * 2;
    keys_.assign(capacity, 0);
    values_.assign(capacity, 0);
    mask_ = capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_values.size(); ++i) {
      if (old_values[i] != 0) Insert(old_keys[i], old_values[i] - 1);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;  // value + 1; 0 marks an empty slot
  size_t size_ = 0;
  size_t mask_ = 0;
};

}  // namespace cumemtrace::internal
