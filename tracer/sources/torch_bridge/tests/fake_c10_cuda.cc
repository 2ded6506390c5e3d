// A fake libc10_cuda.so for the bridge tests: it exports the allocator variable under torch's
// name and behaves like the native caching allocator where the bridge can tell: an ALLOC is
// recorded before allocated_bytes grows by the block's size, a FREE_REQUESTED after it
// shrinks, and trackers are called under the device's (recursive) lock.
#include <c10/cuda/CUDACachingAllocator.h>

#include <mutex>
#include <stdexcept>
#include <vector>

namespace c10::cuda::CUDACachingAllocator {
std::atomic<CUDAAllocator*> allocator{nullptr};

size_t g_divisions = 0;
}  // namespace c10::cuda::CUDACachingAllocator

// As torch 2.9-2.11's, exported from libc10 under its name: the divisions its round_size
// applies to a request (the CUDA allocator's own config no longer exports one).
namespace c10::CachingAllocator {
struct AcceleratorAllocatorConfig {
  static size_t roundup_power2_divisions(size_t size);
};
__attribute__((visibility("default"))) size_t AcceleratorAllocatorConfig::roundup_power2_divisions(
    size_t /*size*/) {
  return c10::cuda::CUDACachingAllocator::g_divisions;
}
}  // namespace c10::CachingAllocator

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using Entry = cca::TraceEntry;

class FakeAllocator : public cca::CUDAAllocator {
 public:
  // "native-throwing": a native allocator whose attach throws.
  explicit FakeAllocator(std::string name)
      : name_(name == "native-throwing" ? "native" : name), throws_(name == "native-throwing") {}
  cca::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (device != 0) throw std::runtime_error("invalid device");
    return stats_;
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (throws_) throw std::runtime_error("no trackers here");
    trackers_.push_back(std::move(tracker));
  }
  std::string name() override { return name_; }

  void Record(Entry::Action action, size_t address, size_t size) {
    Entry entry;
    entry.action_ = action;
    entry.addr_ = address;
    entry.size_ = size;
    entry.time_.approx_t_ = ++time_;  // a count, so that each event's shows which it is
    for (const auto& tracker : trackers_) tracker(entry);
  }
  void Alloc(size_t address, size_t requested, size_t block) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    Record(Entry::ALLOC, address, requested);
    auto& all = stats_.allocated_bytes[0];
    all.current += static_cast<int64_t>(block);
    all.allocated += static_cast<int64_t>(block);
  }
  void Free(size_t address, size_t requested, size_t block) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    auto& all = stats_.allocated_bytes[0];
    all.current -= static_cast<int64_t>(block);
    all.freed += static_cast<int64_t>(block);
    Record(Entry::FREE_REQUESTED, address, requested);
    Record(Entry::FREE_COMPLETED, address, requested);
  }
  void Segment(size_t address, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    stats_.reserved_bytes[0].current += static_cast<int64_t>(bytes);
    Record(Entry::SEGMENT_ALLOC, address, bytes);
  }

 private:
  std::string name_;
  bool throws_;
  std::recursive_mutex mutex_;
  cca::DeviceStats stats_;
  std::vector<cca::AllocatorTraceTracker> trackers_;
  uint64_t time_ = 1000;
};

FakeAllocator* Fake() { return static_cast<FakeAllocator*>(cca::allocator.load()); }

}  // namespace

// Test controls (C names, looked up with dlsym).
extern "C" __attribute__((visibility("default"))) void fake_torch_install(const char* name) {
  cca::allocator.store(new FakeAllocator(name));
}
extern "C" __attribute__((visibility("default"))) void fake_torch_alloc(size_t address,
                                                                         size_t requested,
                                                                         size_t block) {
  Fake()->Alloc(address, requested, block);
}
extern "C" __attribute__((visibility("default"))) void fake_torch_free(size_t address,
                                                                        size_t requested,
                                                                        size_t block) {
  Fake()->Free(address, requested, block);
}
extern "C" __attribute__((visibility("default"))) void fake_torch_segment(size_t address,
                                                                           size_t bytes) {
  Fake()->Segment(address, bytes);
}
extern "C" __attribute__((visibility("default"))) void fake_torch_set_divisions(size_t divisions) {
  cca::g_divisions = divisions;
}
