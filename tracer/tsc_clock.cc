#include "tracer/tsc_clock.h"

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

bool TscLine::Fit(uint64_t tsc, uint64_t monotonic_ns, TscMap* map) {
  if (!have_first_ || tsc <= first_tsc_ || monotonic_ns < first_ns_) {
    first_tsc_ = tsc;
    first_ns_ = monotonic_ns;
    have_first_ = true;
    have_map_ = false;
    return false;
  }
  if (monotonic_ns - first_ns_ < kMinBaselineNs) return false;
  const uint64_t rate =
      static_cast<uint64_t>(Scaled(monotonic_ns - first_ns_) / (tsc - first_tsc_));
  const TscMap previous = *map;
  const int64_t error =
      have_map_ ? static_cast<int64_t>(monotonic_ns - previous.ToMonotonic(tsc)) : 0;
  if (!have_map_ || tsc <= last_tsc_ || error > kRestartErrorNs || error < -kRestartErrorNs) {
    *map = TscMap{tsc, monotonic_ns, rate};
  } else {
    // Continuous at this pair; the error goes over the next interval, taken as the last.
    const Int128 slew = static_cast<Int128>(error) * (Int128{1} << 32) /
                          static_cast<Int128>(tsc - last_tsc_);
    const Int128 bound = static_cast<Int128>(rate) * kMaxSlewPpm / 1'000'000;
    const Int128 mult = rate + std::clamp<Int128>(slew, -bound, bound);
    *map = TscMap{tsc, previous.ToMonotonic(tsc), static_cast<uint64_t>(mult)};
  }
  have_map_ = true;
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
  TscMap map{base_tsc_.load(std::memory_order_relaxed), base_ns_.load(std::memory_order_relaxed),
             mult_.load(std::memory_order_relaxed)};
  if (!line_.Fit(tsc, ns, &map)) return;
  sequence_.fetch_add(1, std::memory_order_acq_rel);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  base_tsc_.store(map.base_tsc, std::memory_order_relaxed);
  base_ns_.store(map.base_ns, std::memory_order_relaxed);
  mult_.store(map.mult, std::memory_order_relaxed);
  sequence_.fetch_add(1, std::memory_order_release);
  ready_.store(true, std::memory_order_release);
#endif
}

uint64_t TscClock::Mapped() const {
#if defined(__x86_64__)
  TscMap map;
  uint32_t sequence = 0;
  do {
    sequence = sequence_.load(std::memory_order_acquire);
    map.base_tsc = base_tsc_.load(std::memory_order_relaxed);
    map.base_ns = base_ns_.load(std::memory_order_relaxed);
    map.mult = mult_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
  } while ((sequence & 1) != 0 || sequence != sequence_.load(std::memory_order_relaxed));
  return map.ToMonotonic(__rdtsc());
#else
  return MonotonicNs();
#endif
}

}  // namespace cumemtrace::tracer
