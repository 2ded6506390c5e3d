// The bridge's handling of trace entries, driven with fabricated entries shaped like torch's
// TraceEntry (the same template code the shim instantiates with the real type).
#include "tracer/sources/torch_bridge/bridge_core.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tracer/sources/torch_bridge/op_context.h"
#include "tracer/sources/torch_bridge/tests/fabricated_entry.h"

namespace cumemtrace::torch_bridge {
namespace {

int Collect(const cumemtrace_torch_event* event, void* context) {
  static_cast<std::vector<cumemtrace_torch_event>*>(context)->push_back(*event);
  return 1;
}

// Counters of a fake device 0 and 1, as the allocator would report them.
struct Counters {
  DeviceCounters device[2];
  std::function<void()> during_read;  // runs inside a read (an event slipping in)
};

struct Reader {
  Counters* counters;
  bool operator()(uint32_t device, DeviceCounters* out) const {
    if (device > 1) return false;
    if (counters->during_read) {
      auto hook = std::move(counters->during_read);
      counters->during_read = nullptr;
      hook();
    }
    *out = counters->device[device];
    return true;
  }
};

TEST(TorchBridgeConvert, MapsEveryActionAndTheEntryFields) {
  const std::pair<FabricatedEntry::Action, uint32_t> cases[] = {
      {FabricatedEntry::ALLOC, CUMEMTRACE_TORCH_ALLOC},
      {FabricatedEntry::FREE_REQUESTED, CUMEMTRACE_TORCH_FREE_REQUESTED},
      {FabricatedEntry::FREE_COMPLETED, CUMEMTRACE_TORCH_FREE_COMPLETED},
      {FabricatedEntry::SEGMENT_ALLOC, CUMEMTRACE_TORCH_SEGMENT_ALLOC},
      {FabricatedEntry::SEGMENT_FREE, CUMEMTRACE_TORCH_SEGMENT_FREE},
      {FabricatedEntry::SEGMENT_MAP, CUMEMTRACE_TORCH_SEGMENT_MAP},
      {FabricatedEntry::SEGMENT_UNMAP, CUMEMTRACE_TORCH_SEGMENT_UNMAP},
      {FabricatedEntry::OOM, CUMEMTRACE_TORCH_OOM},
  };
  for (const auto& [action, expected] : cases) {
    FabricatedEntry entry = Entry(action, 3, 0x7f0000001000, 1000);
    entry.mempool_ = {7, 9};
    cumemtrace_torch_event event{};
    ASSERT_TRUE(ConvertEntry(entry, &event));
    EXPECT_EQ(event.action, expected);
    EXPECT_EQ(event.device, 3u);
    EXPECT_EQ(event.address, 0x7f0000001000u);
    EXPECT_EQ(event.requested_bytes, 1000u);
    EXPECT_EQ(event.stream, 0x5000u);
    EXPECT_EQ(event.pool_id_first, 7u);
    EXPECT_EQ(event.pool_id_second, 9u);
  }
}

// Only an allocation is born inside an operator: frees and segments name none.
TEST(TorchBridgeCore, AsksForOperatorsForAllocationsOnly) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  auto ops = [](cumemtrace_torch_event* alloc) { alloc->op = 42; };
  BridgeCore<Reader, false, NoRoundedBlocks, decltype(ops)> core(Collect, &events,
                                                                 Reader{&counters}, {}, ops);
  core.OnEntry(Entry(FabricatedEntry::SEGMENT_ALLOC, 0, 0x1000, 4096));
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 512));
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 512));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].op, 0u);
  EXPECT_EQ(events[1].op, 42u);
  EXPECT_EQ(events[2].op, 0u);
}

