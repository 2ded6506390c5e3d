#include "tracer/recording/record_queue.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/nvtx_domain.h"
#include "tracer/sources/torch_bridge/torch_bridge.h"

namespace cumemtrace::tracer {
namespace {

namespace ring = v1::ring;

HostRecord At(uint64_t t, std::string text = "") {
  HostRecord r;
  r.type = HostRecord::Type::kNvtx;
  r.timestamp_ns = t;
  r.text = std::move(text);
  return r;
}

TEST(RecordQueue, DropsAndCountsWhenFullWithTheTimeWindow) {
  RecordQueue queue(2);  // the smallest ring, 64 KiB
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  uint64_t pushed = 0;
  while (queue.Push(At(pushed + 1))) ++pushed;  // the first failure is drop 1, at pushed+1
  EXPECT_GT(pushed, 400u);
  EXPECT_FALSE(queue.Push(At(100000)));
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  uint64_t dropped_total = 0;
  DropWindow drops = queue.TakeAll(&out, &ends, &dropped_total);
  ASSERT_EQ(out.size(), pushed);
  EXPECT_EQ(out.back().timestamp_ns, pushed);
  EXPECT_EQ(drops.count, 2u);
  EXPECT_EQ(drops.first_ns, pushed + 1);
  EXPECT_EQ(drops.last_ns, 100000u);
  EXPECT_EQ(dropped_total, 2u);
  // Taken but not yet sent: the space is still held.
  EXPECT_FALSE(queue.Push(At(7)));
  queue.Free(ends.back());
  EXPECT_TRUE(queue.Push(At(8)));
  drops = queue.TakeAll(&out, &ends, &dropped_total);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].timestamp_ns, 8u);
  EXPECT_EQ(drops.count, 1u);  // the one at 7
  EXPECT_EQ(dropped_total, 3u);
}

// Two threads take their times before the lock: the later time may be dropped first. The
// window still runs from the earliest drop to the latest.
TEST(RecordQueue, TheDropWindowSpansDropsThatArriveOutOfTimeOrder) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  uint64_t pushed = 0;
  while (queue.Push(At(1000 + pushed))) ++pushed;
  EXPECT_FALSE(queue.Push(At(900000)));
  EXPECT_FALSE(queue.Push(At(800000)));
  EXPECT_FALSE(queue.Push(At(850000)));
  std::vector<HostRecord> out;
  const DropWindow drops = queue.TakeAll(&out);
  EXPECT_EQ(drops.count, 4u);  // the loop's first failure, at 1000 + pushed, and these three
  EXPECT_EQ(drops.first_ns, 1000 + pushed);
  EXPECT_EQ(drops.last_ns, 900000u);
  EXPECT_LE(drops.first_ns, drops.last_ns);
}

// CUMEMTRACE_SHARED_RING=0: private memory, no descriptor for the collector, same queue.
TEST(RecordQueue, PrivateWhenTheSharedRingIsTurnedOff) {
  RecordQueue queue(2);
  EXPECT_EQ(queue.Create(/*shared=*/false), -1);
  EXPECT_TRUE(queue.created());
  EXPECT_FALSE(queue.shared());
  EXPECT_TRUE(queue.Push(At(1, "kept")));
  std::vector<HostRecord> out;
  queue.TakeAll(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "kept");
}

TEST(RecordQueue, WrapsAroundAndKeepsEveryFieldAndString) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  uint64_t next = 0;
  for (int round = 0; round < 200; ++round) {  // about 20 times around the ring
    for (int i = 0; i < 37; ++i, ++next) {
      HostRecord r = At(next, std::string(next % 300, static_cast<char>('a' + next % 26)));
      r.address = next * 3;
      r.caller = next % 2 ? "libtorch_cuda.so" : "";
      r.release = next % 3 == 0;
      ASSERT_TRUE(queue.Push(r)) << next;
    }
    queue.TakeAll(&out, &ends);
    ASSERT_EQ(out.size(), 37u);
    for (const HostRecord& r : out) {
      const uint64_t n = r.timestamp_ns;
      EXPECT_EQ(r.text, std::string(n % 300, static_cast<char>('a' + n % 26)));
      EXPECT_EQ(r.address, n * 3);
      EXPECT_EQ(r.caller, n % 2 ? "libtorch_cuda.so" : "");
      EXPECT_EQ(r.release, n % 3 == 0);
    }
    queue.Free(ends.back());
  }
}

