// The tracer's one time base: CLOCK_MONOTONIC nanoseconds, for host events and (through
// cuptiActivityRegisterTimestampCallback) for CUPTI's records alike.
#pragma once

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

namespace cumemtrace::tracer {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// gettid() is a real system call; cache it per thread. The generation is bumped in a forked
// child so the forking thread does not keep its parent's id.
extern uint32_t g_tid_generation;
inline uint32_t CurrentThreadId() {
  thread_local uint32_t cached_tid = 0;
  thread_local uint32_t cached_generation = 0;
  if (cached_tid == 0 || cached_generation != g_tid_generation) {
    cached_tid = static_cast<uint32_t>(syscall(SYS_gettid));
    cached_generation = g_tid_generation;
  }
  return cached_tid;
}

// CUPTI timestamps -> CLOCK_MONOTONIC. CUPTI runs on the tracer's clock (identity) or, once
// a client of the program's registered its own clock, on that one: then a linear map
// measured against it (Kineto's is the TSC).
struct CuptiClockMap {
  bool linear = false;  // false: monotonic = cupti + offset_ns
  int64_t offset_ns = 0;
  uint64_t cupti_origin = 0;
  uint64_t monotonic_origin = 0;
  double ns_per_tick = 1.0;
  uint64_t ToMonotonic(uint64_t t) const {
    if (!linear) return static_cast<uint64_t>(static_cast<int64_t>(t) + offset_ns);
    const double delta = static_cast<double>(static_cast<int64_t>(t - cupti_origin));
    return static_cast<uint64_t>(static_cast<int64_t>(monotonic_origin) +
                                 static_cast<int64_t>(delta * ns_per_tick));
  }
};

}  // namespace cumemtrace::tracer