TEST(TorchBridgeConvert, SkipsSnapshotsUnknownActionsAndBadDevices) {
  cumemtrace_torch_event event{};
  EXPECT_FALSE(ConvertEntry(Entry(FabricatedEntry::SNAPSHOT, 0, 0, 0), &event));
  FabricatedEntry later = Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1);
  later.action_ = static_cast<FabricatedEntry::Action>(42);  // an action a later torch added
  EXPECT_FALSE(ConvertEntry(later, &event));
  EXPECT_FALSE(ConvertEntry(Entry(FabricatedEntry::ALLOC, -1, 0x1000, 1), &event));
}

// Where torch times its entries with the TSC, each event carries that time for the tracer
// to map; otherwise none, and the tracer reads its own clock. Probes have no entry: none.
TEST(TorchBridgeCore, CarriesTorchsTscTimeOnlyWhereItIsTheTsc) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader, /*kTimeIsTsc=*/true> tsc_core(Collect, &events, Reader{&counters});
  tsc_core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000, /*tsc=*/123456789));
  tsc_core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 1000, 123456999));
  tsc_core.Probe();
  BridgeCore<Reader> clock_core(Collect, &events, Reader{&counters});
  clock_core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x2000, 1000, 123457000));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].tsc, 123456789u);
  EXPECT_EQ(events[1].tsc, 123456999u);
  EXPECT_EQ(events[2].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[2].tsc, 0u);
  EXPECT_EQ(events[3].tsc, 0u);
  // An entry type without torch's time field (an older torch): none either.
  struct Plain {
    int action_;
  };
  EXPECT_FALSE((HasApproximateTime<Plain>::value));
  EXPECT_TRUE((HasApproximateTime<FabricatedEntry>::value));
}

TEST(TorchBridgeCore, NumbersEventsPerDeviceAndCarriesTheCounters) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  counters.device[0] = {4096, 2048, 20971520};
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000));
  counters.device[0] = {5120, 3072, 20971520};  // the ALLOC's block was 1024 bytes
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 1, 0x9000, 10));
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 1000));
  core.OnEntry(Entry(FabricatedEntry::SNAPSHOT, 0, 0, 0));  // not sent, not numbered
  core.OnEntry(Entry(FabricatedEntry::FREE_COMPLETED, 0, 0x1000, 1000));  // not sent
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].sequence, 1u);
  EXPECT_EQ(events[0].allocated_bytes_total, 4096u);
  EXPECT_EQ(events[0].allocated_bytes_current, 2048u);
  EXPECT_EQ(events[0].reserved_bytes_current, 20971520u);
  EXPECT_EQ(events[1].device, 1u);
  EXPECT_EQ(events[1].sequence, 1u);
  EXPECT_EQ(events[2].sequence, 2u);
  // A free reads no counters: frees never move the cumulative one.
  EXPECT_EQ(events[2].allocated_bytes_total, 0u);
  EXPECT_EQ(events[2].allocated_bytes_current, 0u);
  EXPECT_EQ(events[2].reserved_bytes_current, 0u);
  // Numbered right after the FREE_REQUESTED: no gap, so no event counts as lost.
  EXPECT_EQ(events[3].sequence, 3u);
  EXPECT_EQ(events[3].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC));
  // The block size the collector derives: the next counted event's total minus the ALLOC's.
  EXPECT_EQ(events[3].allocated_bytes_total - events[0].allocated_bytes_total, 1024u);
}

