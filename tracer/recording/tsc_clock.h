// CLOCK_MONOTONIC for the PyTorch bridge's hook, which reads the time once per tensor event.
// The vDSO's clock_gettime orders its TSC read behind every load in flight (lfence; rdtsc):
// in PyTorch programs it cost 60-80 ns per event, a third of the hook. Where the kernel keeps
// time with the TSC itself (its clocksource is "tsc": invariant, and the same on every CPU),
// the hook reads the TSC unordered and maps it with a line that the sender thread fits again
// at each drain (TscLine). Elsewhere, and until the line exists, it is clock_gettime.
#pragma once

#include <atomic>
#include <cstdint>

#include "proto/cumemtrace/v1/thread_buffers.h"
#include "tracer/recording/clock.h"

namespace cumemtrace::tracer {

// The products below need 128 bits (GCC and Clang; `__extension__` keeps -Wpedantic quiet).
__extension__ typedef __int128 Int128;

// TSC -> CLOCK_MONOTONIC: from base_tsc, `slew_mult` ns per tick (times 2^32) until
// slew_end_tsc, then the run's rate `mult`. Continuous and increasing.
struct TscMap {
  uint64_t base_tsc = 0;
  uint64_t base_ns = 0;
  uint64_t slew_end_tsc = 0;
  uint64_t slew_mult = 0;
  uint64_t mult = 0;
  // The collector maps what it recovers after a crash by the same function.
  v1::thread_buffers::ClockMap Written() const {
    return {base_tsc, base_ns, slew_end_tsc, slew_mult, mult};
  }
  uint64_t ToMonotonic(uint64_t tsc) const {
    return v1::thread_buffers::ToMonotonic(Written(), tsc);
  }
};

// Fits the map to (TSC, CLOCK_MONOTONIC) pairs, one per drain. The rate is the one over
// everything since the first pair. Each new map starts where the last one stands at its
// anchor (the moment it replaces it), so a thread's times never step back; the last map's
// error at the pair is slewed out over one interval, at most 500 ppm (as the kernel slews
// its own clock), then the rate is the run's again, so a sender that stalls adds no error of
// its own. An error over 1 ms, or a TSC that went back, means the TSC no longer follows the
// kernel's clock (a suspended machine, a paused VM): the map is dropped, to be made again
// from new pairs, and times come from clock_gettime meanwhile.
class TscLine {
 public:
  // A pair, and the TSC at which the new map takes over (at or after the pair's). Returns
  // whether *map is valid, refitted; the first needs two pairs 1 ms apart.
  bool Fit(uint64_t tsc, uint64_t monotonic_ns, uint64_t anchor_tsc, TscMap* map);

 private:
  void Restart(uint64_t tsc, uint64_t monotonic_ns);

  uint64_t first_tsc_ = 0, first_ns_ = 0, last_tsc_ = 0;
  bool have_first_ = false, have_map_ = false;
};

class TscClock {
 public:
  // Reads the TSC only where the kernel's clocksource is the TSC, on x86-64, unless
  // CUMEMTRACE_TSC=0. Until the second Refit, Now() is clock_gettime.
  void Start();
  // The sender thread, at each drain: a fresh pair for the line.
  void Refit();
  uint64_t Now() const;
  // An event's time: `tsc`, a TSC value read a moment ago by someone else (PyTorch reads it
  // for each allocator event), mapped as Now() maps its own read, where it is given (not 0)
  // and there is a map; else Now(). The hook saves its TSC read. *from_tsc says which.
  uint64_t TimeOf(uint64_t tsc, bool* from_tsc) const;
  // A map is published (a zero rate is none).
  bool uses_tsc() const { return mult_.load(std::memory_order_relaxed) != 0; }
  // The map published last, for a thread that converts TSC reads others made (the sender,
  // for the per-thread buffers): false when there is none.
  bool CurrentMap(TscMap* map) const { return Load(map); }

 private:
  void Publish(const TscMap& map);
  // The map published last; false when there is none (or a writer is stuck halfway).
  bool Load(TscMap* map) const;

  bool started_ = false;  // the sender's
  TscLine line_;          // the sender's
  TscMap map_;            // the sender's: the map last published
  // The map, behind a sequence lock: written every drain, read on every event.
  std::atomic<uint32_t> sequence_{0};
  std::atomic<uint64_t> base_tsc_{0}, base_ns_{0}, slew_end_tsc_{0}, slew_mult_{0}, mult_{0};
};

}  // namespace cumemtrace::tracer
