// Fabricated host records (what the driver callbacks record) and CUPTI records (built with
// the real struct layouts from the toolkit headers), through the same translator the sender
// thread uses.
#include "tracer/sending/record_translator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "tracer/recording/api_catalog.h"
#include "tracer/recording/nvtx_domain.h"

namespace cumemtrace::tracer {
namespace {

uint16_t ApiRow(const char* name) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  for (uint16_t i = 0; i < count; ++i) {
    if (strcmp(apis[i].name, name) == 0) return i;
  }
  ADD_FAILURE() << "no catalog row " << name;
  return 0;
}

class TranslatorTest : public ::testing::Test {
 protected:
  // Frames the batch and reads it back as the collector would.
  v1::EventBatch Flush() {
    std::string wire;
    encoder_.FlushBatch(&wire);
    v1::EventBatch batch;
    if (wire.empty()) return batch;
    size_t header = 1;
    while (static_cast<unsigned char>(wire[header - 1]) & 0x80) ++header;
    v1::StreamMessage message;
    EXPECT_TRUE(message.ParseFromArray(wire.data() + header, static_cast<int>(wire.size() - header)));
    for (const v1::Event& e : message.batch().events()) {
      if (e.has_interned_string()) strings_[e.interned_string().id()] = e.interned_string().value();
    }
    return message.batch();
  }

  EventEncoder encoder_;
  CorrelationTable correlations_;
  ErrorNamer namer_;
  RecordTranslator translator_{&encoder_, &correlations_, &namer_};
  std::map<uint32_t, std::string> strings_;
};

CUpti_ActivityMemory4 MemoryRecord(CUpti_ActivityMemoryOperationType op, uint64_t address,
                                   uint64_t bytes, uint32_t correlation) {
  CUpti_ActivityMemory4 record;
  memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  record.memoryOperationType = op;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  record.address = address;
  record.bytes = bytes;
  record.correlationId = correlation;
  record.timestamp = 1000;
  record.deviceId = 1;
  record.contextId = 7;
  record.streamId = 13;
  return record;
}

HostRecord Memory(bool release, const char* api, uint64_t address, uint64_t bytes,
                  uint32_t device = 0) {
  HostRecord r;
  r.type = HostRecord::Type::kMemory;
  r.release = release;
  r.api = ApiRow(api);
  r.address = address;
  r.bytes = bytes;
  r.device = device;
  r.memory_kind = release ? 0 : static_cast<uint8_t>(v1::MEMORY_KIND_DEVICE);
  r.timestamp_ns = 100;
  r.thread_id = 31;
  return r;
}

std::vector<v1::MemoryOp> MemoryOps(const v1::EventBatch& batch) {
  std::vector<v1::MemoryOp> ops;
  for (const v1::Event& e : batch.events()) {
    if (e.has_memory()) ops.push_back(e.memory());
  }
  return ops;
}

TEST_F(TranslatorTest, CallbackMemoryReleaseCarriesTheSizeKindAndDeviceOfItsAllocation) {
  HostRecord made = Memory(false, "cuMemAllocAsync", 0x7f0000001000, 3 << 20, /*device=*/1);
  made.stream_id = 13;
  made.is_async = true;
  made.correlation_id = 42;
  translator_.AddHostRecord(made);
  HostRecord pinned = Memory(false, "cuMemHostAlloc", 0x5000, 4096);
  pinned.memory_kind = v1::MEMORY_KIND_PINNED;
  translator_.AddHostRecord(pinned);
  // Freed with another device current: the release still belongs to device 1.
  HostRecord freed = Memory(true, "cuMemFreeAsync", 0x7f0000001000, 0, /*device=*/0);
  freed.thread_id = 32;
  translator_.AddHostRecord(freed);
  translator_.AddHostRecord(Memory(true, "cuMemFreeHost", 0x5000, 0));

  const std::vector<v1::MemoryOp> ops = MemoryOps(Flush());
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].operation(), v1::MEMORY_OPERATION_ALLOCATE);
  EXPECT_EQ(ops[0].bytes(), 3u << 20);
  EXPECT_EQ(ops[0].device(), 1u);
  EXPECT_EQ(ops[0].stream(), 13u);
  EXPECT_TRUE(ops[0].is_async());
  EXPECT_EQ(ops[0].thread_id(), 31u);
  EXPECT_EQ(ops[0].correlation_id(), 42u);
  EXPECT_EQ(strings_[ops[0].api_name_id()], "cuMemAllocAsync");
  EXPECT_EQ(ops[2].operation(), v1::MEMORY_OPERATION_RELEASE);
  EXPECT_EQ(ops[2].address(), 0x7f0000001000u);
  EXPECT_EQ(ops[2].bytes(), 3u << 20);
  EXPECT_EQ(ops[2].kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(ops[2].device(), 1u);
  EXPECT_EQ(ops[2].thread_id(), 32u);
  EXPECT_EQ(strings_[ops[2].api_name_id()], "cuMemFreeAsync");
  EXPECT_EQ(ops[3].kind(), v1::MEMORY_KIND_PINNED);
  EXPECT_EQ(ops[3].bytes(), 4096u);
}