TEST(TorchBridgeCore, AnAllocationFollowedOnlyByFreesIsSettledByTheProbe) {
  // Frees (a completed one, late, from its stream's events; then requested ones) after an
  // ALLOC carry no counters: the probe reads them, with the sequence of the last free.
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  counters.device[0] = {4096, 2048, 20971520};
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000));
  counters.device[0] = {5120, 3072, 20971520};
  core.OnEntry(Entry(FabricatedEntry::FREE_COMPLETED, 0, 0x8000, 512));
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 1000));
  counters.device[0] = {5120, 2048, 20971520};
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x2000, 1000));
  core.Probe();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].allocated_bytes_total, 0u);
  EXPECT_EQ(events[3].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[3].sequence, 3u);
  EXPECT_EQ(events[3].allocated_bytes_total - events[0].allocated_bytes_total, 1024u);
  core.Probe();  // that ALLOC is settled: nothing more
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x3000, 1000));
  core.Probe();  // a free alone settles nothing
  EXPECT_EQ(events.size(), 5u);
  // An event with counters after an ALLOC settles it: no probe is needed.
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000));
  core.OnEntry(Entry(FabricatedEntry::SEGMENT_ALLOC, 0, 0x9000000, 2097152));
  core.Probe();
  EXPECT_EQ(events.size(), 7u);
  EXPECT_EQ(events[6].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_SEGMENT_ALLOC));
  EXPECT_EQ(events[6].allocated_bytes_total, 5120u);
}

TEST(TorchBridgeCore, ProbesOnlyATrailingAllocationAndOnlyOnce) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  core.Probe();  // nothing happened yet
  EXPECT_TRUE(events.empty());
  counters.device[0] = {0, 0, 2097152};
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 100));
  counters.device[0] = {512, 512, 2097152};
  core.Probe();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[1].device, 0u);
  EXPECT_EQ(events[1].sequence, 1u);
  EXPECT_EQ(events[1].allocated_bytes_total, 512u);
  core.Probe();  // already settled
  EXPECT_EQ(events.size(), 2u);
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 100));
  core.Probe();  // only a free since the settled ALLOC: nothing to settle
  EXPECT_EQ(events.size(), 3u);
}

TEST(TorchBridgeCore, DropsAProbeWhenAnEventSlipsInDuringTheRead) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 100));
  counters.device[0] = {512, 512, 0};
  // The counters read by the probe already include a later allocation: they would give the
  // first one the wrong size, so the probe must not be sent.
  counters.during_read = [&] {
    counters.device[0] = {512, 512, 0};
    core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x2000, 100));
    counters.device[0] = {1024, 1024, 0};
  };
  core.Probe();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC));
  core.Probe();  // now the second one is trailing and settled
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[2].sequence, 2u);
  EXPECT_EQ(events[2].allocated_bytes_total, 1024u);
}

// A probe the tracer had no room for (its ring full) is read and sent again at the next
// call; one it took is not.
TEST(TorchBridgeCore, SendsAProbeAgainWhenTheTracerHadNoRoomForIt) {
  struct Sink {
    std::vector<cumemtrace_torch_event> events;
    int refusals = 0;  // probes to refuse
  } sink;
  auto emit = [](const cumemtrace_torch_event* event, void* context) {
    auto* s = static_cast<Sink*>(context);
    if (event->action == CUMEMTRACE_TORCH_STATS_PROBE && s->refusals > 0) {
      --s->refusals;
      return 0;
    }
    s->events.push_back(*event);
    return 1;
  };
  Counters counters;
  BridgeCore<Reader> core(emit, &sink, Reader{&counters});
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 100));
  counters.device[0] = {512, 512, 2097152};
  sink.refusals = 2;
  core.Probe();
  core.Probe();
  ASSERT_EQ(sink.events.size(), 1u);  // the ALLOC; both probes refused
  // Read again, not kept: the probe that goes out carries the counters of its own call.
  counters.device[0] = {512, 512, 4194304};
  core.Probe();
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[1].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(sink.events[1].sequence, 1u);
  EXPECT_EQ(sink.events[1].reserved_bytes_current, 4194304u);
  core.Probe();  // taken: not sent again
  EXPECT_EQ(sink.events.size(), 2u);
}