// Every field of a bridge event, each distinct, so that a field written to another's place
// shows.
cumemtrace_torch_event TorchEvent(uint64_t n) {
  cumemtrace_torch_event event{};
  event.action = n % 2 ? CUMEMTRACE_TORCH_FREE_REQUESTED : CUMEMTRACE_TORCH_ALLOC;
  event.device = static_cast<uint32_t>(n % 7);
  event.address = 0x7f00'0000'0000 + n * 512;
  event.requested_bytes = n * 3 + 1;
  event.stream = n * 5 + 2;
  event.sequence = n;
  event.allocated_bytes_total = n * 11 + 3;
  event.allocated_bytes_current = n * 13 + 4;
  event.reserved_bytes_current = n * 17 + 5;
  event.pool_id_first = n * 19 + 6;
  event.pool_id_second = n * 23 + 7;
  return event;
}

// A bridge event as the bridge's hook writes it (TorchRecordOf, then PushTorchRecord).
bool PushTorch(RecordQueue& queue, uint64_t n, uint32_t thread_id, uint64_t timestamp_ns,
               const uint64_t* stack = nullptr, uint32_t stack_words = 0) {
  ring::TorchRecord record = TorchRecordOf(TorchEvent(n), thread_id, timestamp_ns);
  return queue.PushTorchRecord(record, nullptr, stack, stack_words);
}

void ExpectTorchRecord(const HostRecord& r, uint64_t n, uint32_t thread_id) {
  const cumemtrace_torch_event e = TorchEvent(n);
  EXPECT_EQ(r.type, HostRecord::Type::kTorchAllocator);
  EXPECT_EQ(r.thread_id, thread_id);
  EXPECT_EQ(r.timestamp_ns, 1000 + n);
  EXPECT_EQ(r.device, e.device);
  EXPECT_EQ(r.address, e.address);
  EXPECT_EQ(r.bytes, e.requested_bytes);
  EXPECT_EQ(r.torch.action, e.action);
  EXPECT_EQ(r.torch.stream, e.stream);
  EXPECT_EQ(r.torch.sequence, e.sequence);
  EXPECT_EQ(r.torch.allocated_total, e.allocated_bytes_total);
  EXPECT_EQ(r.torch.allocated_current, e.allocated_bytes_current);
  EXPECT_EQ(r.torch.reserved_current, e.reserved_bytes_current);
  EXPECT_EQ(r.torch.pool_first, e.pool_id_first);
  EXPECT_EQ(r.torch.pool_second, e.pool_id_second);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.caller, "");
  EXPECT_EQ(r.domain, nullptr);
}

TEST(RecordQueue, CarriesTheTorchBridgesRecords) {
  RecordQueue queue(1024);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  ASSERT_TRUE(PushTorch(queue, 5, 42, 1005));
  HostRecord state = At(6);
  state.type = HostRecord::Type::kTorchBridgeState;
  v1::TorchBridgeState bridge;
  bridge.set_attached(true);
  bridge.set_torch_version("2.11.0+cu130");
  state.torch_bridge_state = &bridge;
  ASSERT_TRUE(queue.Push(state));
  // Its own writer only: the generic path would write it without its payload.
  HostRecord torch = At(7);
  torch.type = HostRecord::Type::kTorchAllocator;
  EXPECT_FALSE(queue.Push(torch));
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  const DropWindow drops = queue.TakeAll(&out, &ends);
  EXPECT_EQ(drops.count, 0u);  // refused, not lost to a full ring
  ASSERT_EQ(out.size(), 2u);
  ExpectTorchRecord(out[0], 5, 42);
  // The short record of its own (shared_ring.h's TorchRecord), not a Record with a payload.
  EXPECT_EQ(ends[0], sizeof(v1::ring::TorchRecord));
  EXPECT_LT(sizeof(v1::ring::TorchRecord), sizeof(v1::ring::Record));
  EXPECT_EQ(out[0].stack, nullptr);
  ASSERT_NE(out[1].torch_bridge_state, nullptr);
  EXPECT_NE(out[1].torch_bridge_state, &bridge);  // a copy, owned by whoever takes it
  EXPECT_TRUE(out[1].torch_bridge_state->attached());
  EXPECT_EQ(out[1].torch_bridge_state->torch_version(), "2.11.0+cu130");
  delete out[1].torch_bridge_state;
}