TEST_F(TranslatorTest, OneUnmapEndsEveryMappingInItsRange) {
  const uint64_t base = 0x7e0000000000;
  for (uint64_t i = 0; i < 4; ++i) {
    translator_.AddHostRecord(Memory(false, "cuMemMap", base + (i << 21), 2 << 20));
  }
  // Unmaps pages 1 and 2 only; page 0 and 3 stay mapped until the second unmap.
  translator_.AddHostRecord(Memory(true, "cuMemUnmap", base + (1 << 21), 4 << 20));
  translator_.AddHostRecord(Memory(true, "cuMemUnmap", base, 8 << 20));
  const std::vector<v1::MemoryOp> ops = MemoryOps(Flush());
  ASSERT_EQ(ops.size(), 8u);
  std::vector<uint64_t> released;
  for (size_t i = 4; i < 8; ++i) {
    EXPECT_EQ(ops[i].operation(), v1::MEMORY_OPERATION_RELEASE);
    EXPECT_EQ(ops[i].bytes(), 2u << 20);
    released.push_back(ops[i].address() - base);
  }
  EXPECT_EQ(released, (std::vector<uint64_t>{1 << 21, 2 << 21, 0, 3 << 21}));
}

TEST_F(TranslatorTest, ReleaseOfUnknownAddressIsSentAsUnknownAndReuseKeepsTheNewSize) {
  translator_.AddHostRecord(Memory(true, "cuMemFree", 0x9000, 0));
  // The same address allocated twice with no release between (a lost release): the second
  // allocation's size is what a later release ends.
  translator_.AddHostRecord(Memory(false, "cuMemAlloc", 0xa000, 100));
  translator_.AddHostRecord(Memory(false, "cuMemAlloc", 0xa000, 300));
  translator_.AddHostRecord(Memory(true, "cuMemFree", 0xa000, 0));
  translator_.AddHostRecord(Memory(true, "cuMemFree", 0xa000, 0));  // double free
  const std::vector<v1::MemoryOp> ops = MemoryOps(Flush());
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops[0].operation(), v1::MEMORY_OPERATION_RELEASE);
  EXPECT_EQ(ops[0].bytes(), 0u);
  EXPECT_EQ(ops[0].kind(), v1::MEMORY_KIND_UNKNOWN);
  EXPECT_EQ(ops[3].bytes(), 300u);
  EXPECT_EQ(ops[4].bytes(), 0u);
  EXPECT_EQ(ops[4].kind(), v1::MEMORY_KIND_UNKNOWN);
}

