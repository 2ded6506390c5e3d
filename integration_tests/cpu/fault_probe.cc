// A CPU-only program with the process shapes that break tracers: many threads pushing NVTX
// ranges, fork without exec from a multi-threaded process, threads created and destroyed
// constantly, dlopen/dlclose of a library that uses NVTX, and death by signal. It knows
// nothing about cumemtrace; reliability_test runs it under the real tracer.
//
//   fault_probe [--threads=T] [--ranges=N]   T threads, N "step" ranges each (default 1, 1000)
//               [--duration-ms=D]            instead of N ranges, push ranges for D ms
//               [--ready-fd=R]               write "r" to R once the first range is pushed
//               [--go-fd=G]                  then read G to EOF before the work starts
//               [--done-fd=D]                write "d" to D when the work is done
//               [--stats-fd=S]               write "ranges=N max_range_ns=X work_ns=Y" to S
//               [--fork-children=K]          while the threads run, fork K children (no
//                                            exec); each pushes --child-ranges "child"
//                                            ranges, then exit(0)
//               [--child-ranges=M]           (default 10)
//               [--thread-churn=K]           create and join K short threads, one "churn"
//                                            range each
//               [--dlopen=PATH] [--dlopen-times=K]  dlopen PATH, call its plugin_work()
//                                            (one "plugin" range), dlclose; K times
//               [--die=kill|segv|abort|_exit]  die that way after the work (_exit: leave
//                                            without exit handlers, as multiprocessing
//                                            workers do)
//               [--child-exit=_exit]         children leave with _exit(0) instead of exit(0)
//               [--child-fill-fds]           each child, before its ranges, takes every free
//                                            descriptor (a soft limit of 64, /dev/null
//                                            opened until EMFILE), as a process at its limit
//               [--death-fd=F]               before dying, read F to EOF
//               [--exit=CODE]
//               [--hijack=file:PATH|socketpair]  after the first range, close every fd the
//                                            program did not open (as daemons and
//                                            subprocess helpers do), put its own file or
//                                            socketpair on each of those numbers, and
//                                            between the ranges write 20 lines to the file
//                                            or 20 pings through the socketpair
//               [--damage-ring=wrap|bridge|drops|magic|fill|size]  after the work, once
//                                            the tracer has sent it, damage the tracer's
//                                            shared ring as a hostile program could, then
//                                            SIGKILL itself:
//                                            wrap: a write position of 2^64-8 over padding
//                                            records that would carry a reader past 2^64;
//                                            bridge: 1000 copies of a "step" range, a
//                                            TorchBridgeState record whose torch_version is
//                                            not UTF-8, 1000 more copies; drops: a dropped
//                                            count of 2^64-1; magic: a wrong magic with a
//                                            dropped count of 5; fill: a whole ring of NVTX
//                                            pushes, each with a name of its own; size: 100
//                                            ranges to the ring's end, 50 from its start, the
//                                            26th's push with a size no record can have
// stdout: one line, "fault_probe: <ranges> ranges", identical with or without a tracer.
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "proto/cumemtrace/v1/shared_ring.h"

namespace {

struct Options {
  int threads = 1;
  long ranges = 1000;
  long duration_ms = 0;
  int ready_fd = -1;
  int go_fd = -1;
  int done_fd = -1;
  int stats_fd = -1;
  int fork_children = 0;
  long child_ranges = 10;
  int thread_churn = 0;
  std::string dlopen_path;
  int dlopen_times = 1;
  std::string die;
  int death_fd = -1;
  int exit_code = 0;
  std::string hijack;
  bool child_quick_exit = false;
  bool child_fill_fds = false;
  std::string damage_ring;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void WriteAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) _exit(98);
    done += static_cast<size_t>(n);
  }
}