// `run --modules` / `--ops`: an ALLOC's attribution rides after its record, before its stack,
// and both come back; a record without one reads as all zero.
TEST(RecordQueue, CarriesAnAllocationsModuleAndOperatorsBeforeItsStack) {
  RecordQueue queue(1024);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  ring::TorchAttribution attribution{3, 7, 9, 2, 41 | ring::kBackwardBit};
  const uint64_t stack[] = {uint64_t{2} << 16, 0xabc, 0xdef};  // 2 native frames
  ring::TorchRecord record = TorchRecordOf(TorchEvent(5), 42, 1005);
  ASSERT_TRUE(queue.PushTorchRecord(record, &attribution, stack, 3));
  ASSERT_TRUE(PushTorch(queue, 6, 42, 1006));
  HostRecord name = At(7);
  name.type = HostRecord::Type::kAttributionName;
  name.category = v1::ATTRIBUTION_KIND_OPERATOR;
  name.range_id = 7;
  name.text = "aten::mm";
  ASSERT_TRUE(queue.Push(name));
  std::vector<HostRecord> out;
  queue.TakeAll(&out, nullptr);
  ASSERT_EQ(out.size(), 3u);
  ExpectTorchRecord(out[0], 5, 42);
  EXPECT_EQ(out[0].torch.module, 3u);
  EXPECT_EQ(out[0].torch.op, 7u);
  EXPECT_EQ(out[0].torch.inner_op, 9u);
  EXPECT_EQ(out[0].torch.autograd_thread, 2u);
  EXPECT_EQ(out[0].torch.autograd_sequence, 41 | ring::kBackwardBit);
  ASSERT_EQ(out[0].stack_words, 3u);
  EXPECT_EQ(out[0].stack[1], 0xabcu);
  EXPECT_EQ(out[0].stack[2], 0xdefu);
  ExpectTorchRecord(out[1], 6, 42);
  EXPECT_EQ(out[1].torch.op, 0u);
  EXPECT_EQ(out[1].torch.autograd_sequence, 0u);
  EXPECT_EQ(out[2].type, HostRecord::Type::kAttributionName);
  EXPECT_EQ(out[2].category, uint32_t{v1::ATTRIBUTION_KIND_OPERATOR});
  EXPECT_EQ(out[2].range_id, 7u);
  EXPECT_EQ(out[2].text, "aten::mm");
}

// The bridge's own writer around the ring many times, between records of the generic one,
// with and without stacks: every field comes back, and a full ring drops and counts as Push.
TEST(RecordQueue, TorchEventsWrapAroundBesideOtherRecordsAndAreDroppedWhenFull) {
  RecordQueue queue(2);  // 64 KiB
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  std::vector<uint64_t> words(40);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x1111;
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  uint64_t next = 0;
  for (int round = 0; round < 300; ++round) {  // about 20 times around the ring
    for (int i = 0; i < 29; ++i, ++next) {
      const uint32_t stack_words = static_cast<uint32_t>(next % 5 == 0 ? 0 : next % 41);
      ASSERT_TRUE(PushTorch(queue, next, 7, 1000 + next, stack_words > 0 ? words.data() : nullptr,
                            stack_words));
      ASSERT_TRUE(queue.Push(At(next, std::string(next % 50, 'x'))));
    }
    queue.TakeAll(&out, &ends);
    ASSERT_EQ(out.size(), 58u);
    for (size_t i = 0; i < out.size(); i += 2) {
      const uint64_t n = next - 29 + i / 2;
      ExpectTorchRecord(out[i], n, 7);
      const uint32_t stack_words = static_cast<uint32_t>(n % 5 == 0 ? 0 : n % 41);
      ASSERT_EQ(out[i].stack_words, stack_words) << n;
      if (stack_words > 0) {
        EXPECT_EQ(std::vector<uint64_t>(out[i].stack, out[i].stack + stack_words),
                  std::vector<uint64_t>(words.begin(), words.begin() + stack_words));
      }
      EXPECT_EQ(out[i + 1].text, std::string(n % 50, 'x'));
    }
    queue.Free(ends.back());
  }
  uint64_t pushed = 0;
  while (PushTorch(queue, pushed, 7, 1000 + pushed)) ++pushed;
  EXPECT_FALSE(PushTorch(queue, 0, 7, 99));
  EXPECT_GT(pushed, 600u);  // 96 bytes each (176 as a Record with a payload)
  const DropWindow drops = queue.TakeAll(&out);
  ASSERT_EQ(out.size(), pushed);
  ExpectTorchRecord(out.back(), pushed - 1, 7);
  EXPECT_EQ(drops.count, 2u);
  EXPECT_EQ(drops.first_ns, 99u);
  EXPECT_EQ(drops.last_ns, 1000 + pushed);
}