TEST_F(TranslatorTest, MemoryRecordGetsThreadAndApiOfItsCall) {
  HostRecord call;
  call.type = HostRecord::Type::kCorrelation;
  call.correlation_id = 42;
  call.thread_id = 4242;
  call.api = ApiRow("cuMemAllocAsync");
  translator_.AddHostRecord(call);

  CUpti_ActivityMemory4 record = MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                                              0x7f0000001000, 1 << 20, 42);
  record.isAsync = 1;
  record.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  record.memoryPoolConfig.address = 0xabc;
  ASSERT_TRUE(translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record)));
  // A record whose call was never seen keeps thread 0 rather than a wrong thread.
  CUpti_ActivityMemory4 orphan =
      MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, 0x7f0000001000, 1 << 20, 43);
  orphan.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC;
  ASSERT_TRUE(translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&orphan)));

  const v1::EventBatch batch = Flush();
  std::vector<v1::MemoryOp> ops;
  for (const v1::Event& e : batch.events()) {
    if (e.has_memory()) {
      EXPECT_EQ(e.timestamp_ns(), 1000u);
      ops.push_back(e.memory());
    }
  }
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].operation(), v1::MEMORY_OPERATION_ALLOCATE);
  EXPECT_EQ(ops[0].address(), 0x7f0000001000u);
  EXPECT_EQ(ops[0].bytes(), 1u << 20);
  EXPECT_EQ(ops[0].kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(ops[0].device(), 1u);
  EXPECT_EQ(ops[0].stream(), 13u);
  EXPECT_TRUE(ops[0].is_async());
  EXPECT_EQ(ops[0].pool_type(), v1::MEMORY_POOL_TYPE_LOCAL);
  EXPECT_EQ(ops[0].pool_address(), 0xabcu);
  EXPECT_EQ(ops[0].thread_id(), 4242u);
  EXPECT_EQ(strings_[ops[0].api_name_id()], "cuMemAllocAsync");
  EXPECT_EQ(ops[1].operation(), v1::MEMORY_OPERATION_RELEASE);
  EXPECT_EQ(ops[1].kind(), v1::MEMORY_KIND_DEVICE_STATIC);
  EXPECT_EQ(ops[1].thread_id(), 0u);
  EXPECT_EQ(ops[1].api_name_id(), 0u);
}

TEST_F(TranslatorTest, SynchronousAllocationCarriesItsCallingLibrary) {
  HostRecord call;
  call.type = HostRecord::Type::kCorrelation;
  call.correlation_id = 50;
  call.thread_id = 1;
  call.api = ApiRow("cuMemAlloc");
  call.caller = "libcublasLt.so.13";
  translator_.AddHostRecord(call);
  CUpti_ActivityMemory4 record =
      MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x2000, 64 << 20, 50);
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record));
  const v1::EventBatch batch = Flush();
  const v1::Event& last = batch.events(batch.events_size() - 1);
  ASSERT_TRUE(last.has_memory());
  EXPECT_EQ(strings_[last.memory().caller_module_id()], "libcublasLt.so.13");
  EXPECT_EQ(strings_[last.memory().api_name_id()], "cuMemAlloc");
}

TEST_F(TranslatorTest, CuptiTimestampsAreShiftedOntoTheTracerClock) {
  translator_.set_cupti_clock_offset_ns(-400);
  CUpti_ActivityMemory4 record =
      MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x1000, 64, 1);
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record));
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 1);
  EXPECT_EQ(batch.events(0).timestamp_ns(), 600u);
}

TEST_F(TranslatorTest, KernelCarriesLaunchingThreadAndInternedName) {
  HostRecord launch;
  launch.type = HostRecord::Type::kCorrelation;
  launch.correlation_id = 9;
  launch.thread_id = 77;
  launch.api = ApiRow("cuLaunchKernel");
  translator_.AddHostRecord(launch);

  CUpti_ActivityKernel10 kernel;
  memset(&kernel, 0, sizeof(kernel));
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.start = 5000;
  kernel.end = 7500;
  kernel.deviceId = 0;
  kernel.streamId = 3;
  kernel.correlationId = 9;
  kernel.gridX = 4;
  kernel.gridY = 2;
  kernel.gridZ = 1;
  kernel.blockX = 128;
  kernel.blockY = 1;
  kernel.blockZ = 1;
  kernel.name = "_Z6matmulPfS_";
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&kernel));
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&kernel));  // same name: one string

  const v1::EventBatch batch = Flush();
  int interned = 0;
  std::vector<v1::Event> kernels;
  for (const v1::Event& e : batch.events()) {
    if (e.has_interned_string()) ++interned;
    if (e.has_kernel()) kernels.push_back(e);
  }
  EXPECT_EQ(interned, 1);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].timestamp_ns(), 5000u);
  EXPECT_EQ(kernels[0].kernel().end_ns(), 7500u);
  EXPECT_EQ(kernels[0].kernel().thread_id(), 77u);
  EXPECT_EQ(kernels[0].kernel().grid_size(), 8u);
  EXPECT_EQ(kernels[0].kernel().block_size(), 128u);
  EXPECT_EQ(strings_[kernels[0].kernel().name_id()], "_Z6matmulPfS_");
}