void ReadToEof(int fd) {
  char buffer[64];
  while (read(fd, buffer, sizeof(buffer)) > 0) {
  }
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* prefix) -> const char* {
      const size_t n = strlen(prefix);
      return arg.compare(0, n, prefix) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--threads=")) o.threads = atoi(v);
    else if (const char* v1 = value("--ranges=")) o.ranges = atol(v1);
    else if (const char* v2 = value("--ready-fd=")) o.ready_fd = atoi(v2);
    else if (const char* v3 = value("--go-fd=")) o.go_fd = atoi(v3);
    else if (const char* v4 = value("--done-fd=")) o.done_fd = atoi(v4);
    else if (const char* v5 = value("--stats-fd=")) o.stats_fd = atoi(v5);
    else if (const char* v6 = value("--fork-children=")) o.fork_children = atoi(v6);
    else if (const char* v7 = value("--child-ranges=")) o.child_ranges = atol(v7);
    else if (const char* v8 = value("--thread-churn=")) o.thread_churn = atoi(v8);
    else if (const char* v9 = value("--dlopen=")) o.dlopen_path = v9;
    else if (const char* v10 = value("--dlopen-times=")) o.dlopen_times = atoi(v10);
    else if (const char* v11 = value("--die=")) o.die = v11;
    else if (const char* v12 = value("--exit=")) o.exit_code = atoi(v12);
    else if (const char* v13 = value("--death-fd=")) o.death_fd = atoi(v13);
    else if (const char* v14 = value("--duration-ms=")) o.duration_ms = atol(v14);
    else if (const char* v15 = value("--hijack=")) o.hijack = v15;
    else if (const char* v16 = value("--child-exit="))
      o.child_quick_exit = strcmp(v16, "_exit") == 0;
    else if (arg == "--child-fill-fds") o.child_fill_fds = true;
    else if (const char* v17 = value("--damage-ring=")) o.damage_ring = v17;
    else {
      fprintf(stderr, "fault_probe: unknown argument %s\n", argv[i]);
      exit(2);
    }
  }
  return o;
}

// Descriptors >= 3 this program did not open itself (not named by an option).
std::vector<int> ForeignFds(const Options& o) {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own_dir = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    const int fd = atoi(entry->d_name);
    if (entry->d_name[0] == '.' || fd < 3 || fd == own_dir) continue;
    if (fd == o.ready_fd || fd == o.go_fd || fd == o.done_fd || fd == o.stats_fd ||
        fd == o.death_fd) {
      continue;
    }
    fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

// What a daemon or a subprocess helper does: close what it did not open, then open its own
// file or socketpair, which lands on the numbers just freed. Returns the program's fd for
// lines (file) or its two socket ends (socketpair) in *ends.
bool Hijack(const Options& o, int ends[2]) {
  const std::vector<int> foreign = ForeignFds(o);
  for (int fd : foreign) close(fd);
  if (o.hijack.rfind("file:", 0) == 0) {
    ends[0] = open(o.hijack.c_str() + 5, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    ends[1] = -1;
  } else if (o.hijack == "socketpair") {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ends) != 0) return false;
  } else {
    return false;
  }
  if (ends[0] < 0) return false;
  for (int fd : foreign) {
    if (fd != ends[0] && fd != ends[1]) dup2(ends[0], fd);
  }
  return true;
}

// One line into the file, or one ping through the socketpair read back intact.
bool UseHijackedFd(const int ends[2], int i) {
  const std::string line = "line " + std::to_string(i) + "\n";
  if (write(ends[0], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return false;
  }
  if (ends[1] < 0) return true;
  std::string echo;
  while (echo.size() < line.size()) {
    pollfd p{ends[1], POLLIN, 0};
    char buffer[256];
    if (poll(&p, 1, 5000) != 1) return false;
    const ssize_t n = read(ends[1], buffer, std::min(sizeof(buffer), line.size() - echo.size()));
    if (n <= 0) return false;
    echo.append(buffer, static_cast<size_t>(n));
  }
  return echo == line;
}

namespace ring = cumemtrace::v1::ring;

// The tracer's shared ring as this process maps it (the tracer maps it writable), or null.
unsigned char* FindOwnRing() {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == nullptr) return nullptr;
  char line[512];
  unsigned char* found = nullptr;
  while (found == nullptr && fgets(line, sizeof(line), maps) != nullptr) {
    if (strstr(line, "/memfd:cumemtrace-ring") == nullptr) continue;
    unsigned long start = 0;
    unsigned long end = 0;
    if (sscanf(line, "%lx-%lx", &start, &end) == 2 && end - start > ring::kHeaderBytes) {
      found = reinterpret_cast<unsigned char*>(start);
    }
  }
  fclose(maps);
  return found;
}

