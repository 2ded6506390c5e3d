// NVTX ranges from several threads at a paced rate, to find the highest sustained rate the
// tracer keeps whole (burst_rate.sh runs it under `cumemtrace run` and reads the summary).
// It knows nothing about cumemtrace.
//
//   burst_rate [--threads=T] [--rate=R] [--duration-ms=D] [--ranges=N]
//
// T threads (default 4) push and pop "burst" ranges: a range is two records (push, pop).
// With --rate, R records per second in all (R / T per thread), paced against the clock in
// 1 ms steps (each thread sleeps until its next step and then makes what the clock says it
// owes), for D ms (default 2000). Without --rate (or 0), N ranges per thread (default
// 250,000) as fast as it can.
// stdout: "burst_rate: R ranges from T threads in S s (X records/s offered)".
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntil(uint64_t ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

// One range: two records.
inline void Range() {
  nvtxRangePushA("burst");
  nvtxRangePop();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 4;
  double rate = 0;
  long duration_ms = 2000;
  long ranges = 250'000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* prefix) -> const char* {
      const size_t n = strlen(prefix);
      return arg.compare(0, n, prefix) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--threads=")) {
      threads = atoi(v);
    } else if (const char* v1 = value("--rate=")) {
      rate = atof(v1);
    } else if (const char* v2 = value("--duration-ms=")) {
      duration_ms = atol(v2);
    } else if (const char* v3 = value("--ranges=")) {
      ranges = atol(v3);
    } else {
      fprintf(stderr, "burst_rate: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || duration_ms < 1 || ranges < 0 || rate < 0) {
    fprintf(stderr, "burst_rate: bad arguments\n");
    return 2;
  }
  // The first NVTX call initializes NVTX (and the tracer) before the clock starts.
  nvtxMarkA("start");
  std::atomic<uint64_t> made{0};
  std::vector<std::thread> workers;
  const uint64_t start = NowNs();
  const uint64_t end = start + static_cast<uint64_t>(duration_ms) * 1'000'000u;
  // Ranges per nanosecond per thread.
  const double per_ns = rate / 2 / threads / 1e9;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      uint64_t done = 0;
      if (rate == 0) {
        for (; done < static_cast<uint64_t>(ranges); ++done) Range();
      } else {
        for (uint64_t step = start;; step += 1'000'000) {
          const uint64_t now = std::min(NowNs(), end);
          const auto owed = static_cast<uint64_t>(static_cast<double>(now - start) * per_ns);
          for (; done < owed; ++done) Range();
          if (now >= end) break;
          if (step + 1'000'000 > NowNs()) SleepUntil(step + 1'000'000);
        }
      }
      made += done;
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds = static_cast<double>(NowNs() - start) / 1e9;
  printf("burst_rate: %llu ranges from %d threads in %.3f s (%.0f records/s offered)\n",
         static_cast<unsigned long long>(made.load()), threads, seconds,
         2.0 * static_cast<double>(made.load()) / seconds);
  return 0;
}