// torch's round_size for the small pool: 512-byte steps up to 1 MiB, unless the divisions
// of roundup_power2_divisions apply to the size (above 512 bytes times the divisions).
TEST(TorchBridgeRounding, KnowsOnlySmallPoolBlocksThatAre512ByteSteps) {
  EXPECT_EQ(RoundedSmallBlock(1, 0), 512u);
  EXPECT_EQ(RoundedSmallBlock(1000, 0), 1024u);
  EXPECT_EQ(RoundedSmallBlock(1024, 1), 1024u);  // 1 division is no division
  EXPECT_EQ(RoundedSmallBlock(1u << 20, 0), 1u << 20);
  EXPECT_EQ(RoundedSmallBlock((1u << 20) + 1, 0), 0u);  // the large pool: split or not
  EXPECT_EQ(RoundedSmallBlock(2048, 4), 2048u);
  EXPECT_EQ(RoundedSmallBlock(4200, 4), 0u);  // torch: 5120 (quarters of 4096), not 4608
  EXPECT_EQ(RoundedSmallBlock(2049, 4), 0u);  // torch: 2560, as 512-byte steps; not relied on
  EXPECT_EQ(RoundedSmallBlock(0, 0), 0u);     // no tensor allocates nothing
}

// A rounded ALLOC reads no counters and carries none; the next counted event includes its
// block, and a probe follows it as it follows a counted ALLOC, to check it.
TEST(TorchBridgeCore, ARoundedAllocationReadsNoCountersAndIsProbed) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  int reads = 0;
  auto read = [&](uint32_t device, DeviceCounters* out) {
    ++reads;
    return Reader{&counters}(device, out);
  };
  auto small = [](uint64_t requested) { return RoundedSmallBlock(requested, 0); };
  BridgeCore<decltype(read), false, decltype(small)> core(Collect, &events, read, small);
  counters.device[0] = {4096, 2048, 20971520};
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 1000));
  EXPECT_EQ(reads, 0);
  counters.device[0] = {5120, 3072, 20971520};
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x200000, 3u << 20));  // counted
  EXPECT_EQ(reads, 1);
  counters.device[0] = {5120 + (3u << 20), 3072 + (3u << 20), 20971520};
  core.Probe();
  EXPECT_EQ(reads, 2);
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1400, 100));  // rounded: probed again
  counters.device[0] = {5632 + (3u << 20), 3584 + (3u << 20), 20971520};
  core.Probe();
  core.Probe();  // nothing since
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC_ROUNDED));
  EXPECT_EQ(events[0].requested_bytes, 1000u);
  EXPECT_EQ(events[0].allocated_bytes_total, 0u);
  EXPECT_EQ(events[0].allocated_bytes_current, 0u);
  EXPECT_EQ(events[1].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC));
  EXPECT_EQ(events[1].allocated_bytes_total, 5120u);
  EXPECT_EQ(events[2].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[2].sequence, 2u);
  EXPECT_EQ(events[3].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC_ROUNDED));
  EXPECT_EQ(events[3].sequence, 3u);
  EXPECT_EQ(events[4].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[4].sequence, 3u);
  EXPECT_EQ(events[4].allocated_bytes_current, 3584u + (3u << 20));
}

// An autograd node (op_context.h) comes from RecordFunction's end callback, outside the
// allocator's lock: it takes no device's number and the trailing ALLOC is still probed.
TEST(TorchBridgeCore, AnAutogradNodeTakesNoSequenceAndLeavesTheProbeAlone) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 100));
  cumemtrace_torch_event node{};
  node.action = CUMEMTRACE_TORCH_AUTOGRAD_NODE;
  node.op = 4;
  node.autograd_sequence = 9;
  node.autograd_thread = 3;
  core.EmitOther(node);
  counters.device[0].allocated_total = 512;
  core.Probe();
  core.OnEntry(Entry(FabricatedEntry::FREE_REQUESTED, 0, 0x1000, 100));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_AUTOGRAD_NODE));
  EXPECT_EQ(events[1].sequence, 0u);
  EXPECT_EQ(events[1].autograd_sequence, 9u);
  EXPECT_EQ(events[2].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_STATS_PROBE));
  EXPECT_EQ(events[2].sequence, 1u);
  EXPECT_EQ(events[2].allocated_bytes_total, 512u);
  EXPECT_EQ(events[3].sequence, 2u);
  core.Stop();
  core.EmitOther(node);
  EXPECT_EQ(events.size(), 4u);
}

