// Writes a synthetic training program's trace (synthetic_trace.h) of a chosen number of
// events, streaming to disk in bounded memory: for measuring `cumemtrace report` on traces
// far larger than the ones a test can keep in memory.
//
//   make_big_trace [--events N] [--layers L] OUT.cmtrace
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "benchmarks/synthetic_trace.h"

namespace {

int Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--events N] [--layers L] OUT.cmtrace\n", argv0);
  return 2;
}

bool ParseCount(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value == 0) return false;
  *out = value;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  cumemtrace::bench::SyntheticTraceOptions options;
  const char* out_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    uint64_t value = 0;
    if ((arg == "--events" || arg == "--layers") && i + 1 < argc) {
      if (!ParseCount(argv[++i], &value)) return Usage(argv[0]);
      if (arg == "--events") {
        options.events = value;
      } else {
        options.layers = static_cast<uint32_t>(value);
      }
    } else if (out_path == nullptr && !arg.empty() && arg[0] != '-') {
      out_path = argv[i];
    } else {
      return Usage(argv[0]);
    }
  }
  if (out_path == nullptr) return Usage(argv[0]);

  FILE* out = std::fopen(out_path, "wbx");  // never overwrite, as the collector does
  if (out == nullptr) {
    std::fprintf(stderr, "make_big_trace: cannot create %s: %s\n", out_path, std::strerror(errno));
    return 1;
  }
  bool write_failed = false;
  const cumemtrace::bench::SyntheticTraceStats stats =
      cumemtrace::bench::WriteSyntheticTrace(options, [&](std::string_view piece) {
        if (!write_failed && std::fwrite(piece.data(), 1, piece.size(), out) != piece.size()) {
          write_failed = true;
        }
      });
  if (std::fclose(out) != 0 || write_failed) {
    std::fprintf(stderr, "make_big_trace: writing %s failed: %s\n", out_path, std::strerror(errno));
    return 1;
  }
  std::printf("%s: %llu events, %llu bytes, %llu iterations, %llu allocations\n", out_path,
              static_cast<unsigned long long>(stats.events),
              static_cast<unsigned long long>(stats.bytes),
              static_cast<unsigned long long>(stats.iterations),
              static_cast<unsigned long long>(stats.allocations));
  return 0;
}