uint64_t LoadU64(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreU64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// Damages the ring as --damage-ring says, then dies by SIGKILL. Returns only on failure
// (an exit code).
int DamageRingAndDie(const std::string& how) {
  unsigned char* base = FindOwnRing();
  if (base == nullptr) return 89;
  auto* header = reinterpret_cast<ring::Header*>(base);
  unsigned char* data = base + ring::kHeaderBytes;
  const uint64_t capacity = header->capacity;
  // Everything recorded so far reaches the collector on the socket first: the tracer frees
  // a record's space only once its frame is in the kernel's hands.
  for (int i = 0; i < 5000; ++i) {
    if (LoadU64(&header->freed_position) == LoadU64(&header->write_position)) break;
    usleep(1000);
  }
  const uint64_t write = LoadU64(&header->write_position);
  if (LoadU64(&header->freed_position) != write) return 88;
  // Whole "step" ranges as the tracer wrote them: its push and pop records, to copy.
  const unsigned char* push = nullptr;
  const unsigned char* pop = nullptr;
  for (uint64_t at = 0; at < write && at < capacity && (push == nullptr || pop == nullptr);) {
    ring::Record r;
    memcpy(&r, data + at, sizeof(r));
    if (r.size < 8) return 87;
    if (r.type == ring::kNvtx && push != nullptr && r.text_bytes == 0) pop = data + at;
    if (r.type == ring::kNvtx && r.text_bytes == 4 &&
        memcmp(data + at + sizeof(r), "step", 4) == 0) {
      push = data + at;
    }
    at += r.size;
  }
  if (push == nullptr || pop == nullptr) return 86;
  uint32_t push_size = 0;
  uint32_t pop_size = 0;
  memcpy(&push_size, push, 4);
  memcpy(&pop_size, pop, 4);
  // Copied out first: the copies may be written where these are.
  const std::string range_bytes = std::string(reinterpret_cast<const char*>(push), push_size) +
                                  std::string(reinterpret_cast<const char*>(pop), pop_size);
  const uint64_t range = range_bytes.size();
  unsigned char* out = data + write % capacity;
  auto append = [&](const void* bytes, uint64_t size) {
    memcpy(out, bytes, size);
    out += size;
  };
  auto append_range = [&] { append(range_bytes.data(), range); };
  if (how == "wrap") {
    // Recovery starts a ring's length before the write position: at an 8-byte padding
    // record at the data's end, then one as long as the ring at its start.
    auto* tail = reinterpret_cast<ring::Record*>(data + capacity - 8);
    tail->size = 8;
    tail->type = ring::kPadding;
    auto* head = reinterpret_cast<ring::Record*>(data);
    head->size = static_cast<uint32_t>(capacity);
    head->type = ring::kPadding;
    StoreU64(&header->write_position, ~uint64_t{0} - 7);
  } else if (how == "bridge") {
    // attached = true, torch_version = "\xc3\x28" (not UTF-8).
    const unsigned char state[] = {0x08, 0x01, 0x12, 0x02, 0xc3, 0x28};
    ring::Record bridge{};
    bridge.size = static_cast<uint32_t>((sizeof(bridge) + sizeof(state) + 7) / 8 * 8);
    bridge.type = ring::kTorchBridgeState;
    bridge.payload_bytes = sizeof(state);
    const uint64_t need = 2000 * range + bridge.size;
    if (write % capacity + need > capacity) return 85;
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < 1000; ++i) append_range();
      if (half == 0) {
        unsigned char* at = out;
        append(&bridge, sizeof(bridge));
        memcpy(at + sizeof(bridge), state, sizeof(state));
        out = at + bridge.size;
      }
    }
    StoreU64(&header->write_position, write + need);
  } else if (how == "size") {
    // 100 ranges up to the data's end (padding after them), then 50 from its start, the
    // next lap; the push of the 26th has a size no record can have.
    const uint64_t start = write % capacity;
    if (capacity - start < 100 * range + 8 || start < 50 * range) return 85;
    for (int i = 0; i < 100; ++i) append_range();
    ring::Record pad{};
    pad.size = static_cast<uint32_t>(capacity - (start + 100 * range));
    pad.type = ring::kPadding;
    memcpy(out, &pad, std::min<uint64_t>(sizeof(pad), pad.size));
    out = data;
    for (int i = 0; i < 50; ++i) append_range();
    const uint32_t bad = 13;
    memcpy(data + start + 25 * range, &bad, sizeof(bad));
    StoreU64(&header->write_position, write + (capacity - start) + 50 * range);
  } else if (how == "drops") {
    StoreU64(&header->dropped_total, ~uint64_t{0});
  } else if (how == "magic") {
    header->magic = ring::kMagic ^ 1;
    StoreU64(&header->dropped_total, 5);
  } else if (how == "fill") {
    // A whole lap of NVTX pushes, each with a name of its own: the most a ring can make
    // the collector decode and intern.
    ring::Record r{};
    r.size = static_cast<uint32_t>(sizeof(r) + 8);
    r.type = ring::kNvtx;
    r.nvtx_operation = 1;
    r.text_bytes = 8;
    const uint64_t start = write % capacity;
    uint64_t made = 0;
    for (const auto& [from, to] : {std::pair<uint64_t, uint64_t>{start, capacity}, {0, start}}) {
      uint64_t at = from;
      for (; at + r.size <= to; at += r.size) {
        char name[32];
        snprintf(name, sizeof(name), "r%07llu", static_cast<unsigned long long>(made++ % 10000000));
        r.timestamp_ns = made;
        memcpy(data + at, &r, sizeof(r));
        memcpy(data + at + sizeof(r), name, 8);
      }
      if (at < to) {
        ring::Record pad{};
        pad.size = static_cast<uint32_t>(to - at);
        pad.type = ring::kPadding;
        memcpy(data + at, &pad, std::min<uint64_t>(sizeof(pad), to - at));
      }
    }
    StoreU64(&header->write_position, write + capacity);
  } else {
    return 84;
  }
  raise(SIGKILL);
  return 83;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  nvtxRangePushA("startup");
  nvtxRangePop();
  if (o.ready_fd >= 0) {
    WriteAll(o.ready_fd, "r");
    close(o.ready_fd);
  }
  if (o.go_fd >= 0) ReadToEof(o.go_fd);
  if (!o.hijack.empty()) {
    int ends[2] = {-1, -1};
    if (!Hijack(o, ends)) return 93;
    int failures = 0;
    for (int i = 0; i < 20; ++i) {
      for (long r = 0; r < o.ranges; ++r) {
        nvtxRangePushA("step");
        nvtxRangePop();
      }
      usleep(20000);  // time for a tracer to send what the ranges queued
      if (!UseHijackedFd(ends, i)) ++failures;
    }
    printf("fault_probe: %d of 20 uses of its own fd failed\n", failures);
    return failures == 0 ? o.exit_code : 92;
  }

  const uint64_t work_start = NowNs();
  const uint64_t deadline = work_start + static_cast<uint64_t>(o.duration_ms) * 1000000;
  std::atomic<uint64_t> max_range_ns{0};
  std::atomic<long> ranges_done{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < o.threads; ++t) {
    workers.emplace_back([&] {
      uint64_t worst = 0;
      long done = 0;
      for (; o.duration_ms > 0 ? NowNs() < deadline : done < o.ranges; ++done) {
        const uint64_t before = NowNs();
        nvtxRangePushA("step");
        nvtxRangePop();
        worst = std::max(worst, NowNs() - before);
      }
      ranges_done += done;
      uint64_t seen = max_range_ns.load();
      while (worst > seen && !max_range_ns.compare_exchange_weak(seen, worst)) {
      }
    });
  }

  // Forked while the workers push ranges: whatever lock a worker holds at that instant is
  // copied into the child held.
  std::vector<pid_t> children;
  for (int c = 0; c < o.fork_children; ++c) {
    const pid_t pid = fork();
    if (pid < 0) return 97;
    if (pid == 0) {
      if (o.child_fill_fds) {
        rlimit limit{};
        getrlimit(RLIMIT_NOFILE, &limit);
        limit.rlim_cur = std::min<rlim_t>(limit.rlim_cur, 64);
        setrlimit(RLIMIT_NOFILE, &limit);
        while (open("/dev/null", O_RDONLY) >= 0) {
        }
        if (errno != EMFILE) _exit(90);
      }
      for (long i = 0; i < o.child_ranges; ++i) {
        nvtxRangePushA("child");
        nvtxRangePop();
      }
      if (o.child_quick_exit) _exit(0);
      exit(0);
    }
    children.push_back(pid);
  }
  for (int c = 0; c < o.thread_churn; ++c) {
    std::thread([] {
      nvtxRangePushA("churn");
      nvtxRangePop();
    }).join();
  }
  for (int k = 0; k < (o.dlopen_path.empty() ? 0 : o.dlopen_times); ++k) {
    void* plugin = dlopen(o.dlopen_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (plugin == nullptr) {
      fprintf(stderr, "fault_probe: %s\n", dlerror());
      return 96;
    }
    auto work = reinterpret_cast<void (*)()>(dlsym(plugin, "plugin_work"));
    if (work == nullptr) return 95;
    work();
    dlclose(plugin);
  }

  for (std::thread& w : workers) w.join();
  int failed_children = 0;
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed_children;
    }
  }
  const uint64_t work_ns = NowNs() - work_start;
  if (failed_children > 0) {
    fprintf(stderr, "fault_probe: %d children failed\n", failed_children);
    return 94;
  }
  if (o.stats_fd >= 0) {
    WriteAll(o.stats_fd, "ranges=" + std::to_string(ranges_done.load()) +
                             " max_range_ns=" + std::to_string(max_range_ns.load()) +
                             " work_ns=" + std::to_string(work_ns) + "\n");
    close(o.stats_fd);
  }
  printf("fault_probe: %ld ranges\n", ranges_done.load());
  fflush(stdout);
  if (o.done_fd >= 0) {
    WriteAll(o.done_fd, "d");
    close(o.done_fd);
  }
  if (o.death_fd >= 0) ReadToEof(o.death_fd);
  if (!o.damage_ring.empty()) return DamageRingAndDie(o.damage_ring);
  if (o.die == "kill") raise(SIGKILL);
  if (o.die == "segv") raise(SIGSEGV);
  if (o.die == "abort") abort();
  if (o.die == "_exit") _exit(o.exit_code);
  return o.exit_code;
}