// `run --stacks`: a stack rides after the type's payload, flagged in the record, and comes
// back whole for allocations and tensors alike; a record without one has none.
TEST(RecordQueue, CarriesAllocationStacksAfterThePayload) {
  RecordQueue queue(1024);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  const uint64_t words[] = {0x0002'0001, 7, 42, 0x401000, 0x402000};  // 1 python, 2 native
  HostRecord memory = At(1);
  memory.type = HostRecord::Type::kMemory;
  memory.address = 0x2000;
  memory.caller = "libc10_cuda.so";
  memory.stack = words;
  memory.stack_words = 5;
  HostRecord plain = At(3);
  plain.type = HostRecord::Type::kMemory;
  ASSERT_TRUE(queue.Push(memory));
  ASSERT_TRUE(PushTorch(queue, 9, 1, 1009, words, 3));
  ASSERT_TRUE(queue.Push(plain));
  std::vector<HostRecord> out;
  queue.TakeAll(&out);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].stack_words, 5u);
  EXPECT_EQ(std::vector<uint64_t>(out[0].stack, out[0].stack + 5),
            std::vector<uint64_t>(words, words + 5));
  EXPECT_EQ(out[0].caller, "libc10_cuda.so");
  ASSERT_EQ(out[1].stack_words, 3u);
  EXPECT_EQ(std::vector<uint64_t>(out[1].stack, out[1].stack + 3),
            std::vector<uint64_t>(words, words + 3));
  ExpectTorchRecord(out[1], 9, 1);  // the torch payload is still read from its start
  EXPECT_EQ(out[2].stack, nullptr);
  EXPECT_EQ(out[2].stack_words, 0u);
}

TEST(RecordQueue, CarriesKernelLaunchesWithTheirNameKey) {
  RecordQueue queue(1024);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  static const char kName[] = "_Z4stepPf";
  HostRecord first = At(7, kName);
  first.type = HostRecord::Type::kLaunch;
  first.symbol = kName;
  first.correlation_id = 12;
  HostRecord again = At(8);
  again.type = HostRecord::Type::kLaunch;
  again.symbol = kName;
  ASSERT_TRUE(queue.Push(first));
  ASSERT_TRUE(queue.Push(again));
  std::vector<HostRecord> out;
  queue.TakeAll(&out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].type, HostRecord::Type::kLaunch);
  EXPECT_EQ(out[0].text, kName);
  EXPECT_EQ(out[0].symbol, kName);
  EXPECT_EQ(out[0].correlation_id, 12u);
  EXPECT_EQ(out[1].text, "");
  EXPECT_EQ(out[1].symbol, kName);
  // The ring's numbering is the host record's.
  EXPECT_EQ(static_cast<int>(HostRecord::Type::kLaunch), static_cast<int>(ring::kLaunch));
  EXPECT_EQ(static_cast<int>(HostRecord::Type::kTorchBridgeState),
            static_cast<int>(ring::kTorchBridgeState));
}

TEST(RecordQueue, ARecordIsInTheSharedMemoryTheMomentPushReturns) {
  RecordQueue queue(1024);
  const int fd = queue.Create();
  ASSERT_GE(fd, 0) << "no memfd here";
  EXPECT_GE(fd, 100);  // out of the program's way, like the connection
  // What the collector maps: a second, read-only view of the same memory.
  const size_t bytes = ring::kHeaderBytes + queue.ring_bytes();
  void* view = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  close(fd);
  const auto* header = static_cast<const ring::Header*>(view);
  EXPECT_EQ(header->magic, ring::kMagic);
  EXPECT_EQ(header->capacity, queue.ring_bytes());
  EXPECT_EQ(header->write_position, 0u);
  ASSERT_TRUE(queue.Push(At(42, "forward")));
  ASSERT_GT(header->write_position, 0u);
  ring::Record record;
  memcpy(&record, static_cast<const char*>(view) + ring::kHeaderBytes, sizeof(record));
  EXPECT_EQ(record.type, ring::kNvtx);
  EXPECT_EQ(record.timestamp_ns, 42u);
  ASSERT_EQ(record.text_bytes, 7u);
  EXPECT_EQ(std::string(static_cast<const char*>(view) + ring::kHeaderBytes + sizeof(record), 7),
            "forward");
  EXPECT_EQ(record.size, header->write_position);
  munmap(view, bytes);
}

