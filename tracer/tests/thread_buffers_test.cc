// The per-thread buffers of tensor events (tracer/recording/thread_buffers.h) and the
// collector's reader of them (collector/cli/thread_buffer_reader.h): what the sender takes,
// what the collector reads after the process is gone, and a child SIGKILLed while its threads
// write.
#include "tracer/recording/thread_buffers.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collector/cli/thread_buffer_reader.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::tracer {
namespace {

namespace tb = v1::thread_buffers;

// Shared memory as the ring's memfd gives it, unmapped at the end of the test.
struct Area {
  Area(uint32_t slots, uint32_t units) : bytes(ThreadBuffers::BytesFor(slots, units)) {
    memory = static_cast<unsigned char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  }
  ~Area() { munmap(memory, bytes); }
  uint64_t bytes;
  unsigned char* memory;
};

// Event `seq` of `device`: every field a function of the two, so that a record read back
// can be checked whole (a torn one would mix two events).
TensorEvent EventOf(uint32_t device, uint64_t seq) {
  TensorEvent e{};
  e.time = seq * 1000 + device;
  e.tsc = false;
  e.action =
      seq % 2 == 1 ? v1::TORCH_ALLOCATOR_ACTION_ALLOC : v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED;
  e.device = device;
  e.sequence = seq;
  e.address = 0x7f0000000000 + (uint64_t{device} << 32) + seq * 512;
  e.requested_bytes = seq * 7 + device;
  e.stream = seq / 10 + device * 1000;  // a new definition every 10 events
  e.pool_first = device;
  e.pool_second = seq / 50;
  e.counters = seq % 3 == 0;
  if (e.counters) {
    e.allocated_total = seq * 3;
    e.allocated_current = seq * 5;
    e.reserved_current = seq * 11;
  }
  return e;
}

// Whether a record read back is exactly EventOf(its device, its sequence).
bool Whole(uint32_t device, uint64_t seq, uint64_t time, uint8_t action, uint64_t address,
           uint64_t bytes, uint64_t stream, uint64_t pool_first, uint64_t pool_second,
           uint64_t total, uint64_t current, uint64_t reserved) {
  const TensorEvent e = EventOf(device, seq);
  return time == e.time && action == e.action && address == e.address &&
         bytes == e.requested_bytes && stream == e.stream && pool_first == e.pool_first &&
         pool_second == e.pool_second && total == e.allocated_total &&
         current == e.allocated_current && reserved == e.reserved_current;
}
bool Whole(const HostRecord& r) {
  return Whole(r.device, r.torch.sequence, r.timestamp_ns, r.torch.action, r.address, r.bytes,
               r.torch.stream, r.torch.pool_first, r.torch.pool_second, r.torch.allocated_total,
               r.torch.allocated_current, r.torch.reserved_current);
}
bool Whole(const v1::ring::TorchRecord& r) {
  return Whole(r.device, r.sequence, r.timestamp_ns, r.action, r.address, r.requested_bytes,
               r.stream, r.pool_first, r.pool_second, r.allocated_total, r.allocated_current,
               r.reserved_current);
}

TEST(ThreadBuffers, SenderTakesEveryEventWholeWithItsDefinitionsAndCounters) {
  Area area(4, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 4, 64);
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  uint64_t next = 1;
  // Past the slot's size several times: the sender frees as it goes.
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 30; ++i, ++next) ASSERT_TRUE(buffers.Write(EventOf(2, next)));
    buffers.TakeAll(clock, &taken, &positions);
    ASSERT_EQ(positions.size(), 1u);
    buffers.Free(positions[0]);
  }
  ASSERT_EQ(taken.size(), 300u);
  for (size_t i = 0; i < taken.size(); ++i) {
    EXPECT_EQ(taken[i].type, HostRecord::Type::kTorchAllocator);
    EXPECT_EQ(taken[i].torch.sequence, i + 1);
    EXPECT_EQ(taken[i].thread_id, CurrentThreadId());
    EXPECT_TRUE(Whole(taken[i])) << "event " << i + 1;
  }
  EXPECT_EQ(buffers.TakeFallbacks(), 0u);
}

