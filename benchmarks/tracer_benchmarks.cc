// What the tracer costs per event, in nanoseconds (docs/benchmarks.md has the figures):
//   Hook/*   - on a program thread: build the HostRecord as the hook does (clock, thread id,
//              fields) and write it into the shared ring (RecordQueue::Push). This is all
//              the traced program pays for an NVTX call or a CUDA API call's entry callback.
//              Hook/TorchEntry: one PyTorch allocator trace entry through the bridge's
//              code (bridge_core.h) into the ring; torch's own part (building the entry,
//              calling the tracker, getDeviceStats) is not in it.
//   Drain/*  - on the sender thread: take records out of the shared ring.
//   Encode/* - on the sender thread: translate one record (RecordTranslator), add it to the
//              batch (EventEncoder, interning) and frame full batches for the socket.
#include <benchmark/benchmark.h>

#include <cupti_activity.h>

#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tracer/recording/api_catalog.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/record_queue.h"
#include "tracer/recording/tsc_clock.h"
#include "tracer/sending/correlation_table.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/record_translator.h"
#include "tracer/sources/torch_bridge/bridge_core.h"
#include "tracer/sources/torch_bridge/tests/fabricated_entry.h"
#include "tracer/sources/torch_bridge/torch_bridge.h"

namespace cumemtrace::tracer {
namespace {

constexpr size_t kQueueCapacity = 1 << 20;  // the tracer's default (CUMEMTRACE_QUEUE_EVENTS)

uint16_t ApiRow(const char* name) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  for (uint16_t i = 0; i < count; ++i) {
    if (strcmp(apis[i].name, name) == 0) return i;
  }
  return 0;
}

// The ring is emptied (and its space freed) by the sender thread in the tracer; here it is
// emptied outside the timed region before it can fill, so every timed push is an accepted
// one. With several threads, each drains after its share of the ring (at least 256 bytes
// per record, over twice what these records take), one thread at a time as in the tracer.
std::mutex g_drain_mutex;

template <typename MakeRecord>
void PushLoop(benchmark::State& state, RecordQueue& queue, MakeRecord make_record) {
  std::vector<HostRecord> taken;
  std::vector<uint64_t> ends;
  const size_t share = queue.ring_bytes() / 256 / static_cast<size_t>(state.threads());
  size_t pushed = 0;
  for (auto _ : state) {
    if (pushed == share) {
      state.PauseTiming();
      {
        std::lock_guard<std::mutex> lock(g_drain_mutex);
        queue.TakeAll(&taken, &ends);
        if (!ends.empty()) queue.Free(ends.back());
      }
      taken.clear();
      pushed = 0;
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(queue.Push(make_record()));
    ++pushed;
  }
  state.SetItemsProcessed(state.iterations());
}

// The shared ring, made once (as in Start) and emptied before each run.
void Reset(RecordQueue& queue) {
  if (!queue.created()) {
    const int fd = queue.Create();
    if (fd >= 0) close(fd);
  }
  std::vector<HostRecord> drained;
  std::vector<uint64_t> ends;
  std::lock_guard<std::mutex> lock(g_drain_mutex);
  queue.TakeAll(&drained, &ends);
  if (!ends.empty()) queue.Free(ends.back());
}

// nvtxRangePushA("forward") as nvtx_injection.cc records it.
void BM_Hook_NvtxPush(benchmark::State& state) {
  static RecordQueue queue(kQueueCapacity);
  if (state.thread_index() == 0) Reset(queue);
  PushLoop(state, queue, [] {
    HostRecord record;
    record.type = HostRecord::Type::kNvtx;
    record.nvtx_operation = 1;  // PUSH
    record.timestamp_ns = MonotonicNs();
    record.thread_id = CurrentThreadId();
    record.text = "forward";
    return record;
  });
}
BENCHMARK(BM_Hook_NvtxPush)->Name("Hook/NvtxPush")->Threads(1)->Threads(2)->UseRealTime();

// A CUDA API call's entry callback (cupti_session.cc): correlation id -> thread, API.
void BM_Hook_Correlation(benchmark::State& state) {
  static RecordQueue queue(kQueueCapacity);
  if (state.thread_index() == 0) Reset(queue);
  const uint16_t api = ApiRow("cuLaunchKernel");
  uint32_t correlation = 0;
  PushLoop(state, queue, [&] {
    HostRecord record;
    record.type = HostRecord::Type::kCorrelation;
    record.thread_id = CurrentThreadId();
    record.correlation_id = ++correlation;
    record.api = api;
    return record;
  });
}
BENCHMARK(BM_Hook_Correlation)->Name("Hook/Correlation")->Threads(1)->Threads(2)->UseRealTime();

// An allocation call's exit callback (cupti_session.cc): what the call made.
void BM_Hook_Memory(benchmark::State& state) {
  static RecordQueue queue(kQueueCapacity);
  if (state.thread_index() == 0) Reset(queue);
  const uint16_t api = ApiRow("cuMemAllocAsync");
  uint64_t n = 0;
  PushLoop(state, queue, [&] {
    HostRecord record;
    record.type = HostRecord::Type::kMemory;
    record.timestamp_ns = MonotonicNs();
    record.thread_id = CurrentThreadId();
    record.correlation_id = static_cast<uint32_t>(++n);
    record.api = api;
    record.address = 0x7f0000000000 + ((n & 1023) << 22);
    record.bytes = 4 << 20;
    record.memory_kind = v1::MEMORY_KIND_DEVICE;
    record.is_async = true;
    record.stream_id = 7;
    return record;
  });
}
BENCHMARK(BM_Hook_Memory)->Name("Hook/Memory")->Threads(1)->Threads(2)->UseRealTime();

// One allocator trace entry as the bridge handles it: BridgeCore::OnEntry (sequence, the
// device's counters), then the record EmitTorchEvent (torch_bridge.cc) writes into the ring.
// Entries alternate ALLOC and FREE_REQUESTED, as a settling loop's small tensors do. The
// counters come from a fixed struct here; in torch, getDeviceStats copies its whole stats.
class TorchEntries {
 public:
  // `clock`: the hook's (tsc_clock.h), clock_gettime until started and refitted twice.
  // `torch_tsc`: each entry carries a TSC read of its own, as torch's do where it times them
  // with the TSC, and the hook maps it (TscClock::TimeOf) instead of reading one.
  explicit TorchEntries(const TscClock* clock, bool torch_tsc = false) : torch_tsc_(torch_tsc) {
    Reset(queue_);
    clock_ = clock;
  }
  RecordQueue& queue() { return queue_; }
  void Next() {
    ++n_;
    using torch_bridge::FabricatedEntry;
    core_.OnEntry(torch_bridge::Entry(
        (n_ & 1) ? FabricatedEntry::ALLOC : FabricatedEntry::FREE_REQUESTED, 0,
        0x7f0000000000 + ((n_ >> 1 & 1023) << 9), 512, torch_tsc_ ? TorchTsc() : 0));
  }

 private:
  struct FixedCounters {
    bool operator()(uint32_t, torch_bridge::DeviceCounters* out) const {
      *out = torch_bridge::DeviceCounters{4096, 2048, 1 << 21};
      return true;
    }
  };
  static uint64_t TorchTsc() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  static int EmitToRing(const cumemtrace_torch_event* event, void* /*context*/) {
    bool from_torch = false;
    const uint64_t now = clock_->TimeOf(event->tsc, &from_torch);
    v1::ring::TorchRecord record = TorchRecordOf(*event, CurrentThreadId(), now);
    return queue_.PushTorchRecord(record, nullptr, 0);
  }
  // Static: the hook's emit function is a plain function pointer, as in the shim.
  static inline RecordQueue queue_{kQueueCapacity};
  static inline const TscClock* clock_ = nullptr;
  torch_bridge::BridgeCore<FixedCounters, /*kTimeIsTsc=*/true> core_{EmitToRing, nullptr,
                                                                     FixedCounters{}};
  bool torch_tsc_;
  uint64_t n_ = 0;
};

void BM_Hook_TorchEntry(benchmark::State& state) {
  const TscClock clock;  // never started: clock_gettime
  TorchEntries entries(&clock);
  RecordQueue& queue = entries.queue();
  std::vector<HostRecord> taken;
  std::vector<uint64_t> ends;
  const size_t share = queue.ring_bytes() / 256;
  size_t pushed = 0;
  for (auto _ : state) {
    if (pushed == share) {
      state.PauseTiming();
      queue.TakeAll(&taken, &ends);
      if (!ends.empty()) queue.Free(ends.back());
      taken.clear();
      pushed = 0;
      state.ResumeTiming();
    }
    entries.Next();
    ++pushed;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Hook_TorchEntry)->Name("Hook/TorchEntry");

// What the entry costs the program around it, which Hook/TorchEntry (the ring and the state
// stay in the caches) and CUMEMTRACE_SELF_TIME (the hook's own time) both leave out: the
// cache lines the ring takes from the program, and the program's stores in flight that a
// locked instruction waits for. Each iteration is a slice of the program (64 stores spread
// over a working set of range(0) KiB, as a settling loop's Python and torch objects) and,
// with range(1) = 1, one entry, its time from the TSC as in the tracer where it can (2: from
// clock_gettime; 3: from a TSC read the entry carries, as torch's do, which the hook maps); a
// sender thread drains the ring and refits the clock as the tracer's does.
// The entry's cost is the difference between the rows with and without it.
void BM_Hook_TorchEntryBesideWork(benchmark::State& state) {
  TscClock clock;
  if (state.range(1) == 1 || state.range(1) == 3) clock.Start();
  TorchEntries entries(&clock, /*torch_tsc=*/state.range(1) == 3);
  RecordQueue& queue = entries.queue();
  const bool hook = state.range(1) != 0;
  std::vector<uint64_t> program(static_cast<size_t>(state.range(0)) * 1024 / 8);
  std::atomic<bool> stop{false};
  uint64_t dropped_before = 0, dropped = 0;
  {
    std::vector<HostRecord> taken;
    queue.TakeAll(&taken, nullptr, &dropped_before);
  }
  std::thread sender([&] {
    std::vector<HostRecord> taken;
    std::vector<uint64_t> ends;
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      queue.TakeAll(&taken, &ends, &dropped);
      if (!ends.empty()) queue.Free(ends.back());
      queue.PopulateAhead();
      clock.Refit();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // two refits: the TSC's line
  uint64_t n = 0;
  size_t at = 0;
  for (auto _ : state) {
    for (int i = 0; i < 64; ++i) {
      at = (at + 4099) % program.size();  // a stride across lines and pages
      program[at] += n;
    }
    ++n;
    if (hook) entries.Next();
  }
  stop.store(true);
  sender.join();
  benchmark::DoNotOptimize(program.data());
  // Drops would make the entries look cheaper than they are: a row with any is void.
  state.counters["dropped"] = static_cast<double>(dropped - dropped_before);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Hook_TorchEntryBesideWork)
    ->Name("Hook/TorchEntryBesideWork")
    ->ArgNames({"program_kib", "entry"})
    ->ArgsProduct({{64, 8192}, {0, 1, 2, 3}})
    ->UseRealTime();

// The sender's pipeline for one record type. Full batches are framed into an outbox that
// is emptied as the socket write would empty it.
class SenderPipeline {
 public:
  SenderPipeline() : translator_(&encoder_, &correlations_, &namer_) {}
  RecordTranslator& translator() { return translator_; }
  CorrelationTable& correlations() { return correlations_; }
  void FlushIfFull() {
    if (!encoder_.batch_full()) return;
    encoder_.FlushBatch(&outbox_);
    bytes_ += outbox_.size();
    outbox_.clear();
  }
  uint64_t bytes() const { return bytes_; }

 private:
  EventEncoder encoder_;
  CorrelationTable correlations_;
  ErrorNamer namer_;
  RecordTranslator translator_;
  std::string outbox_;
  uint64_t bytes_ = 0;
};

// What the tracer sends for memory: the callbacks' records, allocations and releases in
// turn, the release looked up in the live set for its size, kind and device.
void BM_Encode_Memory(benchmark::State& state) {
  SenderPipeline pipeline;
  const uint16_t alloc_api = ApiRow("cuMemAllocAsync");
  const uint16_t free_api = ApiRow("cuMemFreeAsync");
  HostRecord record;
  record.type = HostRecord::Type::kMemory;
  record.thread_id = 4242;
  record.bytes = 4 << 20;
  record.memory_kind = v1::MEMORY_KIND_DEVICE;
  record.is_async = true;
  record.stream_id = 7;
  uint32_t n = 0;
  uint64_t now = 1'000'000'000;
  for (auto _ : state) {
    ++n;
    // Allocation k goes to slot k mod 512, and is released 256 allocations later: 256 live.
    const uint64_t k = n / 2;
    record.release = (n & 1) != 0;
    record.api = record.release ? free_api : alloc_api;
    const uint64_t slot = record.release ? (k + 256) & 511 : k & 511;
    record.address = 0x7f0000000000 + (slot << 22);
    record.correlation_id = n;
    record.timestamp_ns = now += 1000;
    pipeline.translator().AddHostRecord(record);
    pipeline.FlushIfFull();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(pipeline.bytes()));
}
BENCHMARK(BM_Encode_Memory)->Name("Encode/Memory");

// The same from CUPTI's MEMORY2 records (CUMEMTRACE_MEMORY_RECORDS=cupti).
void BM_Encode_Memory2(benchmark::State& state) {
  SenderPipeline pipeline;
  const uint16_t api = ApiRow("cuMemAllocAsync");
  CUpti_ActivityMemory4 record;
  memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  record.bytes = 4 << 20;
  record.deviceId = 0;
  record.contextId = 1;
  record.streamId = 7;
  record.isAsync = 1;
  record.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  record.memoryPoolConfig.address = 0x1000;
  uint32_t correlation = 0;
  uint64_t now = 1'000'000'000;
  for (auto _ : state) {
    // The entry callback's correlation record reaches the table before the activity.
    pipeline.correlations().Put(++correlation, 4242, api);
    record.correlationId = correlation;
    record.timestamp = now += 1000;
    record.address = 0x7f0000000000 + ((correlation & 1023) << 22);
    record.memoryOperationType = (correlation & 1) != 0
                                     ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                     : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    pipeline.translator().AddActivity(reinterpret_cast<const CUpti_Activity*>(&record));
    pipeline.FlushIfFull();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(pipeline.bytes()));
}
BENCHMARK(BM_Encode_Memory2)->Name("Encode/Memory2");

void BM_Encode_Kernel(benchmark::State& state) {
  SenderPipeline pipeline;
  const uint16_t api = ApiRow("cuLaunchKernel");
  static const char* const kNames[] = {"ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel",
                                       "reduce_kernel", "softmax_warp_forward"};
  CUpti_ActivityKernel10 record;
  memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  record.deviceId = 0;
  record.contextId = 1;
  record.streamId = 7;
  record.gridX = 1024;
  record.gridY = record.gridZ = 1;
  record.blockX = 256;
  record.blockY = record.blockZ = 1;
  uint32_t correlation = 0;
  uint64_t now = 1'000'000'000;
  for (auto _ : state) {
    pipeline.correlations().Put(++correlation, 4242, api);
    record.correlationId = correlation;
    record.start = now += 1000;
    record.end = now + 20000;
    // Kernel names are interned: a few names, looked up on every record.
    record.name = kNames[correlation & 3];
    pipeline.translator().AddActivity(reinterpret_cast<const CUpti_Activity*>(&record));
    pipeline.FlushIfFull();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(pipeline.bytes()));
}
BENCHMARK(BM_Encode_Kernel)->Name("Encode/Kernel");

void BM_Encode_Nvtx(benchmark::State& state) {
  SenderPipeline pipeline;
  static const char* const kPhases[] = {"forward", "backward", "optimizer"};
  HostRecord record;
  record.type = HostRecord::Type::kNvtx;
  record.thread_id = 4242;
  uint64_t now = 1'000'000'000;
  uint32_t n = 0;
  for (auto _ : state) {
    // Alternating push/pop, as a training loop's ranges arrive.
    const bool push = (++n & 1) != 0;
    record.nvtx_operation = push ? 1 : 2;
    record.timestamp_ns = now += 1000;
    if (push) {
      record.text = kPhases[(n >> 1) % 3];
    } else {
      record.text.clear();
    }
    pipeline.translator().AddHostRecord(record);
    pipeline.FlushIfFull();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(pipeline.bytes()));
}
BENCHMARK(BM_Encode_Nvtx)->Name("Encode/Nvtx");

// On the sender thread, before Encode: taking NVTX push/pop records out of the shared ring
// (back into HostRecords) and freeing their space, per record, in drains of 1,000 (a busy
// program's 10 ms).
void BM_Drain_Nvtx(benchmark::State& state) {
  static RecordQueue queue(kQueueCapacity);
  Reset(queue);
  std::vector<HostRecord> taken;
  std::vector<uint64_t> ends;
  HostRecord record;
  record.type = HostRecord::Type::kNvtx;
  record.thread_id = 4242;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < 1000; ++i) {
      record.nvtx_operation = (i & 1) ? 2 : 1;
      record.text = (i & 1) ? "" : "forward";
      queue.Push(record);
    }
    state.ResumeTiming();
    queue.TakeAll(&taken, &ends);
    queue.Free(ends.back());
    benchmark::DoNotOptimize(taken.data());
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_Drain_Nvtx)->Name("Drain/Nvtx");

}  // namespace
}  // namespace cumemtrace::tracer

BENCHMARK_MAIN();