// The sender makes the ring's pages present ahead of the writers, never all at once and
// never changing a byte written.
TEST(RecordQueue, PopulateAheadMakesPagesPresentAheadOfTheWritePositionOnly) {
  RecordQueue queue(1u << 20);  // the default 32 MiB ring
  const int fd = queue.Create();
  ASSERT_GE(fd, 0) << "no memfd here";
  close(fd);
  auto* data = reinterpret_cast<unsigned char*>(queue.header()) + ring::kHeaderBytes;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto resident = [&](uint64_t offset) {
    unsigned char state = 0;
    EXPECT_EQ(mincore(data + offset, page, &state), 0);
    return (state & 1) != 0;
  };
  ASSERT_TRUE(queue.Push(At(42, "forward")));
  EXPECT_FALSE(resident(4u << 20));
  void* scratch = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(scratch, MAP_FAILED);
  const bool kernel_can = madvise(scratch, page, MADV_POPULATE_WRITE) == 0;
  munmap(scratch, page);
  if (!kernel_can) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";
  queue.PopulateAhead();
  EXPECT_TRUE(resident(4u << 20));
  EXPECT_TRUE(resident(8u << 20));  // up to 8 MiB past the write position
  EXPECT_FALSE(resident(16u << 20));
  std::vector<HostRecord> taken;
  queue.TakeAll(&taken);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].text, "forward");
  EXPECT_EQ(taken[0].timestamp_ns, 42u);
}

// Four threads (on two cores at most in CI, so waiters do reach the yield) add to a plain
// counter under the lock; one of them sleeps while holding it, as a preempted holder would.
TEST(RingLock, ExcludesAndLetsWaitersThroughAHolderThatSleeps) {
  RingLock lock;
  uint64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100'000; ++i) {
        std::lock_guard<RingLock> held(lock);
        counter = counter + 1;
        if (t == 0 && i % 20'000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, 400'000u);
}

TEST(RecordQueue, ConcurrentProducersLoseNothingBelowCapacity) {
  RecordQueue queue(1 << 20);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&queue] {
      for (int i = 0; i < 10000; ++i) queue.Push(At(static_cast<uint64_t>(i)));
    });
  }
  size_t total = 0;
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  for (int round = 0; round < 50; ++round) {
    queue.TakeAll(&out, &ends);
    total += out.size();
    if (!ends.empty()) queue.Free(ends.back());
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(queue.TakeAll(&out).count, 0u);
  total += out.size();
  EXPECT_EQ(total, 40000u);
}

// The ring is memory the program can write. A record whose size is 0 kept TakeAll at one
// place forever (the sender loop spun and nothing more was ever sent); sizes past the write
// position or not a multiple of 8, and records too short for their strings, are as
// impossible. Each is skipped and counted, the records before it are taken, and the ring
// goes on working. SIGALRM ends the test if TakeAll loops.
class DamagedRing : public ::testing::TestWithParam<const char*> {};

TEST_P(DamagedRing, TakeAllSkipsAnImpossibleRecordAndGoesOn) {
  const std::string damage = GetParam();
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  unsigned char* data = reinterpret_cast<unsigned char*>(queue.header()) + ring::kHeaderBytes;
  ASSERT_TRUE(queue.Push(At(1, "first")));
  const uint64_t second = queue.header()->write_position;
  ASSERT_TRUE(queue.Push(At(2, "second")));
  ASSERT_TRUE(queue.Push(At(3, "third")));
  const uint64_t write = queue.header()->write_position;
  auto* record = reinterpret_cast<ring::Record*>(data + second);
  if (damage == "zero") {
    record->size = 0;
  } else if (damage == "past_write") {
    record->size = static_cast<uint32_t>(write - second + 8);
  } else if (damage == "unaligned") {
    record->size = 13;
  } else if (damage == "strings") {
    record->text_bytes = 1u << 30;  // longer than the record
  } else {
    record->size = 8;  // shorter than a Record
  }
  alarm(10);
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  queue.TakeAll(&out, &ends);
  alarm(0);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].text, "first");
  for (const HostRecord& r : out) EXPECT_NE(r.text, "second");
  EXPECT_EQ(queue.taken_position(), write);
  EXPECT_GT(queue.damaged_bytes() + queue.damaged_records(), 0u);
  if (damage == "strings") {
    // The size itself was possible: the records after it are still read.
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].text, "third");
    EXPECT_EQ(queue.damaged_records(), 1u);
  } else if (damage == "short") {
    // Too short for a record: left out, and what follows it is read as it can be.
    EXPECT_EQ(queue.damaged_records(), 1u);
  } else {
    // No size to go by: reading resumes at the write position (the next lap's start is
    // further).
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(queue.damaged_bytes(), write - second);
  }
  // The sender frees what it read, and the ring takes and gives records as before.
  queue.Free(queue.taken_position());
  ASSERT_TRUE(queue.Push(At(4, "after")));
  queue.TakeAll(&out, &ends);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "after");
}