TEST_F(TranslatorTest, LaunchesBecomeLaunchOnlyKernelsNamedOnce) {
  // Kernels at their launch (the default): the first launch of a name on a thread carries a
  // copy of it, later ones only CUPTI's pointer, which the translator maps back.
  static const char kName[] = "_Z4stepPf";
  auto launch = [&](uint32_t correlation, uint32_t thread, bool with_text) {
    HostRecord r;
    r.type = HostRecord::Type::kLaunch;
    r.timestamp_ns = 1000 + correlation;
    r.correlation_id = correlation;
    r.thread_id = thread;
    r.device = 1;
    r.api = ApiRow("cuLaunchKernel");
    r.symbol = kName;
    if (with_text) r.text = kName;
    translator_.AddHostRecord(r);
  };
  launch(1, 10, true);
  launch(2, 10, false);
  launch(3, 11, true);  // another thread's first launch of it: same name, one string
  HostRecord unnamed;
  unnamed.type = HostRecord::Type::kLaunch;
  unnamed.correlation_id = 4;
  translator_.AddHostRecord(unnamed);

  const v1::EventBatch batch = Flush();
  std::vector<v1::Event> kernels;
  for (const v1::Event& e : batch.events()) {
    if (e.has_kernel()) kernels.push_back(e);
  }
  ASSERT_EQ(kernels.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(kernels[i].kernel().launch_only());
    EXPECT_EQ(strings_[kernels[i].kernel().name_id()], kName);
    EXPECT_EQ(kernels[i].kernel().end_ns(), 0u);
    EXPECT_EQ(kernels[i].kernel().device(), 1u);
    EXPECT_EQ(kernels[i].kernel().correlation_id(), i + 1);
    EXPECT_EQ(kernels[i].timestamp_ns(), 1001u + i);
  }
  EXPECT_EQ(kernels[1].kernel().thread_id(), 10u);
  EXPECT_EQ(kernels[2].kernel().thread_id(), 11u);
  EXPECT_EQ(kernels[0].kernel().name_id(), kernels[2].kernel().name_id());
  EXPECT_EQ(strings_[kernels[3].kernel().name_id()], "?");
}

TEST_F(TranslatorTest, CuptiTimestampsOnAClientsClockAreMappedLinearly) {
  // A client of the program's gave CUPTI a clock of 4 ns ticks: 1000 ticks after the
  // origin is 4000 ns after the monotonic origin.
  CuptiClockMap map;
  map.linear = true;
  map.cupti_origin = 50'000;
  map.monotonic_origin = 9'000'000;
  map.ns_per_tick = 4.0;
  translator_.set_cupti_clock(map);
  CUpti_ActivityMemory4 record =
      MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x1000, 64, 1);
  record.timestamp = 51'000;
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record));
  record = MemoryRecord(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x2000, 64, 2);
  record.timestamp = 49'500;
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record));
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 2);
  EXPECT_EQ(batch.events(0).timestamp_ns(), 9'004'000u);
  EXPECT_EQ(batch.events(1).timestamp_ns(), 8'998'000u);  // before the origin too
}