// `run --modules` / `--ops`: an ALLOC's attribution is written only when it changes, applies
// to ALLOCs only, and a slot's next thread never inherits its previous thread's.
TEST(ThreadBuffers, AllocationsCarryTheirAttributionAndANewThreadStartsFromNone) {
  Area area(1, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 1, 64);
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  auto attributed = [](uint64_t seq, uint64_t a) {
    TensorEvent e = EventOf(0, seq);
    e.attributed = true;
    e.attribution = {a, a + 1, a == 0 ? 0u : 77u};  // a: module 5, op a >> 32
    return e;
  };
  const uint64_t first = 5 | uint64_t{3} << 32;
  std::thread writer([&] {
    for (uint64_t seq = 1; seq <= 6; ++seq) {
      ASSERT_TRUE(buffers.Write(attributed(seq, seq <= 4 ? first : first + 1)));
    }
  });
  writer.join();
  buffers.TakeAll(clock, &taken, &positions);
  ASSERT_EQ(taken.size(), 6u);
  for (const HostRecord& r : taken) {
    const bool alloc = r.torch.action == v1::TORCH_ALLOCATOR_ACTION_ALLOC;
    const uint64_t a = !alloc ? 0 : r.torch.sequence <= 4 ? first : first + 1;
    EXPECT_EQ(r.torch.module, static_cast<uint32_t>(a)) << r.torch.sequence;
    EXPECT_EQ(r.torch.op, static_cast<uint32_t>(a >> 32)) << r.torch.sequence;
    EXPECT_EQ(r.torch.inner_op, alloc ? static_cast<uint32_t>(a + 1) : 0u);
    EXPECT_EQ(r.torch.autograd_sequence, alloc ? 77u : 0u);
    EXPECT_TRUE(Whole(r));
  }
  for (const auto& p : positions) buffers.Free(p);
  taken.clear();
  // The ended thread's slot goes to the next thread, whose allocations name nothing.
  buffers.TakeAll(clock, &taken, &positions);
  std::thread next([&] { ASSERT_TRUE(buffers.Write(attributed(7, 0))); });
  next.join();
  buffers.TakeAll(clock, &taken, &positions);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].torch.module, 0u);
  EXPECT_EQ(taken[0].torch.op, 0u);
  EXPECT_EQ(taken[0].torch.autograd_sequence, 0u);
}

TEST(ThreadBuffers, AFullSlotRefusesUntilTheSenderFrees) {
  Area area(1, 16);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 1, 16);
  uint64_t written = 0;
  while (buffers.Write(EventOf(0, written + 1))) ++written;
  // 16 units: each event takes one, plus its definition and counters where they come.
  EXPECT_GT(written, 8u);
  EXPECT_LT(written, 16u);
  EXPECT_EQ(buffers.TakeFallbacks(), 1u);
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  buffers.TakeAll(clock, &taken, &positions);
  EXPECT_EQ(taken.size(), written);
  // Taken but not yet sent: still no room (the collector may still need them).
  EXPECT_FALSE(buffers.Write(EventOf(0, written + 1)));
  buffers.Free(positions[0]);
  EXPECT_TRUE(buffers.Write(EventOf(0, written + 1)));
}

TEST(ThreadBuffers, ThreadsBeyondTheSlotsFallBackAndEndedThreadsGiveTheirSlotBack) {
  Area area(2, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 2, 64);
  auto write_on_thread = [&](uint32_t device) {
    bool written = false;
    std::thread([&] { written = buffers.Write(EventOf(device, 1)); }).join();
    return written;
  };
  // This thread and another take the two slots; the next thread (while they live) cannot.
  ASSERT_TRUE(buffers.Write(EventOf(0, 1)));
  std::atomic<bool> release{false};
  std::atomic<bool> wrote{false};
  std::thread holder([&] {
    wrote = buffers.Write(EventOf(1, 1));
    while (!release.load()) std::this_thread::yield();
  });
  while (!wrote.load()) std::this_thread::yield();
  EXPECT_FALSE(write_on_thread(2));
  EXPECT_EQ(buffers.TakeFallbacks(), 1u);
  release = true;
  holder.join();
  // The holder ended: once its event is taken and freed, its slot is free again.
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  buffers.TakeAll(clock, &taken, &positions);
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_FALSE(write_on_thread(3));  // taken, not yet freed: still the ended thread's
  for (const auto& p : positions) buffers.Free(p);
  buffers.TakeAll(clock, &taken, &positions);
  EXPECT_TRUE(write_on_thread(4));
}