// A record's NVTX domain is a pointer in the ring, which the traced program can overwrite:
// TakeAll keeps only a domain the tracer made, and the sender never follows another.
TEST(RecordQueue, TakeAllKeepsOnlyNvtxDomainsTheTracerMade) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  unsigned char* data = reinterpret_cast<unsigned char*>(queue.header()) + ring::kHeaderBytes;
  static NvtxDomain made{"made by the tracer"};
  AddKnownNvtxDomain(&made);
  HostRecord first = At(1, "first");
  first.domain = &made;
  ASSERT_TRUE(queue.Push(first));
  const uint64_t second = queue.header()->write_position;
  HostRecord overwritten = At(2, "second");
  overwritten.domain = &made;
  ASSERT_TRUE(queue.Push(overwritten));
  reinterpret_cast<ring::Record*>(data + second)->domain_handle = 0xdeadbeef0;
  std::vector<HostRecord> out;
  queue.TakeAll(&out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].domain, &made);
  EXPECT_EQ(out[1].text, "second");
  EXPECT_EQ(out[1].domain, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Sizes, DamagedRing,
                         ::testing::Values("zero", "past_write", "unaligned", "strings", "short"));

// A damaged size near the end of the data area: reading resumes at the next lap, whose
// first record is whole.
TEST(RecordQueue, TakeAllResumesAtTheNextLapAfterADamagedSize) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  unsigned char* data = reinterpret_cast<unsigned char*>(queue.header()) + ring::kHeaderBytes;
  const uint64_t capacity = queue.ring_bytes();
  std::vector<HostRecord> out;
  std::vector<uint64_t> ends;
  // Records up to near the end of the first lap, taken and freed.
  while (queue.header()->write_position < capacity - 1024) {
    if (queue.Push(At(1, "filler"))) continue;
    queue.TakeAll(&out, &ends);
    queue.Free(queue.taken_position());
  }
  queue.TakeAll(&out, &ends);
  queue.Free(queue.taken_position());
  const uint64_t damaged_at = queue.header()->write_position;
  ASSERT_TRUE(queue.Push(At(2, "damaged")));
  while (queue.header()->write_position < capacity) ASSERT_TRUE(queue.Push(At(3, "wraps")));
  ASSERT_TRUE(queue.Push(At(4, "next lap")));
  reinterpret_cast<ring::Record*>(data + damaged_at % capacity)->size = 0;
  alarm(10);
  queue.TakeAll(&out, &ends);
  alarm(0);
  // The record that crossed into the next lap, and the one after it.
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "wraps");
  EXPECT_EQ(out[1].text, "next lap");
  EXPECT_EQ(queue.damaged_bytes(), capacity - damaged_at);
}

// --- waiting for room (CUMEMTRACE_WAIT_WHEN_FULL) ----------------------------------------

// A sender stand-in: takes and frees what is in the ring every `every`, beating as the
// real one does, until told to stop.
struct SlowSender {
  SlowSender(RecordQueue* queue, std::chrono::microseconds every) {
    thread = std::thread([this, queue, every] {
      RecordQueue::MarkSenderThread();
      std::vector<HostRecord> out;
      std::vector<uint64_t> ends;
      while (!stop.load()) {
        queue->SenderBeat();
        std::this_thread::sleep_for(every);
        dropped += queue->TakeAll(&out, &ends).count;
        taken += out.size();
        queue->Free(queue->taken_position());
      }
      dropped += queue->TakeAll(&out, &ends).count;
      taken += out.size();
    });
  }
  ~SlowSender() { Finish(); }
  // Takes what is left, and stops.
  void Finish() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
  std::atomic<bool> stop{false};
  uint64_t taken = 0;
  uint64_t dropped = 0;
  std::thread thread;
};