TEST_F(TranslatorTest, MemoryPoolRecord) {
  CUpti_ActivityMemoryPool3 pool;
  memset(&pool, 0, sizeof(pool));
  pool.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  pool.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED;
  pool.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  pool.address = 0x55;
  pool.size = 1 << 30;
  pool.utilizedSize = 1 << 20;
  pool.deviceId = 2;
  pool.timestamp = 10;
  translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&pool));
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 1);
  const v1::MemoryPoolOp& op = batch.events(0).memory_pool();
  EXPECT_EQ(op.operation(), v1::MEMORY_POOL_OPERATION_TRIMMED);
  EXPECT_EQ(op.size(), 1u << 30);
  EXPECT_EQ(op.utilized_size(), 1u << 20);
  EXPECT_EQ(op.device(), 2u);
}

TEST_F(TranslatorTest, UnrequestedActivityKindIsRefused) {
  CUpti_ActivityKernel10 record;
  memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  EXPECT_FALSE(translator_.AddActivity(reinterpret_cast<CUpti_Activity*>(&record)));
  EXPECT_EQ(encoder_.pending_events(), 0u);
}

TEST_F(TranslatorTest, FailedAllocationNamesApiAndError) {
  HostRecord failed;
  failed.type = HostRecord::Type::kFailedAllocation;
  failed.api = ApiRow("cuMemAlloc");
  failed.timestamp_ns = 99;
  failed.thread_id = 5;
  failed.error_code = 2;
  failed.bytes = 1ull << 40;
  failed.device = 0;
  failed.device_free_bytes = 100;
  failed.device_total_bytes = 200;
  translator_.AddHostRecord(failed);
  const v1::EventBatch batch = Flush();
  const v1::Event& last = batch.events(batch.events_size() - 1);
  ASSERT_TRUE(last.has_failed_allocation());
  const v1::FailedAllocation& f = last.failed_allocation();
  EXPECT_EQ(strings_[f.api_name_id()], "cuMemAlloc");
  EXPECT_EQ(strings_[f.error_name_id()], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(f.requested_bytes(), 1ull << 40);
  EXPECT_EQ(f.kind(), v1::MEMORY_KIND_DEVICE);
  EXPECT_EQ(f.device_free_bytes(), 100u);
  EXPECT_EQ(f.device_total_bytes(), 200u);
}

TEST_F(TranslatorTest, NvtxStringsAreDefinedBeforeTheEventThatUsesThem) {
  NvtxDomain domain{"ep"};
  HostRecord push;
  push.type = HostRecord::Type::kNvtx;
  push.nvtx_operation = v1::NVTX_OPERATION_PUSH;
  push.domain = &domain;
  push.text = "settling";
  push.thread_id = 1;
  translator_.AddHostRecord(push);
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 3);
  EXPECT_TRUE(batch.events(0).has_interned_string());
  EXPECT_TRUE(batch.events(1).has_interned_string());
  ASSERT_TRUE(batch.events(2).has_nvtx());
  EXPECT_EQ(strings_[batch.events(2).nvtx().domain_id()], "ep");
  EXPECT_EQ(strings_[batch.events(2).nvtx().message_id()], "settling");
}

