// The CUPTI multiplexer end to end, without a GPU: the probe (a CUDA program with its own
// CUPTI client, tracer/tests/cupti_mux_probe.cc) runs against the fake libcupti with the real
// tracer preloaded, talking to a socket this test serves. The probe checks what its client
// receives; this test checks what reaches the collector: each side exactly its own.
#include <dlfcn.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace cumemtrace {
namespace {

struct ProbeResult {
  int status = -1;
  std::string out;
  std::string err;
  std::vector<v1::StreamMessage> messages;
};

class CuptiMuxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/cmt-mux-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    for (const char* name : {"/s.sock", "/stdout", "/stderr", "/libcupti-copy.so"}) {
      unlink((dir_ + name).c_str());
    }
    rmdir(dir_.c_str());
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Runs the probe with the tracer preloaded; `injection` is CUDA_INJECTION64_PATH.
  ProbeResult Probe(const std::vector<std::string>& args, const std::string& injection,
                    const char* kernels = "1",
                    const std::vector<std::pair<std::string, std::string>>& env = {}) {
    const std::string socket_path = dir_ + "/s.sock";
    unlink(socket_path.c_str());  // a probe's earlier run in the same test
    const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path.c_str());
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("LD_PRELOAD", CUMEMTRACE_TRACER_LIB, 1);
      setenv("CUMEMTRACE_SOCKET", socket_path.c_str(), 1);
      if (kernels != nullptr) {
        setenv("CUMEMTRACE_KERNELS", kernels, 1);
      } else {
        unsetenv("CUMEMTRACE_KERNELS");
      }
      setenv("CUDA_INJECTION64_PATH", injection.c_str(), 1);
      unsetenv("NVTX_INJECTION64_PATH");
      unsetenv("CUMEMTRACE_QUIET");
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      const int out = open((dir_ + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = open((dir_ + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> argv{const_cast<char*>(CUPTI_MUX_PROBE)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(CUPTI_MUX_PROBE, argv.data());
      _exit(127);
    }
    ProbeResult run;
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 20000) > 0) {
      const int conn = accept(listener, nullptr, nullptr);
      std::string bytes;
      char buf[65536];
      for (;;) {
        pollfd q{conn, POLLIN, 0};
        if (poll(&q, 1, 20000) <= 0) break;
        const ssize_t n = read(conn, buf, sizeof(buf));
        if (n <= 0) break;
        bytes.append(buf, static_cast<size_t>(n));
      }
      close(conn);
      google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
      uint32_t size = 0;
      while (in.ReadVarint32(&size)) {
        std::string body;
        if (!in.ReadString(&body, static_cast<int>(size))) break;
        v1::StreamMessage message;
        EXPECT_TRUE(message.ParseFromString(body));
        run.messages.push_back(std::move(message));
      }
    }
    close(listener);
    waitpid(pid, &run.status, 0);
    run.out = Slurp(dir_ + "/stdout");
    run.err = Slurp(dir_ + "/stderr");
    return run;
  }

  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  // The ids the probe printed on its line "LABEL id id ...", in order (empty without one).
  static std::vector<uint32_t> IdsAfter(const std::string& out, const std::string& label) {
    std::vector<uint32_t> ids;
    const size_t at = out.find(label);
    if (at == std::string::npos) return ids;
    const size_t from = at + label.size();
    std::istringstream line(out.substr(from, out.find('\n', at) - from));
    for (uint32_t id; line >> id;) ids.push_back(id);
    return ids;
  }

  // How the tracer saw kernels: from CUPTI's records (both sides want CONCURRENT_KERNEL),
  // at their launch (the kind is the client's alone), or not at all (the default).
  enum class Kernels { kRecords, kLaunches, kNone };
  // The probe's client checked its side; this checks the tracer's.
  void CheckShared(const ProbeResult& run, Kernels kernels);

  std::string dir_;
};

TEST_F(CuptiMuxTest, EachSideGetsExactlyItsOwnCallbacksAndRecords) {
  CheckShared(Probe({"shared"}, CUMEMTRACE_TRACER_LIB, "1"), Kernels::kRecords);
}

TEST_F(CuptiMuxTest, KernelsAtTheirLaunchWhileTheClientHasTheKernelRecords) {
  CheckShared(Probe({"shared"}, CUMEMTRACE_TRACER_LIB, "launches"), Kernels::kLaunches);
}

TEST_F(CuptiMuxTest, ByDefaultNoLaunchIsWatchedWhileTheClientWatchesItsOwn) {
  CheckShared(Probe({"shared"}, CUMEMTRACE_TRACER_LIB, nullptr), Kernels::kNone);
}

TEST_F(CuptiMuxTest, ByDefaultLaunchesAreCountedOncePyTorchsTensorsTurnOutUnseen) {
  const ProbeResult run = Probe({"torch-unwatched", FAKE_C10_CUDA_LIB}, CUMEMTRACE_TRACER_LIB,
                                nullptr);
  ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
  EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
  EXPECT_EQ(Count(run.err, "PyTorch's tensors are not seen"), 1u) << run.err;
  EXPECT_EQ(Count(run.err, "kernels are counted at their launch from here on"), 1u) << run.err;
  const std::vector<uint32_t> counted = IdsAfter(run.out, "counted:");
  ASSERT_EQ(counted.size(), 3u) << run.out;

  ASSERT_FALSE(run.messages.empty());
  ASSERT_TRUE(run.messages[0].has_handshake());
  EXPECT_FALSE(run.messages[0].handshake().kernel_launches_enabled());  // not at the start
  std::vector<uint32_t> kernels;
  std::vector<std::string> notices;
  bool segment = false;
  for (size_t i = 1; i < run.messages.size(); ++i) {
    for (const v1::Event& event : run.messages[i].batch().events()) {
      if (event.has_kernel()) {
        EXPECT_TRUE(event.kernel().launch_only());
        kernels.push_back(event.kernel().correlation_id());
      }
      if (event.has_notice()) notices.push_back(event.notice().code());
      segment |= event.has_memory() && event.memory().address() == 0x9000000;
    }
  }
  EXPECT_TRUE(segment);
  // The launch before PyTorch's allocator appeared is not there; every one after it is.
  EXPECT_EQ(kernels, counted);
  EXPECT_NE(std::find(notices.begin(), notices.end(), "kernel_launches_counted"), notices.end());
}

// The bridge's hook through the real tracer, as in a PyTorch program: three allocator threads
// (one device each) emit 3,000 events each, and every one reaches the collector whole, each
// device's in sequence from one thread, through the ring or, with CUMEMTRACE_PER_THREAD=1,
// through the threads' own buffers (whose batches then say how far they reach).
// With `run --ops` and `--modules` (CUMEMTRACE_OPS=1, CUMEMTRACE_MODULES=1), each ALLOC also
// carries the operators the shim names and the module its thread entered, and the names
// arrive as AttributionName events.
TEST_F(CuptiMuxTest, EveryTensorEventOfABridgeReachesTheCollectorWholeEitherWay) {
  void* shim = dlopen(FAKE_TORCH_BRIDGE_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(shim, nullptr) << dlerror();
  using AttributionFn = void (*)(uint32_t, uint64_t, uint32_t*, cumemtrace_torch_event*);
  auto attribution_of =
      reinterpret_cast<AttributionFn>(dlsym(shim, "fake_torch_bridge_attribution"));
  ASSERT_NE(attribution_of, nullptr);
  using NodeFn = void (*)(uint32_t, uint64_t, cumemtrace_torch_event*);
  auto node_of = reinterpret_cast<NodeFn>(dlsym(shim, "fake_torch_bridge_node"));
  ASSERT_NE(node_of, nullptr);
  for (const auto& [per_thread, attributed] : std::vector<std::pair<bool, bool>>{
           {false, false}, {true, false}, {false, true}, {true, true}}) {
    const std::string bridge_dir = FAKE_TORCH_BRIDGE_LIB;
    const ProbeResult run =
        Probe({"torch-bridge", FAKE_TORCH_C10_CUDA_LIB, FAKE_TORCH_BRIDGE_LIB},
              CUMEMTRACE_TRACER_LIB, nullptr,
              {{"CUMEMTRACE_TORCH_BRIDGE_DIR", bridge_dir.substr(0, bridge_dir.rfind('/'))},
               {"CUMEMTRACE_PER_THREAD", per_thread ? "1" : "0"},
               {"CUMEMTRACE_OPS", attributed ? "1" : "0"},
               {"CUMEMTRACE_MODULES", attributed ? "1" : "0"}});
    ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
    EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
    EXPECT_NE(run.out.find("refused: 0"), std::string::npos) << run.out;
    ASSERT_FALSE(run.messages.empty());
    std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> by_device;  // seq, time
    std::map<uint32_t, std::set<uint32_t>> threads;
    size_t positions = 0;
    std::map<std::pair<int, uint32_t>, std::string> names;  // kind, id
    size_t attributed_allocs = 0;
    std::map<uint32_t, std::vector<uint64_t>> nodes;  // autograd thread -> sequences
    for (size_t i = 1; i < run.messages.size(); ++i) {
      positions += static_cast<size_t>(run.messages[i].batch().thread_buffer_positions_size());
      for (const v1::Event& event : run.messages[i].batch().events()) {
        if (event.has_attribution_name()) {
          const v1::AttributionName& name = event.attribution_name();
          names[{name.kind(), name.id()}] = name.name();
        }
        if (event.has_torch_autograd_node()) {
          // A forward op that allocated nothing, with what was running then: the module of
          // its thread's last ALLOC.
          const v1::TorchAutogradNode& n = event.torch_autograd_node();
          const uint32_t device = n.autograd_thread() - 1;
          const uint64_t seq = n.autograd_sequence() - 100000;
          cumemtrace_torch_event want{};
          node_of(device, seq, &want);
          uint32_t module = 0;
          cumemtrace_torch_event alloc{};
          attribution_of(device, seq - 1, &module, &alloc);
          EXPECT_EQ(n.operator_id(), want.op) << "node " << seq;
          EXPECT_EQ(n.inner_operator_id(), want.inner_op) << "node " << seq;
          EXPECT_EQ(n.module_id(), module) << "node " << seq;
          EXPECT_EQ(n.stack_id(), 0u);
          nodes[n.autograd_thread()].push_back(seq);
          continue;
        }
        if (!event.has_torch_allocator()) continue;
        const v1::TorchAllocatorEvent& e = event.torch_allocator();
        const uint64_t seq = e.sequence();
        const uint64_t t = e.device();
        uint32_t module = 0;
        cumemtrace_torch_event want{};
        if (attributed && seq % 2 == 1) {
          attribution_of(e.device(), seq, &module, &want);
          attributed_allocs += want.op != 0 || module != 0;
        }
        EXPECT_EQ(e.module_id(), module) << "seq " << seq << " per_thread " << per_thread;
        EXPECT_EQ(e.operator_id(), want.op) << "seq " << seq << " per_thread " << per_thread;
        EXPECT_EQ(e.inner_operator_id(), want.inner_op) << "seq " << seq;
        EXPECT_EQ(e.autograd_sequence(), want.autograd_sequence & ~CUMEMTRACE_TORCH_BACKWARD_BIT)
            << "seq " << seq;
        EXPECT_EQ(e.backward(), (want.autograd_sequence & CUMEMTRACE_TORCH_BACKWARD_BIT) != 0)
            << "seq " << seq;
        EXPECT_EQ(e.autograd_thread(), want.autograd_thread) << "seq " << seq;
        EXPECT_EQ(e.action(), seq % 2 == 1 ? v1::TORCH_ALLOCATOR_ACTION_ALLOC
                                           : v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED);
        EXPECT_EQ(e.address(), 0x7f0000000000ull + (t << 32) + seq * 512);
        EXPECT_EQ(e.requested_bytes(), seq * 3 + t);
        EXPECT_EQ(e.stream(), t * 100 + seq / 7);
        EXPECT_EQ(e.allocated_bytes_total(), seq % 4 == 1 ? seq * 5 : 0);
        EXPECT_EQ(e.allocated_bytes_current(), seq % 4 == 1 ? seq * 7 : 0);
        EXPECT_EQ(e.reserved_bytes_current(), seq % 4 == 1 ? seq * 11 : 0);
        by_device[e.device()].emplace_back(seq, event.timestamp_ns());
        threads[e.device()].insert(e.thread_id());
      }
    }
    EXPECT_EQ(positions > 0, per_thread);
    // Every node once when ops are watched (through the ring, whichever way the tensors
    // went), none otherwise.
    EXPECT_EQ(nodes.size(), attributed ? 3u : 0u);
    for (auto& [thread, sequences] : nodes) {
      std::sort(sequences.begin(), sequences.end());
      ASSERT_EQ(sequences.size(), 300u) << "thread " << thread << " per_thread " << per_thread;
      for (size_t k = 0; k < sequences.size(); ++k) EXPECT_EQ(sequences[k], (k + 1) * 10);
    }
    if (attributed) {
      EXPECT_GT(attributed_allocs, 4000u);
      EXPECT_EQ(names.size(), 5u);
      EXPECT_EQ(names[std::make_pair(int{v1::ATTRIBUTION_KIND_OPERATOR}, 2u)], "op.2");
      EXPECT_EQ(names[std::make_pair(int{v1::ATTRIBUTION_KIND_MODULE}, 1u)], "module.1");
    } else {
      EXPECT_TRUE(names.empty());
    }
    ASSERT_EQ(by_device.size(), 3u) << "per_thread " << per_thread;
    for (auto& [device, events] : by_device) {
      EXPECT_EQ(threads[device].size(), 1u);
      std::sort(events.begin(), events.end());
      ASSERT_EQ(events.size(), 3000u) << "device " << device << " per_thread " << per_thread;
      for (size_t n = 0; n < events.size(); ++n) {
        EXPECT_EQ(events[n].first, n + 1);
        // One thread's events in its order of time, whichever drain converted them.
        if (n > 0) {
          EXPECT_GE(events[n].second, events[n - 1].second)
              << "device " << device << " event " << n + 1 << " per_thread " << per_thread;
        }
      }
    }
  }
}

// CUMEMTRACE_SELF_TIME=1 times every event on the path it took, and counts each path's
// events: all 9,000 of the three threads in their own buffers by default, all in the ring
// with the buffers off.
TEST_F(CuptiMuxTest, SelfTimeCountsEveryTensorEventOnThePathItTook) {
  const std::string bridge_dir = FAKE_TORCH_BRIDGE_LIB;
  for (const bool per_thread : {true, false}) {
    const ProbeResult run =
        Probe({"torch-bridge", FAKE_TORCH_C10_CUDA_LIB, FAKE_TORCH_BRIDGE_LIB},
              CUMEMTRACE_TRACER_LIB, nullptr,
              {{"CUMEMTRACE_TORCH_BRIDGE_DIR", bridge_dir.substr(0, bridge_dir.rfind('/'))},
               {"CUMEMTRACE_PER_THREAD", per_thread ? "1" : "0"},
               {"CUMEMTRACE_SELF_TIME", "1"}});
    ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
    EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
    unsigned long long buffered = 0, ringed = 0;
    double buffer_ns = -1, ring_ns = -1;
    const size_t at = run.err.find("cumemtrace self time: ");
    ASSERT_NE(at, std::string::npos) << run.err;
    ASSERT_EQ(sscanf(run.err.c_str() + at,
                     "cumemtrace self time: %llu bridge events into the threads' own buffers, "
                     "%lf ns each from the hook's entry to the commit; %llu into the ring, %lf "
                     "ns per event",
                     &buffered, &buffer_ns, &ringed, &ring_ns),
              4)
        << run.err;
    EXPECT_EQ(buffered, per_thread ? 9000u : 0u) << run.err;
    EXPECT_EQ(ringed, per_thread ? 0u : 9000u) << run.err;
    // A path that took no event prints 0 ns; one that took them, its time.
    EXPECT_EQ(buffer_ns > 0, per_thread) << run.err;
    EXPECT_EQ(ring_ns > 0, !per_thread) << run.err;
  }
}

void CuptiMuxTest::CheckShared(const ProbeResult& run, Kernels mode) {
  ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
  EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
  EXPECT_EQ(run.err, "");  // no hand-over, no notice

  // The launches the probe made, in order.
  const std::vector<uint32_t> launched = IdsAfter(run.out, "launched:");
  ASSERT_GE(launched.size(), 15u) << run.out;

  ASSERT_FALSE(run.messages.empty());
  ASSERT_TRUE(run.messages[0].has_handshake());
  const uint64_t start_ns = run.messages[0].handshake().trace_start_ns();
  std::vector<uint64_t> allocated, released;
  std::vector<uint32_t> kernels;
  uint64_t exit_ns = 0;
  uint64_t dropped = 0;
  std::vector<uint64_t> kernel_times;
  for (size_t i = 1; i < run.messages.size(); ++i) {
    for (const v1::Event& event : run.messages[i].batch().events()) {
      if (event.has_memory()) {
        (event.memory().operation() == v1::MEMORY_OPERATION_ALLOCATE ? allocated : released)
            .push_back(event.memory().address());
      } else if (event.has_kernel()) {
        kernels.push_back(event.kernel().correlation_id());
        kernel_times.push_back(event.timestamp_ns());
        EXPECT_EQ(event.kernel().launch_only(), mode == Kernels::kLaunches);
      } else if (event.has_process_exit()) {
        exit_ns = event.timestamp_ns();
      } else if (event.has_dropped()) {
        dropped += event.dropped().count();
      }
    }
  }
  // Every allocation and release once, in order, whatever the client did meanwhile.
  const std::vector<uint64_t> addresses{0x7000000, 0x7010000, 0x7020000};
  EXPECT_EQ(allocated, addresses);
  EXPECT_EQ(released, addresses);
  // Every kernel once, in order: before, during and after the client's sessions, including
  // the ones whose records the client rejected.
  EXPECT_EQ(kernels, mode == Kernels::kNone ? std::vector<uint32_t>{} : launched);
  EXPECT_EQ(dropped, 0u);
  // The client gave CUPTI a clock of its own (4 ns ticks, another origin): the tracer's
  // kernel times are still on CLOCK_MONOTONIC, inside the run.
  ASSERT_NE(exit_ns, 0u);
  for (uint64_t t : kernel_times) {
    EXPECT_GE(t, start_ns);
    EXPECT_LE(t, exit_ns);
  }
}

TEST_F(CuptiMuxTest, SecondCuptiInTheProcessFallsBackToTheHandOverSaidOnce) {
  const std::string copy = dir_ + "/libcupti-copy.so";
  {
    std::ifstream in(FAKE_CUPTI_LIB, std::ios::binary);
    std::ofstream out(copy, std::ios::binary);
    out << in.rdbuf();
  }
  const ProbeResult run = Probe({"fallback", copy}, CUMEMTRACE_TRACER_LIB);
  ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
  EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
  EXPECT_EQ(Count(run.err, "handed CUPTI over"), 1u) << run.err;
  // What the tracer saw before the hand-over reached the collector.
  bool allocation = false;
  for (size_t i = 1; i < run.messages.size(); ++i) {
    for (const v1::Event& event : run.messages[i].batch().events()) {
      allocation |= event.has_memory() && event.memory().address() == 0x7000000;
    }
  }
  EXPECT_TRUE(allocation);
}

TEST_F(CuptiMuxTest, AnotherInjectedToolOwnsCuptiAndTheProgramRuns) {
  const ProbeResult run = Probe({"other-tool"}, FAKE_CUPTI_LIB);
  ASSERT_TRUE(WIFEXITED(run.status)) << run.out << run.err;
  EXPECT_EQ(WEXITSTATUS(run.status), 0) << run.out << run.err;
  EXPECT_EQ(Count(run.err, "another CUDA tool is injected"), 1u) << run.err;
  ASSERT_FALSE(run.messages.empty());
  bool exited = false;
  for (size_t i = 1; i < run.messages.size(); ++i) {
    for (const v1::Event& event : run.messages[i].batch().events()) {
      EXPECT_FALSE(event.has_memory());
      exited |= event.has_process_exit();
    }
  }
  EXPECT_TRUE(exited);
}

}  // namespace
}  // namespace cumemtrace
