#include "tracer/tsc_clock.h"

#include <gtest/gtest.h>
#include <stdlib.h>

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

// Within the rounding of whole nanoseconds at the pairs.
TEST(TscLine, NeedsTwoPairsAMillisecondApart) {
  const Machine m;
  TscLine line;
  TscMap map;
  EXPECT_FALSE(line.Fit(1'000'000, static_cast<uint64_t>(m.Monotonic(1'000'000)), &map));
  const uint64_t half_ms = 1'000'000 + 1'400'000;  // 0.5 ms later
  EXPECT_FALSE(line.Fit(half_ms, static_cast<uint64_t>(m.Monotonic(half_ms)), &map));
  const uint64_t later = 1'000'000 + 28'000'000;  // 10 ms
  ASSERT_TRUE(line.Fit(later, static_cast<uint64_t>(m.Monotonic(later)), &map));
  for (uint64_t t = later; t < later + 28'000'000; t += 1'234'567) {
    EXPECT_NEAR(static_cast<double>(map.ToMonotonic(t)), m.Monotonic(t), 3.0) << t;
  }
  // Taken a little before the base, as an unordered read may be.
  EXPECT_NEAR(static_cast<double>(map.ToMonotonic(later - 100)), m.Monotonic(later - 100), 3.0);
}

// Pairs every 9-11 ms with up to 20 ns of error each; after 2 s the kernel's clock runs 40 ppm
// faster. Each new map starts where the last one stands, so times taken in order never go
// back, and the map stays within half a microsecond of the kernel's clock throughout.
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
    const TscMap before = map;
    if (line.Fit(tsc, ns, &map)) {
      if (have_map) {
        EXPECT_NEAR(static_cast<double>(map.ToMonotonic(tsc)),
                    static_cast<double>(before.ToMonotonic(tsc)), 1.0)
            << "not continuous at fit " << fit;
      }
      have_map = true;
    }
    const uint64_t interval = 28'000'000 + static_cast<uint64_t>((fit * 7919) % 5'600'000) -
                              2'800'000;  // 9-11 ms
    for (uint64_t t = tsc; have_map && t < tsc + interval; t += interval / 16) {
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

// A stopped sender, or a kernel clock set apart from the TSC by over a millisecond: the map
// starts again from the pair rather than slew for seconds.
TEST(TscLine, StartsAgainFromThePairAfterAJump) {
  const Machine m;
  TscLine line;
  TscMap map;
  line.Fit(0, static_cast<uint64_t>(m.Monotonic(0)), &map);
  ASSERT_TRUE(line.Fit(28'000'000, static_cast<uint64_t>(m.Monotonic(28'000'000)), &map));
  const uint64_t t = 56'000'000;
  const uint64_t jumped = static_cast<uint64_t>(m.Monotonic(t)) + 3'000'000;
  ASSERT_TRUE(line.Fit(t, jumped, &map));
  EXPECT_EQ(map.ToMonotonic(t), jumped);
  // A small error is slewed, not jumped to.
  const uint64_t u = 84'000'000;
  const TscMap before = map;
  ASSERT_TRUE(line.Fit(u, before.ToMonotonic(u) + 500, &map));
  EXPECT_EQ(map.ToMonotonic(u), before.ToMonotonic(u));
  EXPECT_GT(map.mult, before.mult);
  // A TSC that went back (another machine's, after a restore) starts from scratch.
  EXPECT_FALSE(line.Fit(10, 1'000, &map));
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
  stop.store(true);
  sender.join();
  EXPECT_EQ(outside.load(), 0);
  EXPECT_EQ(back.load(), 0);

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
}

}  // namespace
}  // namespace cumemtrace::tracer