TEST_F(TranslatorTest, TorchAllocatorEventsAndTheBridgeStateReachTheWire) {
  auto* state = new v1::TorchBridgeState();
  state->set_attached(true);
  state->set_torch_version("2.11.0+cu130");
  HostRecord bridge;
  bridge.type = HostRecord::Type::kTorchBridgeState;
  bridge.timestamp_ns = 10;
  bridge.torch_bridge_state = state;
  translator_.AddHostRecord(bridge);
  HostRecord alloc;
  alloc.type = HostRecord::Type::kTorchAllocator;
  alloc.timestamp_ns = 20;
  alloc.thread_id = 77;
  alloc.device = 1;
  alloc.address = 0x7f0000000200;
  alloc.bytes = 1000;
  alloc.torch.action = v1::TORCH_ALLOCATOR_ACTION_ALLOC;
  alloc.torch.stream = 0xabc;
  alloc.torch.sequence = 5;
  alloc.torch.allocated_total = 4096;
  alloc.torch.allocated_current = 2048;
  alloc.torch.reserved_current = 2097152;
  alloc.torch.pool_first = 3;
  translator_.AddHostRecord(alloc);
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 2);
  ASSERT_TRUE(batch.events(0).has_torch_bridge());
  EXPECT_TRUE(batch.events(0).torch_bridge().attached());
  EXPECT_EQ(batch.events(0).torch_bridge().torch_version(), "2.11.0+cu130");
  const v1::TorchAllocatorEvent& torch = batch.events(1).torch_allocator();
  EXPECT_EQ(batch.events(1).timestamp_ns(), 20u);
  EXPECT_EQ(torch.action(), v1::TORCH_ALLOCATOR_ACTION_ALLOC);
  EXPECT_EQ(torch.device(), 1u);
  EXPECT_EQ(torch.address(), 0x7f0000000200u);
  EXPECT_EQ(torch.requested_bytes(), 1000u);
  EXPECT_EQ(torch.stream(), 0xabcu);
  EXPECT_EQ(torch.thread_id(), 77u);
  EXPECT_EQ(torch.sequence(), 5u);
  EXPECT_EQ(torch.allocated_bytes_total(), 4096u);
  EXPECT_EQ(torch.allocated_bytes_current(), 2048u);
  EXPECT_EQ(torch.reserved_bytes_current(), 2097152u);
  EXPECT_EQ(torch.pool_id_first(), 3u);
}

// A ring record of action AUTOGRAD_NODE is its own event on the wire, which a reader that does
// not know it skips, never a TorchAllocatorEvent (an older reader would count it as one).
TEST_F(TranslatorTest, AnAutogradNodeReachesTheWireAsItsOwnEvent) {
  HostRecord node;
  node.type = HostRecord::Type::kTorchAllocator;
  node.timestamp_ns = 30;
  node.thread_id = 77;
  node.torch.action = v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE;
  node.torch.module = 4;
  node.torch.op = 5;
  node.torch.inner_op = 6;
  node.torch.autograd_sequence = 42;
  node.torch.autograd_thread = 3;
  translator_.AddHostRecord(node);
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 1);
  EXPECT_FALSE(batch.events(0).has_torch_allocator());
  ASSERT_TRUE(batch.events(0).has_torch_autograd_node());
  const v1::TorchAutogradNode& n = batch.events(0).torch_autograd_node();
  EXPECT_EQ(batch.events(0).timestamp_ns(), 30u);
  EXPECT_EQ(n.thread_id(), 77u);
  EXPECT_EQ(n.module_id(), 4u);
  EXPECT_EQ(n.operator_id(), 5u);
  EXPECT_EQ(n.inner_operator_id(), 6u);
  EXPECT_EQ(n.autograd_sequence(), 42u);
  EXPECT_EQ(n.autograd_thread(), 3u);
  EXPECT_EQ(n.stack_id(), 0u);
}

TEST_F(TranslatorTest, TensorCategoriesReachTheWireAsTheyWereNamed) {
  HostRecord tag;
  tag.type = HostRecord::Type::kTensorCategory;
  tag.timestamp_ns = 30;
  tag.thread_id = 5;
  tag.device = 2;
  tag.address = 0x7f0000400000;
  tag.bytes = 4096;
  tag.category = v1::CATEGORY_OPTIMIZER_STATE;
  translator_.AddHostRecord(tag);
  const v1::EventBatch batch = Flush();
  ASSERT_EQ(batch.events_size(), 1);
  ASSERT_TRUE(batch.events(0).has_tensor_category());
  const v1::TensorCategory& named = batch.events(0).tensor_category();
  EXPECT_EQ(batch.events(0).timestamp_ns(), 30u);
  EXPECT_EQ(named.device(), 2u);
  EXPECT_EQ(named.address(), 0x7f0000400000u);
  EXPECT_EQ(named.bytes(), 4096u);
  EXPECT_EQ(named.category(), v1::CATEGORY_OPTIMIZER_STATE);
}

}  // namespace
}  // namespace cumemtrace::tracer
