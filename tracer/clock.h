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

}  // namespace cumemtrace::tracer