TEST(ThreadBuffers, TscTimesAreConvertedByTheSenderWithTheClocksMap) {
  Area area(2, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 2, 64);
  TscClock clock;
  clock.Start();
  clock.Refit();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  clock.Refit();
  if (!clock.uses_tsc()) GTEST_SKIP() << "the kernel's clock is not the TSC here";
  TensorEvent e = EventOf(0, 1);
  bool from_tsc = false;
  const uint64_t before = clock.TimeOf(0, &from_tsc);
#if defined(__x86_64__)
  e.time = __builtin_ia32_rdtsc();
#endif
  e.tsc = true;
  ASSERT_TRUE(buffers.Write(e));
  const uint64_t after = clock.TimeOf(0, &from_tsc);
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  buffers.TakeAll(clock, &taken, &positions);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_GE(taken[0].timestamp_ns + 1000, before);
  EXPECT_LE(taken[0].timestamp_ns, after + 1000);
  // The collector converts with the map the sender wrote into the header: the same time.
  const ThreadBufferRead read = ReadThreadBuffers(area.memory, area.bytes, {});
  ASSERT_EQ(read.events.size(), 1u);
  EXPECT_EQ(read.events[0].timestamp_ns, taken[0].timestamp_ns);
}

TEST(ThreadBufferReader, ReadsFromTheLaterOfFreedAndReceivedWithTheDefinitionsInEffect) {
  Area area(2, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 2, 64);
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  for (uint64_t seq = 1; seq <= 25; ++seq) ASSERT_TRUE(buffers.Write(EventOf(1, seq)));
  buffers.TakeAll(clock, &taken, &positions);
  buffers.Free(positions[0]);  // 1..25 reached the kernel
  for (uint64_t seq = 26; seq <= 40; ++seq) ASSERT_TRUE(buffers.Write(EventOf(1, seq)));
  buffers.TakeAll(clock, &taken, &positions);  // 26..40 sent, not yet freed
  const uint64_t received_to = positions[0].position;
  for (uint64_t seq = 41; seq <= 47; ++seq) ASSERT_TRUE(buffers.Write(EventOf(1, seq)));
  // Without the received position: 26..47; with it: 41..47. Every one whole, with the
  // stream defined before `freed` or the one defined since.
  for (const bool with_received : {false, true}) {
    std::unordered_map<uint32_t, uint64_t> received;
    if (with_received) received[positions[0].slot] = received_to;
    const ThreadBufferRead read = ReadThreadBuffers(area.memory, area.bytes, received);
    const uint64_t first = with_received ? 41 : 26;
    ASSERT_EQ(read.events.size(), 47 - first + 1);
    for (size_t i = 0; i < read.events.size(); ++i) {
      EXPECT_EQ(read.events[i].sequence, first + i);
      EXPECT_TRUE(Whole(read.events[i])) << "event " << first + i;
    }
    EXPECT_EQ(read.rejected, 0u);
  }
}

