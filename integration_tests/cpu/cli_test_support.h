// What the end-to-end tests of the `cumemtrace` executable share: spawning it (and the fake
// tracer) with a controlled environment, reading what it wrote back through the engine's
// TraceFileReader, and reading a child's log line by line. The including target defines
// CUMEMTRACE_BIN, FAKE_TRACER_BIN and PRELOAD_STUB_LIB.
#pragma once

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "collector/format/trace_file.h"
#include "cumemtrace/v1/trace.pb.h"
#include "integration_tests/cpu/child_process.h"

extern char** environ;

namespace cumemtrace {

const std::string kCli = CUMEMTRACE_BIN;
const std::string kFake = FAKE_TRACER_BIN;
const std::string kStub = PRELOAD_STUB_LIB;

using EnvOverrides = std::vector<std::pair<std::string, std::optional<std::string>>>;

// The environment every spawned cumemtrace gets: ours, with the preload stub as "tracer" and
// nothing inherited that would change what the tests check.
inline std::vector<std::string> ChildEnv(const EnvOverrides& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const char* name : {"CUMEMTRACE_SOCKET", "LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF",
                           "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "CUMEMTRACE_KERNELS",
                           "CUMEMTRACE_QUIET", "CUMEMTRACE_MODULES", "CUMEMTRACE_OPS"}) {
    env.erase(name);
  }
  env["CUMEMTRACE_TRACER_LIB"] = kStub;
  for (const auto& [name, value] : overrides) {
    if (value.has_value()) {
      env[name] = *value;
    } else {
      env.erase(name);
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

using testing::Child;

// `inherit_fd`, when given, becomes descriptor 3 of the child.
inline Child Spawn(const std::vector<std::string>& args, const std::string& cwd,
            const EnvOverrides& overrides, int inherit_fd = -1) {
  std::vector<std::pair<int, int>> fds;
  if (inherit_fd >= 0) fds.emplace_back(inherit_fd, 3);
  return testing::SpawnChild(args, ChildEnv(overrides), cwd, fds);
}

struct Result {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
};

// Reads both pipes to EOF, then reaps the child.
inline Result Finish(const Child& child) {
  testing::ChildExit exit = testing::WaitChild(child);
  return Result{exit.code(), std::move(exit.out), std::move(exit.err)};
}

inline Result RunCli(const std::vector<std::string>& args, const std::string& cwd = "",
              const EnvOverrides& overrides = {}) {
  std::vector<std::string> full = {kCli};
  full.insert(full.end(), args.begin(), args.end());
  return Finish(Spawn(full, cwd, overrides));
}

// What a trace file holds, per stream.
struct TraceContents {
  TraceFileReader::Result end = TraceFileReader::Result::kError;
  std::string error;
  bool has_file_header = false;
  std::map<uint32_t, v1::StreamOpened> opened;
  std::map<uint32_t, v1::Handshake> handshakes;
  std::map<uint32_t, int> batches;
  std::map<uint32_t, int> events;
  std::map<uint32_t, v1::StreamClosed> closed;
  std::vector<std::pair<uint32_t, v1::LauncherExit>> launcher_exits;
  std::vector<v1::TorchAllocatorEvent> torch_events;  // every stream's, in file order
  std::vector<uint64_t> torch_event_times;            // their Event.timestamp_ns
};

inline TraceContents ReadTrace(const std::string& path) {
  TraceContents t;
  TraceFileReader reader;
  if (!reader.Open(path)) {
    t.error = reader.error();
    return t;
  }
  v1::TraceChunk chunk;
  for (;;) {
    const TraceFileReader::Result r = reader.Next(&chunk);
    if (r != TraceFileReader::Result::kChunk) {
      t.end = r;
      t.error = reader.error();
      return t;
    }
    const uint32_t id = chunk.stream_id();
    if (chunk.has_file_header()) t.has_file_header = true;
    if (chunk.has_collector()) {
      const v1::CollectorRecord& record = chunk.collector();
      if (record.has_opened()) t.opened[id] = record.opened();
      if (record.has_closed()) t.closed[id] = record.closed();
      if (record.has_launcher_exit()) t.launcher_exits.emplace_back(id, record.launcher_exit());
    }
    if (chunk.content_case() == v1::TraceChunk::kWireFrame) {
      v1::StreamMessage message;
      EXPECT_TRUE(message.ParseFromString(chunk.wire_frame()));
      if (message.has_handshake()) t.handshakes[id] = message.handshake();
      if (message.has_batch()) {
        ++t.batches[id];
        t.events[id] += message.batch().events_size();
        for (const v1::Event& event : message.batch().events()) {
          if (!event.has_torch_allocator()) continue;
          t.torch_events.push_back(event.torch_allocator());
          t.torch_event_times.push_back(event.timestamp_ns());
        }
      }
    }
  }
}

using testing::ReadFile;

inline unsigned FileMode(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  std::optional<std::string> Next(int timeout_ms = 10000) {
    for (;;) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      pollfd pfd = {fd_, POLLIN, 0};
      if (poll(&pfd, 1, timeout_ms) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace cumemtrace
