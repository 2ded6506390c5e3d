#include "tracer/recording/tsc_clock.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

namespace cumemtrace::tracer {
namespace {

// A fabricated machine: a 2.8 GHz TSC, and a kernel clock that runs at `ppm` off the TSC's
// nominal rate from `slew_from` on (the kernel slewing towards its time source).
struct Machine {
  double ns_per_tick = 1.0 / 2.8;
  double ppm = 0;
  uint64_t slew_from = UINT64_MAX;
  double Monotonic(uint64_t tsc) const {
    const double base = 5e11 + static_cast<double>(tsc) * ns_per_tick;
    if (tsc <= slew_from) return base;
    return base + static_cast<double>(tsc - slew_from) * ns_per_tick * ppm * 1e-6;
  }
};

uint64_t At(const Machine& m, uint64_t tsc) { return static_cast<uint64_t>(m.Monotonic(tsc)); }

// Within the rounding of whole nanoseconds at the pairs.
TEST(TscLine, NeedsTwoPairsAMillisecondApart) {
  const Machine m;
  TscLine line;
  TscMap map;
  EXPECT_FALSE(line.Fit(1'000'000, At(m, 1'000'000), 1'000'000, &map));
  const uint64_t half_ms = 1'000'000 + 1'400'000;  // 0.5 ms later
  EXPECT_FALSE(line.Fit(half_ms, At(m, half_ms), half_ms, &map));
  const uint64_t later = 1'000'000 + 28'000'000;  // 10 ms
  ASSERT_TRUE(line.Fit(later, At(m, later), later, &map));
  for (uint64_t t = later; t < later + 28'000'000; t += 1'234'567) {
    EXPECT_NEAR(static_cast<double>(map.ToMonotonic(t)), m.Monotonic(t), 3.0) << t;
  }
  // Taken a little before the base, as an unordered read may be.
  EXPECT_NEAR(static_cast<double>(map.ToMonotonic(later - 100)), m.Monotonic(later - 100), 3.0);
}

// Pairs every 9-11 ms with up to 20 ns of error each; after 2 s the kernel's clock runs 40 ppm
// faster. Each new map takes over 1 us after its pair, where the last one stands, so times
// taken in order never go back, and the map stays within half a microsecond of the kernel's
// clock throughout.
TEST(TscLine, StaysContinuousAndCloseWhileTheKernelSlewsItsClock) {
  Machine m;
  m.slew_from = 5'600'000'000;  // 2 s at 2.8 GHz
  m.ppm = 40;
  TscLine line;
  TscMap map;
  bool have_map = false;
  uint64_t tsc = 1000;
  uint64_t last_time = 0;
  double worst = 0;
  for (int fit = 0; fit < 600; ++fit) {  // about 6 s
    const double jitter = 20.0 * std::sin(fit * 1.7);
    const uint64_t ns = static_cast<uint64_t>(std::llround(m.Monotonic(tsc) + jitter));
    const uint64_t anchor = tsc + 2800;
    const TscMap before = map;
    if (have_map) {
      for (uint64_t t = tsc; t < anchor; t += 700) {  // the old map until the new one is up
        EXPECT_GE(before.ToMonotonic(t), last_time) << "went back at fit " << fit;
        last_time = before.ToMonotonic(t);
      }
    }
    ASSERT_EQ(line.Fit(tsc, ns, anchor, &map), fit > 0) << fit;
    if (have_map) {
      EXPECT_NEAR(static_cast<double>(map.ToMonotonic(anchor)),
                  static_cast<double>(before.ToMonotonic(anchor)), 1.0)
          << "not continuous at fit " << fit;
    }
    have_map = fit > 0;
    const uint64_t interval = 28'000'000 + static_cast<uint64_t>((fit * 7919) % 5'600'000) -
                              2'800'000;  // 9-11 ms
    for (uint64_t t = anchor; have_map && t < tsc + interval; t += interval / 16) {
      const uint64_t time = map.ToMonotonic(t);
      EXPECT_GE(time, last_time) << "went back at fit " << fit;
      last_time = time;
      if (fit > 20) worst = std::max(worst, std::abs(static_cast<double>(time) - m.Monotonic(t)));
    }
    tsc += interval;
  }
  EXPECT_LT(worst, 500.0);
  EXPECT_GT(worst, 0.0);  // the fabricated jitter and slew do show
}

// After 10 s of pairs, one 400 ns off makes a steep slew (40 ppm); the sender then stalls for
// a second. The slew ended after one interval, so the map is still within a few hundred ns,
// not 40 us off.
TEST(TscLine, ASlewEndsAfterOneIntervalWhenTheSenderStalls) {
  const Machine m;
  TscLine line;
  TscMap map;
  constexpr uint64_t kInterval = 28'000'000;  // 10 ms
  uint64_t tsc = 0;
  for (int fit = 0; fit < 1000; ++fit, tsc += kInterval) line.Fit(tsc, At(m, tsc), tsc, &map);
  ASSERT_TRUE(line.Fit(tsc, At(m, tsc) + 400, tsc, &map));
  EXPECT_GT(map.slew_mult, map.mult);
  const uint64_t after_stall = tsc + 100 * kInterval;
  EXPECT_NEAR(static_cast<double>(map.ToMonotonic(after_stall)), m.Monotonic(after_stall), 500.0);
  EXPECT_GE(map.ToMonotonic(tsc + kInterval + 1), map.ToMonotonic(tsc + kInterval));
  EXPECT_TRUE(line.Fit(after_stall, At(m, after_stall), after_stall, &map));
}

// An error over 1 ms either way (a clock that jumped, a paused machine), or a TSC that went
// back: no map until two new pairs 1 ms apart, then one fitted on them alone.
TEST(TscLine, DropsTheMapWhenTheTscStopsFollowingTheKernelsClock) {
  Machine m;
  for (const int64_t jump : {int64_t{3'000'000}, int64_t{-3'000'000}}) {
    SCOPED_TRACE(jump);
    TscLine line;
    TscMap map;
    line.Fit(0, At(m, 0), 0, &map);
    ASSERT_TRUE(line.Fit(28'000'000, At(m, 28'000'000), 28'000'000, &map));
    const uint64_t t = 56'000'000;
    const uint64_t jumped = static_cast<uint64_t>(static_cast<int64_t>(At(m, t)) + jump);
    EXPECT_FALSE(line.Fit(t, jumped, t, &map));
    const uint64_t u = t + 28'000'000;
    const uint64_t later = static_cast<uint64_t>(static_cast<int64_t>(At(m, u)) + jump);
    ASSERT_TRUE(line.Fit(u, later, u, &map));
    EXPECT_NEAR(static_cast<double>(map.ToMonotonic(u + 1'000'000)),
                m.Monotonic(u + 1'000'000) + static_cast<double>(jump), 3.0);
  }
  TscLine line;
  TscMap map;
  line.Fit(1'000'000'000, At(m, 1'000'000'000), 1'000'000'000, &map);
  ASSERT_TRUE(line.Fit(1'028'000'000, At(m, 1'028'000'000), 1'028'000'000, &map));
  EXPECT_FALSE(line.Fit(10, At(m, 1'056'000'000), 10, &map));  // another machine's TSC
  EXPECT_FALSE(line.Fit(20, At(m, 1'056'000'010), 20, &map));
}

// The real clock: before two fits it is clock_gettime; after them it stays between two reads
// of clock_gettime around it (with room for the pair's own error), on every reading thread,
// while the sender refits beside them. With CUMEMTRACE_TSC=0 it never uses the TSC.
TEST(TscClock, FollowsTheKernelsClockWhileItIsRefitted) {
  TscClock clock;
  clock.Start();
  EXPECT_FALSE(clock.uses_tsc());
  uint64_t a = MonotonicNs();
  uint64_t now = clock.Now();
  EXPECT_GE(now, a);
  EXPECT_LE(now, MonotonicNs());
  clock.Refit();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  clock.Refit();
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    while (!stop.load()) {
      clock.Refit();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  constexpr uint64_t kSlackNs = 20'000;
  std::vector<std::thread> readers;
  std::atomic<int> outside{0}, back{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      uint64_t last = 0;
      for (int i = 0; i < 200'000; ++i) {
        const uint64_t before = MonotonicNs();
        const uint64_t t = clock.Now();
        const uint64_t after = MonotonicNs();
        if (t + kSlackNs < before || t > after + kSlackNs) outside.fetch_add(1);
        if (t < last) back.fetch_add(1);
        last = t;
      }
    });
  }
  for (std::thread& t : readers) t.join();
  // Someone else's TSC read, taken a millisecond before it is mapped (torch's is taken a
  // moment before the hook): it maps to when it was taken, not to when it is mapped.
  int from_tsc_outside = 0;
#if defined(__x86_64__)
  if (clock.uses_tsc()) {
    for (int i = 0; i < 20; ++i) {
      const uint64_t before = MonotonicNs();
      const uint64_t tsc = __rdtsc();
      const uint64_t after = MonotonicNs();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      bool mapped = false;
      const uint64_t t = clock.TimeOf(tsc, &mapped);
      ASSERT_TRUE(mapped);
      if (t + kSlackNs < before || t > after + kSlackNs) ++from_tsc_outside;
    }
  }
#endif
  stop.store(true);
  sender.join();
  EXPECT_EQ(outside.load(), 0);
  EXPECT_EQ(back.load(), 0);
  EXPECT_EQ(from_tsc_outside, 0);

  setenv("CUMEMTRACE_TSC", "0", 1);
  TscClock off;
  off.Start();
  off.Refit();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  off.Refit();
  unsetenv("CUMEMTRACE_TSC");
  EXPECT_FALSE(off.uses_tsc());
  a = MonotonicNs();
  now = off.Now();
  EXPECT_GE(now, a);
  EXPECT_LE(now, MonotonicNs());
  // Without a map a TSC value means nothing to it: the event takes the clock's time instead.
  bool mapped = true;
  a = MonotonicNs();
  now = off.TimeOf(12345, &mapped);
  EXPECT_FALSE(mapped);
  EXPECT_GE(now, a);
  EXPECT_LE(now, MonotonicNs());
}

}  // namespace
}  // namespace cumemtrace::tracer
