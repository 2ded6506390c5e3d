// CUDA program for the GPU reliability cases (gpu_reliability.py). It knows nothing about
// cumemtrace.
//
//   cuda_faults oom STATS.json
//       "load": two 256 MiB buffers; "grow": 1 GiB buffers until cudaMalloc fails; then it
//       prints the error and exits 3 (the death an OOM causes in a training script).
//   cuda_faults die SIGNAL STATS.json [MS]
//       "steady": one 1 MiB cudaMalloc per millisecond for MS ms (default 2000), each kept;
//       writes the CLOCK_MONOTONIC time of every allocation to STATS.json, then raises
//       SIGNAL (KILL, SEGV or ABRT), or with EXIT leaves at once through _exit(0) (no exit
//       handlers, as Python multiprocessing workers leave).
//   cuda_faults steady STATS.json [MS]
//       the same work, then exit 0 (for the collector-killed case).
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

unsigned long long NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void WriteStats(const char* path, const std::string& json) {
  FILE* f = fopen(path, "w");
  if (f == nullptr) exit(90);
  fputs(json.c_str(), f);
  fflush(f);
  fsync(fileno(f));
  fclose(f);
}

int Oom(const char* stats) {
  void* p = nullptr;
  nvtxRangePushA("load");
  std::vector<void*> kept;
  for (int i = 0; i < 2; ++i) {
    if (cudaMalloc(&p, 256u << 20) != cudaSuccess) return 91;
    kept.push_back(p);
  }
  nvtxRangePop();
  nvtxRangePushA("grow");
  const size_t chunk = 1ull << 30;
  size_t grown = 0;
  cudaError_t error = cudaSuccess;
  for (;;) {
    error = cudaMalloc(&p, chunk);
    if (error != cudaSuccess) break;
    kept.push_back(p);
    grown += chunk;
  }
  nvtxRangePop();
  WriteStats(stats, "{\"load_bytes\": " + std::to_string(512ull << 20) +
                        ", \"grow_bytes\": " + std::to_string(grown) +
                        ", \"failed_request_bytes\": " + std::to_string(chunk) + "}\n");
  fprintf(stderr, "cuda_faults: out of memory: %s\n", cudaGetErrorString(error));
  return 3;
}

int Steady(const char* stats, long ms, int signal_number) {
  std::vector<void*> kept;
  std::string times;
  nvtxRangePushA("steady");
  const unsigned long long end = NowNs() + static_cast<unsigned long long>(ms) * 1000000ull;
  while (NowNs() < end) {
    void* p = nullptr;
    if (cudaMalloc(&p, 1u << 20) != cudaSuccess) return 92;
    kept.push_back(p);
    times += (times.empty() ? "" : ", ") + std::to_string(NowNs());
    usleep(1000);
  }
  nvtxRangePop();
  WriteStats(stats, "{\"allocation_bytes\": 1048576, \"allocation_times_ns\": [" + times +
                        "], \"death_ns\": " + std::to_string(NowNs()) + "}\n");
  printf("cuda_faults: %zu allocations\n", kept.size());
  fflush(stdout);
  if (signal_number == -1) _exit(0);
  if (signal_number != 0) raise(signal_number);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[1], "oom") == 0) return Oom(argv[2]);
  if (argc >= 3 && strcmp(argv[1], "steady") == 0) {
    return Steady(argv[2], argc > 3 ? atol(argv[3]) : 2000, 0);
  }
  if (argc >= 4 && strcmp(argv[1], "die") == 0) {
    const int sig = strcmp(argv[2], "KILL") == 0   ? SIGKILL
                    : strcmp(argv[2], "SEGV") == 0 ? SIGSEGV
                    : strcmp(argv[2], "EXIT") == 0 ? -1
                                                   : SIGABRT;
    return Steady(argv[3], argc > 4 ? atol(argv[4]) : 2000, sig);
  }
  fprintf(stderr, "usage: cuda_faults oom STATS | die KILL|SEGV|ABRT|EXIT STATS [MS] | steady STATS [MS]\n");
  return 2;
}
