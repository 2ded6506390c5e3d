#include "tracer/recording/tsc_clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace cumemtrace::tracer {
namespace {

constexpr uint64_t kMinBaselineNs = 1'000'000;  // the first rate: pairs at least 1 ms apart
constexpr int64_t kRestartErrorNs = 1'000'000;
constexpr uint64_t kMaxSlewPpm = 500;

Int128 Scaled(uint64_t ns) { return static_cast<Int128>(ns) << 32; }

}  // namespace

void TscLine::Restart(uint64_t tsc, uint64_t monotonic_ns) {
  first_tsc_ = last_tsc_ = tsc;
  first_ns_ = monotonic_ns;
  have_first_ = true;
  have_map_ = false;
}

bool TscLine::Fit(uint64_t tsc, uint64_t monotonic_ns, uint64_t anchor_tsc, TscMap* map) {
  if (!have_first_ || tsc <= last_tsc_ || monotonic_ns < first_ns_) {
    Restart(tsc, monotonic_ns);
    return false;
  }
  if (monotonic_ns - first_ns_ < kMinBaselineNs) {
    last_tsc_ = tsc;
    return false;
  }
  const uint64_t rate =
      static_cast<uint64_t>(Scaled(monotonic_ns - first_ns_) / (tsc - first_tsc_));
  if (!have_map_) {
    *map = TscMap{tsc, monotonic_ns, tsc, rate, rate};
    have_map_ = true;
    last_tsc_ = tsc;
    return true;
  }
  const int64_t error = static_cast<int64_t>(monotonic_ns - map->ToMonotonic(tsc));
  if (error > kRestartErrorNs || error < -kRestartErrorNs) {
    Restart(tsc, monotonic_ns);
    return false;
  }
  // Out over the next interval, taken as the last.
  const uint64_t interval = tsc - last_tsc_;
  const Int128 slew = Int128{error} * (Int128{1} << 32) / static_cast<Int128>(interval);
  const Int128 bound = static_cast<Int128>(rate) * kMaxSlewPpm / 1'000'000;
  const Int128 slew_mult = rate + std::clamp<Int128>(slew, -bound, bound);
  const TscMap previous = *map;
  *map = TscMap{anchor_tsc, previous.ToMonotonic(anchor_tsc), anchor_tsc + interval,
                static_cast<uint64_t>(slew_mult), rate};
  last_tsc_ = tsc;
  return true;
}

void TscClock::Start() {
#if defined(__x86_64__)
  if (const char* use = getenv("CUMEMTRACE_TSC"); use != nullptr && strcmp(use, "0") == 0) return;
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  started_ = std::getline(in, source) && source == "tsc";
#endif
}

void TscClock::Refit() {
#if defined(__x86_64__)
  if (!started_) return;
  // The tightest of three brackets around the kernel's read, taken at its middle.
  uint64_t tsc = 0, ns = 0, best = UINT64_MAX;
  for (int i = 0; i < 3; ++i) {
    _mm_lfence();
    const uint64_t before = __rdtsc();
    const uint64_t now = MonotonicNs();
    _mm_lfence();
    const uint64_t after = __rdtsc();
    if (after - before < best) {
      best = after - before;
      tsc = before + (after - before) / 2;
      ns = now;
    }
  }
  // The new map takes over from here: readers use the old one until it is published, a few
  // ns later.
  _mm_lfence();
  if (line_.Fit(tsc, ns, __rdtsc(), &map_)) {
    Publish(map_);
  } else if (map_.mult != 0) {  // dropped: clock_gettime until the line makes another
    map_ = TscMap{};
    Publish(map_);
  }
#endif
}

void TscClock::Publish(const TscMap& map) {
  sequence_.fetch_add(1, std::memory_order_acq_rel);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  base_tsc_.store(map.base_tsc, std::memory_order_relaxed);
  base_ns_.store(map.base_ns, std::memory_order_relaxed);
  slew_end_tsc_.store(map.slew_end_tsc, std::memory_order_relaxed);
  slew_mult_.store(map.slew_mult, std::memory_order_relaxed);
  mult_.store(map.mult, std::memory_order_relaxed);
  sequence_.fetch_add(1, std::memory_order_release);
}

bool TscClock::Load(TscMap* map) const {
  // A writer stopped halfway (preempted, or in a forked child that copied it halfway) sends
  // the reader to clock_gettime after a few tries rather than keep it waiting.
  for (int tries = 0; tries < 64; ++tries) {
    const uint32_t sequence = sequence_.load(std::memory_order_acquire);
    map->base_tsc = base_tsc_.load(std::memory_order_relaxed);
    map->base_ns = base_ns_.load(std::memory_order_relaxed);
    map->slew_end_tsc = slew_end_tsc_.load(std::memory_order_relaxed);
    map->slew_mult = slew_mult_.load(std::memory_order_relaxed);
    map->mult = mult_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((sequence & 1) == 0 && sequence == sequence_.load(std::memory_order_relaxed)) {
      return map->mult != 0;  // a zero rate: the TSC is not used, or not yet
    }
  }
  return false;
}

uint64_t TscClock::Now() const {
  bool from_tsc = false;
  return TimeOf(0, &from_tsc);
}

uint64_t TscClock::TimeOf(uint64_t tsc, bool* from_tsc) const {
  *from_tsc = false;
#if defined(__x86_64__)
  TscMap map;
  if (Load(&map)) {
    *from_tsc = tsc != 0;
    return map.ToMonotonic(tsc != 0 ? tsc : __rdtsc());
  }
#endif
  return MonotonicNs();
}

}  // namespace cumemtrace::tracer