TEST(RecordQueueWait, ThreadsWaitForRoomAndNothingIsDropped) {
  RecordQueue queue(2);  // 64 KiB: about 500 records, full many times over
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  queue.set_wait_when_full(true);
  constexpr int kThreads = 4;
  constexpr int kEach = 20000;
  uint64_t taken = 0;
  uint64_t dropped = 0;
  {
    SlowSender sender(&queue, std::chrono::microseconds(200));
    std::vector<std::thread> producers;
    for (int t = 0; t < kThreads; ++t) {
      producers.emplace_back([&queue] {
        for (int i = 0; i < kEach; ++i) EXPECT_TRUE(queue.Push(At(1 + i, "w")));
      });
    }
    for (std::thread& p : producers) p.join();
    sender.Finish();
    taken = sender.taken;
    dropped = sender.dropped;
  }
  EXPECT_EQ(taken, uint64_t{kThreads} * kEach);
  EXPECT_EQ(dropped, 0u);
  EXPECT_GT(queue.waited_pushes(), 0u);  // the ring was full: they did wait
}

TEST(RecordQueueWait, WithoutTheOptionAFullRingDropsAndTakenPlusDroppedIsPushed) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  constexpr int kThreads = 4;
  constexpr int kEach = 20000;
  std::atomic<uint64_t> refused{0};
  uint64_t taken = 0;
  uint64_t dropped = 0;
  {
    SlowSender sender(&queue, std::chrono::microseconds(200));
    std::vector<std::thread> producers;
    for (int t = 0; t < kThreads; ++t) {
      producers.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) {
          if (!queue.Push(At(1 + i, "d"))) ++refused;
        }
      });
    }
    for (std::thread& p : producers) p.join();
    sender.Finish();
    taken = sender.taken;
    dropped = sender.dropped;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(dropped, refused.load());
  EXPECT_EQ(taken + dropped, uint64_t{kThreads} * kEach);
  EXPECT_EQ(queue.waited_pushes(), 0u);
}

// Full ring, nobody freeing: each way out of the wait ends in a counted drop.
void FillRing(RecordQueue* queue) {
  while (queue->Push(At(1))) {
  }
}

TEST(RecordQueueWait, TurningTheOptionOffReleasesAWaiterWhichDrops) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  FillRing(&queue);
  std::vector<HostRecord> out;
  queue.TakeAll(&out);  // the drop of FillRing's last push
  queue.set_wait_when_full(true);
  std::atomic<int> result{-1};
  std::thread waiter([&] { result = queue.Push(At(2)) ? 1 : 0; });
  // The sender goes round its loop (never freeing), so the waiter keeps waiting.
  for (int i = 0; i < 50; ++i) {
    queue.SenderBeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(result.load(), -1);
  queue.set_wait_when_full(false);  // as when the collector is gone, or the sender ends
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(queue.TakeAll(&out).count, 1u);
}

TEST(RecordQueueWait, TheSenderThreadNeverWaits) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  FillRing(&queue);
  queue.set_wait_when_full(true);
  std::atomic<int> result{-1};
  std::thread sender([&] {
    RecordQueue::MarkSenderThread();
    result = queue.Push(At(2)) ? 1 : 0;
  });
  sender.join();  // returns at once: a wait would be for itself
  EXPECT_EQ(result.load(), 0);
}

TEST(RecordQueueWait, AStalledSenderEndsTheWaitWithADrop) {
  RecordQueue queue(2);
  const int fd = queue.Create();
  if (fd >= 0) close(fd);
  FillRing(&queue);
  std::vector<HostRecord> out;
  queue.TakeAll(&out);
  queue.set_wait_when_full(true);
  queue.set_sender_stall_ns_for_tests(50'000'000);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(queue.Push(At(2)));  // no beat for 50 ms: given up
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(queue.waits_given_up(), 1u);
  EXPECT_EQ(queue.TakeAll(&out).count, 1u);
}

}  // namespace
}  // namespace cumemtrace::tracer