TEST(TorchBridgeCore, StopsEmitting) {
  std::vector<cumemtrace_torch_event> events;
  Counters counters;
  BridgeCore<Reader> core(Collect, &events, Reader{&counters});
  core.Stop();
  core.OnEntry(Entry(FabricatedEntry::ALLOC, 0, 0x1000, 100));
  core.Probe();
  EXPECT_TRUE(events.empty());
}

}  // namespace
}  // namespace cumemtrace::torch_bridge

// ---------------------------------------------------------------------------
// The operators a thread runs (op_context.h), as the shim's RecordFunction callbacks push them.

namespace op_context_test {

using cumemtrace::torch_bridge::AutogradNode;
using cumemtrace::torch_bridge::OpFrame;
using cumemtrace::torch_bridge::OpNames;
using cumemtrace::torch_bridge::OpStack;

OpFrame Frame(uint32_t op, uint64_t sequence = 0, uint32_t thread = 0, bool backward = false) {
  OpFrame frame;
  frame.op = op;
  frame.sequence = sequence;
  frame.thread = thread;
  frame.backward = backward;
  return frame;
}

TEST(OpStack, AForwardAllocationNamesTheCalledOpTheRunningOneAndTheNodeItRecorded) {
  OpStack stack;
  cumemtrace_torch_event none{};
  stack.Fill(&none);
  EXPECT_EQ(none.op, 0u);
  EXPECT_EQ(none.autograd_sequence, 0u);
  // aten::linear (1) calls aten::t (2, node 5), then aten::addmm (3, node 6) allocates.
  stack.Enter(Frame(1, 0, 7));
  stack.Enter(Frame(2, 5, 7));
  stack.Exit();
  stack.Enter(Frame(3, 6, 7));
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  EXPECT_EQ(alloc.op, 1u);
  EXPECT_EQ(alloc.inner_op, 3u);
  EXPECT_EQ(alloc.autograd_sequence, 6u);
  EXPECT_EQ(alloc.autograd_thread, 7u);
  stack.Exit();
  stack.Exit();
  EXPECT_EQ(stack.depth(), 0u);
  // An op alone is its own outermost: no inner op.
  stack.Enter(Frame(4));
  cumemtrace_torch_event alone{};
  stack.Fill(&alone);
  EXPECT_EQ(alone.op, 4u);
  EXPECT_EQ(alone.inner_op, 0u);
  EXPECT_EQ(alone.autograd_sequence, 0u);
}

TEST(OpStack, ABackwardAllocationNamesItsNodeAndTheForwardsSequence) {
  OpStack stack;
  // AddmmBackward0 (8) for the forward's node 6 on forward thread 7 runs aten::mm (9), whose
  // own sequence (grad mode is off in backward) is none.
  stack.Enter(Frame(8, 6, 7, true));
  stack.Enter(Frame(9, 0, 2));
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  EXPECT_EQ(alloc.op, 8u);
  EXPECT_EQ(alloc.inner_op, 9u);
  EXPECT_EQ(alloc.autograd_sequence, 6u | CUMEMTRACE_TORCH_BACKWARD_BIT);
  EXPECT_EQ(alloc.autograd_thread, 7u);
  // Even when an op inside the node records a node of its own (create_graph).
  stack.Enter(Frame(10, 40, 2));
  cumemtrace_torch_event nested{};
  stack.Fill(&nested);
  EXPECT_EQ(nested.autograd_sequence, 6u | CUMEMTRACE_TORCH_BACKWARD_BIT);
}

// Autograd's engine wraps each node in a RecordFunction of FUNCTION scope with the node's
// sequence: the node itself is what a backward allocation names.
TEST(OpStack, InBackwardTheNodeIsNamedNotTheEnginesWrapper) {
  OpStack stack;
  stack.Enter(Frame(11, 6, 2));       // autograd::engine::evaluate_function: MmBackward0
  stack.Enter(Frame(8, 6, 7, true));  // MmBackward0
  stack.Enter(Frame(9, 0, 2));        // aten::mm
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  EXPECT_EQ(alloc.op, 8u);
  EXPECT_EQ(alloc.inner_op, 9u);
  EXPECT_EQ(alloc.autograd_sequence, 6u | CUMEMTRACE_TORCH_BACKWARD_BIT);
  stack.Exit();
  cumemtrace_torch_event node{};
  stack.Fill(&node);
  EXPECT_EQ(node.op, 8u);
  EXPECT_EQ(node.inner_op, 0u);
}

// Ops that record nodes inside a backward node (create_graph, or a reentrant checkpoint's
// forward run again in backward) name that node as their outermost op, as their ALLOCs do.
TEST(OpStack, ANodeRecordedInBackwardNamesTheBackwardNodeNotTheEnginesWrapper) {
  OpStack stack;
  stack.Enter(Frame(11, 0, 2));       // autograd::engine::evaluate_function: CheckpointBackward
  stack.Enter(Frame(8, 6, 7, true));  // CheckpointBackward, node 6 of forward thread 7
  stack.Enter(Frame(12, 40, 2));      // aten::view run again, node 40 of thread 2
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  AutogradNode node;
  ASSERT_TRUE(stack.Exit(41, &node));
  EXPECT_EQ(node.op, alloc.op);
  EXPECT_EQ(node.op, 8u);
  EXPECT_EQ(node.inner_op, 12u);
  EXPECT_EQ(node.sequence, 40u);
  EXPECT_EQ(node.thread, 2u);
}

// In grad mode every op on CUDA tensors gets autograd's next number as its sequence, whether
// it records a node or not: an ALLOC of one that did not (`x > 0`) must not carry the number
// of the node the next op records, or that op's backward would name it.
TEST(OpStack, AnAllocationOfAnOpThatRecordedNoNodeCarriesNoSequence) {
  OpStack stack;
  // aten::gt (1), sequence 5: autograd's next number is still 4 (5 less the sent 1).
  stack.Enter(Frame(1, 5, 7));
  stack.Enter(Frame(2, 0, 7));  // aten::empty inside it
  cumemtrace_torch_event mask{};
  stack.FillWith([] { return uint64_t{4}; }, &mask);
  EXPECT_EQ(mask.op, 1u);
  EXPECT_EQ(mask.inner_op, 2u);
  EXPECT_EQ(mask.autograd_sequence, 0u);
  EXPECT_EQ(mask.autograd_thread, 0u);
  stack.Exit();
  AutogradNode node;
  EXPECT_FALSE(stack.Exit(4, &node));
  // aten::mul (3), sequence 5, records node 5 (next is then 5) before it allocates; so does a
  // view after it (4, node 6), which allocates nothing and is said as its node.
  stack.Enter(Frame(3, 5, 7));
  cumemtrace_torch_event product{};
  stack.FillWith([] { return uint64_t{5}; }, &product);
  EXPECT_EQ(product.autograd_sequence, 5u);
  EXPECT_EQ(product.autograd_thread, 7u);
  EXPECT_FALSE(stack.Exit(5, &node));
  stack.Enter(Frame(4, 6, 7));
  ASSERT_TRUE(stack.Exit(6, &node));
  EXPECT_EQ(node.sequence, 6u);
  // Without autograd's counter, the op's sequence as before.
  stack.Enter(Frame(1, 7, 7));
  cumemtrace_torch_event unknown{};
  stack.Fill(&unknown);
  EXPECT_EQ(unknown.autograd_sequence, 7u);
}

TEST(OpStack, FramesDeeperThanItKeepsAreCountedAndAnUnmatchedEndIsIgnored) {
  OpStack stack;
  stack.Exit();  // an async op's end on another thread
  EXPECT_EQ(stack.depth(), 0u);
  for (uint32_t i = 1; i <= OpStack::kDepth + 8; ++i) stack.Enter(Frame(i));
  cumemtrace_torch_event deep{};
  stack.Fill(&deep);
  EXPECT_EQ(deep.op, 1u);
  EXPECT_EQ(deep.inner_op, OpStack::kDepth);
  for (int i = 0; i < 8; ++i) stack.Exit();
  cumemtrace_torch_event back{};
  stack.Fill(&back);
  EXPECT_EQ(back.inner_op, OpStack::kDepth);
  stack.Exit();
  cumemtrace_torch_event shallower{};
  stack.Fill(&shallower);
  EXPECT_EQ(shallower.inner_op, OpStack::kDepth - 1);
}

// What ends without an ALLOC naming its node is said as an autograd node, with the operators
// an ALLOC there would have named; what allocated, or recorded no node, is not.
TEST(OpStack, AForwardOpThatAllocatedNothingIsSaidAsItsNodeWhenItEnds) {
  OpStack stack;
  AutogradNode node;
  // aten::linear (1, sequence 5) calls aten::t (2), which records node 5 and allocates
  // nothing (autograd's next number is then 6), then aten::addmm (3), which records node 6
  // and allocates.
  stack.Enter(Frame(1, 5, 7));
  stack.Enter(Frame(2, 5, 7));
  ASSERT_TRUE(stack.Exit(6, &node));
  EXPECT_EQ(node.op, 1u);
  EXPECT_EQ(node.inner_op, 2u);
  EXPECT_EQ(node.sequence, 5u);
  EXPECT_EQ(node.thread, 7u);
  stack.Enter(Frame(3, 6, 7));
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  EXPECT_EQ(alloc.autograd_sequence, 6u);
  EXPECT_FALSE(stack.Exit(7, &node));  // its ALLOC names node 6
  EXPECT_FALSE(stack.Exit(7, &node));  // linear's node 5 was aten::t's, said already
  EXPECT_EQ(stack.depth(), 0u);
  // A view called by the program (8, sequence 7): its own outermost op.
  stack.Enter(Frame(8, 7, 7));
  ASSERT_TRUE(stack.Exit(8, &node));
  EXPECT_EQ(node.op, 8u);
  EXPECT_EQ(node.inner_op, 0u);
  EXPECT_EQ(node.sequence, 7u);
}

TEST(OpStack, AnOpAroundAnAllocatingOneWithTheSameSequenceIsNoNode) {
  OpStack stack;
  AutogradNode node;
  // aten::linear (1) around aten::addmm (3), both sequence 6; addmm allocates.
  stack.Enter(Frame(1, 6, 7));
  stack.Enter(Frame(3, 6, 7));
  cumemtrace_torch_event alloc{};
  stack.Fill(&alloc);
  EXPECT_FALSE(stack.Exit(7, &node));
  EXPECT_FALSE(stack.Exit(7, &node));
  // aten::reshape (4) around aten::view (5), sequence 8, nothing allocated: one node, the
  // view's, named as an ALLOC inside it would be.
  stack.Enter(Frame(4, 8, 7));
  stack.Enter(Frame(5, 8, 7));
  ASSERT_TRUE(stack.Exit(9, &node));
  EXPECT_EQ(node.op, 4u);
  EXPECT_EQ(node.inner_op, 5u);
  EXPECT_FALSE(stack.Exit(9, &node));
}

TEST(OpStack, NoNodeWithoutOneRecordedInBackwardWithoutASequenceOrTooDeep) {
  OpStack stack;
  AutogradNode node;
  // No node recorded (no_grad, or an op autograd does not differentiate): autograd's next
  // number did not pass the op's, which the next op shares.
  stack.Enter(Frame(1, 5, 7));
  EXPECT_FALSE(stack.Exit(4, &node));
  stack.Enter(Frame(1, 5, 7));
  EXPECT_FALSE(stack.Exit(0, &node));  // unknown
  // Backward nodes and ops without a sequence, even when autograd's number moved.
  stack.Enter(Frame(8, 6, 7, true));
  stack.Enter(Frame(9, 0, 2));
  EXPECT_FALSE(stack.Exit(50, &node));
  EXPECT_FALSE(stack.Exit(50, &node));
  EXPECT_FALSE(stack.Exit(50, &node));  // unmatched: ignored
  // Autograd's engine wraps a node in a frame of its sequence, of FUNCTION scope, on a thread
  // whose counter may be past it (a CPU node runs on the thread that called backward).
  stack.Enter(Frame(11, 6, 7));       // autograd::engine::evaluate_function: MmBackward0
  stack.Enter(Frame(8, 6, 7, true));  // MmBackward0
  EXPECT_FALSE(stack.Exit(50, &node));
  EXPECT_FALSE(stack.Exit(50, &node));
  // Deeper than kept: those frames are only counted; the kept ones still say theirs.
  for (uint32_t i = 1; i <= OpStack::kDepth + 4; ++i) stack.Enter(Frame(i, 100 + i, 7));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(stack.Exit(1000, &node));
  ASSERT_TRUE(stack.Exit(1000, &node));
  EXPECT_EQ(node.op, 1u);
  EXPECT_EQ(node.inner_op, OpStack::kDepth);
  EXPECT_EQ(node.sequence, 100u + OpStack::kDepth);
  while (stack.depth() > 1) EXPECT_TRUE(stack.Exit(1000, &node));
  ASSERT_TRUE(stack.Exit(1000, &node));
  EXPECT_EQ(node.inner_op, 0u);
  EXPECT_EQ(node.sequence, 101u);
  EXPECT_EQ(stack.depth(), 0u);
}

struct Defined {
  std::vector<std::pair<uint32_t, std::string>> names;
};
void Define(uint32_t kind, uint32_t id, const char* name, void* context) {
  EXPECT_EQ(kind, static_cast<uint32_t>(CUMEMTRACE_TORCH_NAME_OPERATOR));
  static_cast<Defined*>(context)->names.emplace_back(id, name);
}

TEST(OpNames, ANameIsDefinedOnceWhateverItsPointerAndAReusedPointerIsCheckedByContent) {
  Defined defined;
  OpNames names(Define, &defined);
  OpNames::Cache cache;
  std::string backward = "MmBackward0";  // a node's name: a string of its RecordFunction
  const uint32_t mm = names.IdOf("aten::mm", &cache);
  EXPECT_EQ(names.IdOf(backward.c_str(), &cache), 2u);
  EXPECT_EQ(names.IdOf("aten::mm", &cache), mm);
  std::string copy = "aten::mm";
  EXPECT_EQ(names.IdOf(copy.c_str(), &cache), mm);
  // The same memory later holds another name: a new id, not the cached one.
  backward.assign("AddBackward0");
  EXPECT_EQ(names.IdOf(backward.c_str(), &cache), 3u);
  OpNames::Cache other_thread;
  EXPECT_EQ(names.IdOf("MmBackward0", &other_thread), 2u);
  EXPECT_EQ(names.IdOf(nullptr, &cache), 0u);
  ASSERT_EQ(defined.names.size(), 3u);
  EXPECT_EQ(defined.names[0], std::make_pair(1u, std::string("aten::mm")));
  EXPECT_EQ(defined.names[1], std::make_pair(2u, std::string("MmBackward0")));
  EXPECT_EQ(defined.names[2], std::make_pair(3u, std::string("AddBackward0")));
}

}  // namespace op_context_test