// The collector reads a large area in slices between its other streams' work: every event
// once, in order, in batches numbered on from the ring's.
TEST(ThreadBufferReader, ASlicedRecoveryReadsEverythingOnceInBatchesNumberedOn) {
  constexpr uint32_t kUnits = 16384;
  const uint64_t bytes = ThreadBuffers::BytesFor(1, kUnits);
  const int fd = memfd_create("thread-buffers-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  auto* memory =
      static_cast<unsigned char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(memory, MAP_FAILED);
  {
    ThreadBuffers buffers;
    buffers.Init(memory, 1, kUnits);
    for (uint64_t seq = 1; seq <= 10000; ++seq) ASSERT_TRUE(buffers.Write(EventOf(3, seq)));
  }
  ThreadBufferRecovery recovery(fd, 0, bytes, {}, 7);
  std::vector<std::string> frames;
  int slices = 1;
  while (!recovery.Continue(/*budget_ns=*/0, &frames)) ++slices;
  EXPECT_GT(slices, 1);
  EXPECT_EQ(recovery.events(), 10000u);
  uint64_t next = 1;
  for (size_t i = 0; i < frames.size(); ++i) {
    v1::StreamMessage message;
    ASSERT_TRUE(message.ParseFromString(frames[i]));
    EXPECT_EQ(message.batch().sequence(), 7 + i);
    for (const v1::Event& event : message.batch().events()) {
      const v1::TorchAllocatorEvent& e = event.torch_allocator();
      EXPECT_EQ(e.sequence(), next++);
      EXPECT_TRUE(Whole(
          e.device(), e.sequence(), event.timestamp_ns(), static_cast<uint8_t>(e.action()),
          e.address(), e.requested_bytes(), e.stream(), e.pool_id_first(), e.pool_id_second(),
          e.allocated_bytes_total(), e.allocated_bytes_current(), e.reserved_bytes_current()));
    }
  }
  EXPECT_EQ(next, 10001u);
  munmap(memory, bytes);
  close(fd);
}

TEST(ThreadBufferReader, NeverReadsPastTheCommitNorTrustsALyingHeader) {
  Area area(2, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 2, 64);
  for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE(buffers.Write(EventOf(0, seq)));
  // A unit written after the commit (a thread killed before its release store): not read.
  auto* slot = reinterpret_cast<tb::Slot*>(area.memory + tb::kSlotTableOffset);
  const uint64_t committed = slot->committed;
  uint64_t table_end = tb::kSlotTableOffset + 2 * sizeof(tb::Slot);
  table_end = (table_end + 4095) / 4096 * 4096;
  auto* units = reinterpret_cast<tb::Unit*>(area.memory + table_end);
  units[committed & 63] = units[(committed - 1) & 63];
  EXPECT_EQ(ReadThreadBuffers(area.memory, area.bytes, {}).events.size(), 5u);
  // A commit that claims more than a slot holds reads one slot's worth at most.
  slot->committed = committed + 1000;
  EXPECT_LE(ReadThreadBuffers(area.memory, area.bytes, {}).events.size(), 64u);
  slot->committed = committed;
  // A unit of an unknown kind stops its slot there.
  units[2].word |= uint64_t{0xf} << tb::kKindShift;
  const ThreadBufferRead damaged = ReadThreadBuffers(area.memory, area.bytes, {});
  EXPECT_LT(damaged.events.size(), 5u);
  EXPECT_GT(damaged.rejected, 0u);
  // Counts that do not fit the area: nothing is read.
  auto* header = reinterpret_cast<tb::Header*>(area.memory);
  header->slot_count = 100;
  EXPECT_TRUE(ReadThreadBuffers(area.memory, area.bytes, {}).events.empty());
  header->slot_count = 2;
  header->slot_units = 48;  // not a power of two
  EXPECT_TRUE(ReadThreadBuffers(area.memory, area.bytes, {}).events.empty());
  header->slot_units = 64;
  header->magic = 0;
  EXPECT_TRUE(ReadThreadBuffers(area.memory, area.bytes, {}).events.empty());
}

// The map is the dead process's bytes too: one whose slew ends 2^63 ticks before its base
// made `delta - slewed` overflow in the collector. The differences wrap instead.
TEST(ThreadBufferReader, AClockMapOfAnyBytesIsDefinedArithmetic) {
  const tb::ClockMap hostile{0, 0, uint64_t{1} << 63, 0, uint64_t{1} << 32};  // 1 ns a tick
  EXPECT_EQ(tb::ToMonotonic(hostile, 2005), (uint64_t{1} << 63) + 2005);
  Area area(1, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 1, 64);
  TensorEvent e = EventOf(0, 1);
  e.time = 2005;
  e.tsc = true;
  ASSERT_TRUE(buffers.Write(e));
  auto* header = reinterpret_cast<tb::Header*>(area.memory);
  header->clock_in_use = 0;
  header->clocks[0] = hostile;
  const ThreadBufferRead read = ReadThreadBuffers(area.memory, area.bytes, {});
  ASSERT_EQ(read.events.size(), 1u);
  EXPECT_EQ(read.events[0].timestamp_ns, (uint64_t{1} << 63) + 2005);
  // The tracer's own maps are unchanged by it: one that slews for 1,000 ticks at 2 ns a
  // tick, then runs at 1.
  const tb::ClockMap map{1000, 5000, 2000, uint64_t{2} << 32, uint64_t{1} << 32};
  EXPECT_EQ(tb::ToMonotonic(map, 1500), 6000u);
  EXPECT_EQ(tb::ToMonotonic(map, 3000), 8000u);
  EXPECT_EQ(tb::ToMonotonic(map, 990), 4980u);  // a read a little before the base
}

TEST(ThreadBuffers, AForkedChildNeverWritesIntoTheParentsBuffers) {
  Area area(2, 64);
  ThreadBuffers buffers;
  buffers.Init(area.memory, 2, 64);
  ASSERT_TRUE(buffers.Write(EventOf(0, 1)));
  const std::vector<unsigned char> before(area.memory, area.memory + area.bytes);
  const pid_t child = fork();
  if (child == 0) {
    buffers.ResetInChildAfterFork();
    const bool wrote = buffers.Write(EventOf(0, 2));
    _exit(wrote ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(memcmp(before.data(), area.memory, area.bytes), 0);
}

// The crash test. A child process lays the buffers out in a memory file, as the tracer
// does, and writes tensor events from three threads; each thread logs an event's key to a
// pipe once Write (the commit) returned. The child's sender drains every 200 us and, as the
// tracer's does, "sends" what it took (its keys, then the slots' positions, then an end mark)
// on a second pipe before it frees them; a drain whose end mark did not arrive is a frame
// the collector never got. The parent SIGKILLs the child at a random moment after its first
// commit, then reads the buffers as the collector does: every committed event must be in a
// complete drain or read back, none twice, and each one read back whole.
namespace crash {

constexpr uint32_t kSlots = 4;
constexpr uint32_t kUnits = 64;  // small: the slots wrap many times in a run
constexpr int kWriters = 3;
constexpr uint64_t kEventsPerWriter = 1500;
constexpr uint64_t kTagEvent = 1, kTagPosition = 2, kTagEnd = 3;

uint64_t Key(uint32_t device, uint64_t seq) { return uint64_t{device} << 40 | seq; }

[[noreturn]] void Child(unsigned char* memory, int committed_pipe, int sent_pipe) {
  ThreadBuffers buffers;
  buffers.Init(memory, kSlots, kUnits);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const auto device = static_cast<uint32_t>(w);
      for (uint64_t seq = 1; seq <= kEventsPerWriter; ++seq) {
        while (!buffers.Write(EventOf(device, seq))) std::this_thread::yield();  // full
        const uint64_t key = Key(device, seq);
        if (write(committed_pipe, &key, sizeof(key)) != sizeof(key)) _exit(3);
      }
    });
  }
  const TscClock clock;
  std::vector<HostRecord> taken;
  std::vector<ThreadBuffers::SlotPosition> positions;
  std::vector<uint64_t> frame;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    taken.clear();
    buffers.TakeAll(clock, &taken, &positions);
    if (positions.empty()) continue;
    frame.clear();
    for (const HostRecord& r : taken) {
      frame.push_back(kTagEvent);
      frame.push_back(Key(r.device, r.torch.sequence));
    }
    for (const auto& p : positions) {
      frame.push_back(kTagPosition);
      frame.push_back(uint64_t{p.slot} << 48 | p.position);
    }
    frame.push_back(kTagEnd);
    frame.push_back(0);
    const char* at = reinterpret_cast<const char*>(frame.data());
    size_t left = frame.size() * 8;
    while (left > 0) {
      const ssize_t n = write(sent_pipe, at, left);
      if (n <= 0) _exit(3);
      at += n;
      left -= static_cast<size_t>(n);
    }
    for (const auto& p : positions) buffers.Free(p);
  }
}

std::vector<uint64_t> ReadAll(int fd) {
  std::vector<uint64_t> words;
  std::vector<char> bytes;
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  words.resize(bytes.size() / 8);
  if (!words.empty()) memcpy(words.data(), bytes.data(), words.size() * 8);
  return words;
}

}  // namespace crash

TEST(ThreadBuffersCrash, EveryCommittedEventSurvivesSigkillAndNoneIsTornOrTwice) {
  using namespace crash;
  const uint64_t bytes = ThreadBuffers::BytesFor(kSlots, kUnits);
  std::mt19937 random(20261127);
  std::uniform_int_distribution<int> delay_us(0, 4000);
  uint64_t recovered_total = 0, runs_with_recovery = 0;
  constexpr int kRuns = 1000;
  for (int run = 0; run < kRuns; ++run) {
    const int fd = memfd_create("thread-buffers-test", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    auto* memory = static_cast<unsigned char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(memory, MAP_FAILED);
    int committed_pipe[2], sent_pipe[2];
    ASSERT_EQ(pipe2(committed_pipe, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(sent_pipe, O_CLOEXEC), 0);
    // Room for all of it: the parent reads only after the kill.
    fcntl(committed_pipe[1], F_SETPIPE_SZ, 1 << 20);
    fcntl(sent_pipe[1], F_SETPIPE_SZ, 1 << 20);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) crash::Child(memory, committed_pipe[1], sent_pipe[1]);
    close(committed_pipe[1]);
    close(sent_pipe[1]);
    // The moment counts from the child's first commit, not from fork: on a loaded machine a
    // child may take longer than the whole delay to start writing.
    pollfd first_commit{committed_pipe[0], POLLIN, 0};
    ASSERT_EQ(poll(&first_commit, 1, 10'000), 1) << "run " << run << ": the child never wrote";
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child left on its own: status " << status;
    const std::vector<uint64_t> committed = ReadAll(committed_pipe[0]);
    const std::vector<uint64_t> sent_words = ReadAll(sent_pipe[0]);
    close(committed_pipe[0]);
    close(sent_pipe[0]);
    // The drains that arrived whole, as the collector receives whole frames.
    std::multiset<uint64_t> received;
    std::unordered_map<uint32_t, uint64_t> positions;
    std::vector<uint64_t> events;
    std::vector<std::pair<uint32_t, uint64_t>> frame_positions;
    for (size_t i = 0; i + 1 < sent_words.size(); i += 2) {
      const uint64_t tag = sent_words[i], value = sent_words[i + 1];
      if (tag == kTagEvent) {
        events.push_back(value);
      } else if (tag == kTagPosition) {
        frame_positions.emplace_back(static_cast<uint32_t>(value >> 48),
                                     value & ((uint64_t{1} << 48) - 1));
      } else {
        received.insert(events.begin(), events.end());
        for (const auto& [slot, position] : frame_positions) {
          positions[slot] = std::max(positions[slot], position);
        }
        events.clear();
        frame_positions.clear();
      }
    }
    // The collector's read, from the memory file the child left.
    const ThreadBufferRead read = ReadThreadBuffers(memory, bytes, positions);
    EXPECT_EQ(read.rejected, 0u);
    std::set<uint64_t> recovered;
    for (const v1::ring::TorchRecord& r : read.events) {
      ASSERT_TRUE(Whole(r)) << "run " << run << ": a torn record for device " << r.device
                            << " event " << r.sequence;
      const uint64_t key = Key(r.device, r.sequence);
      ASSERT_TRUE(recovered.insert(key).second) << "run " << run << ": read back twice";
      ASSERT_EQ(received.count(key), 0u) << "run " << run << ": received and read back";
    }
    for (const uint64_t key : received) {
      ASSERT_EQ(received.count(key), 1u) << "run " << run << ": received twice";
    }
    for (const uint64_t key : committed) {
      ASSERT_TRUE(received.count(key) == 1 || recovered.count(key) == 1)
          << "run " << run << ": committed event " << (key & tb::kSequenceMask) << " of device "
          << (key >> 40) << " lost (" << committed.size() << " committed, " << received.size()
          << " received, " << recovered.size() << " read back)";
    }
    // Through the collector's own path too, once: from the memory file, as frames.
    if (run == 0) {
      std::vector<std::string> recovered_frames;
      ThreadBufferRecovery recovery(fd, 0, bytes, positions, 7);
      EXPECT_TRUE(recovery.Continue(/*budget_ns=*/-1, &recovered_frames));
      EXPECT_EQ(recovery.events(), recovered.size());
      uint64_t events_in_frames = 0;
      for (const std::string& f : recovered_frames) {
        v1::StreamMessage message;
        ASSERT_TRUE(message.ParseFromString(f));
        events_in_frames += static_cast<uint64_t>(message.batch().events_size());
      }
      EXPECT_EQ(events_in_frames, recovered.size());
    }
    recovered_total += recovered.size();
    if (!recovered.empty()) ++runs_with_recovery;
    munmap(memory, bytes);
    close(fd);
  }
  // The test must have killed children with events still unsent, not only idle ones.
  EXPECT_GT(runs_with_recovery, static_cast<uint64_t>(kRuns / 4));
  RecordProperty("events_read_back", static_cast<int>(recovered_total));
}

}  // namespace
}  // namespace cumemtrace::tracer
