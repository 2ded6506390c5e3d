// Tensors by module and operator (`run --modules`, `--ops`) on fabricated streams: the bytes at
// the tensor peak per module and operator are the live blocks' sums by the byte, a backward
// allocation names its forward operation through autograd's (thread, sequence) and takes its
// module, and ids that were never defined name nothing.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/engine/tests/attributed_trace.h"
#include "collector/engine/tests/trace_builder.h"

namespace cumemtrace {
namespace {

using testing::Analyze;
using testing::AttributedTrace;
using testing::Attribution;
using testing::FindDevice;
using testing::kMain;
using testing::kWorker;
using testing::StreamBuilder;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// Module and operator ids of the stream.
enum : uint32_t { kRoot = 1, kEncoder = 2, kFc1 = 3, kFc2 = 4, kHead = 5 };
enum : uint32_t { kLinear = 1, kAddmm = 2, kAddmmBackward = 3, kEmpty = 4 };

const ModuleBytes* FindModule(const DeviceAttribution& a, const std::string& path) {
  for (const ModuleBytes& m : a.modules) {
    if (m.module == path) return &m;
  }
  return nullptr;
}

const OperatorBytes* FindOp(const DeviceAttribution& a, const std::string& op) {
  for (const OperatorBytes& o : a.operators) {
    if (o.op == op) return &o;
  }
  return nullptr;
}

const LiveAllocation* FindLargest(const DeviceReport& d, uint64_t address) {
  for (const LiveAllocation& a : d.peak.largest) {
    if (a.address == address) return &a;
  }
  return nullptr;
}

// The training step of a small model: forward in encoder.fc1, encoder.fc2 and head, a block
// outside every module, then two backward blocks on autograd's worker thread, one of whose
// forward op is known.
AttributedTrace TrainingStep(bool names_first) {
  AttributedTrace t;
  auto names = [](AttributedTrace& trace) {
    trace.Module(kRoot, "<Net>").Module(kEncoder, "encoder").Module(kFc1, "encoder.fc1");
    trace.Module(kFc2, "encoder.fc2").Module(kHead, "head");
    trace.Op(kLinear, "aten::linear").Op(kAddmm, "aten::addmm");
    trace.Op(kAddmmBackward, "AddmmBackward0").Op(kEmpty, "aten::empty");
  };
  if (names_first) names(t);
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, kAddmm, 10, kMain, false});
  t.Alloc(0xa000, 6 * kMiB, {kFc1, kLinear, kAddmm, 10, kMain, false});  // a temporary
  t.Free(0xa000);
  t.Alloc(0x2000, 2 * kMiB, {kFc2, kLinear, kAddmm, 11, kMain, false});
  t.Alloc(0x3000, 4 * kMiB, {kHead, kEmpty, 0, 0, 0, false});
  t.Alloc(0x4000, 512 * kKiB, {kRoot, kEmpty, 0, 0, 0, false});
  t.Alloc(0x5000, 8 * kMiB, {});
  t.Flush();
  // Backward: node of sequence 11 (aten::linear in encoder.fc2) and one never seen forward.
  t.Alloc(0x6000, 1 * kMiB, {0, kAddmmBackward, 0, 11, kMain, true}, kWorker);
  t.Alloc(0x7000, 3 * kMiB, {0, kAddmmBackward, 0, 99, kMain, true}, kWorker);
  // After the peak: head's block goes, a small one comes.
  t.Free(0x3000);
  t.Alloc(0x9000, 64 * kKiB, {kEncoder, kEmpty, 0, 0, 0, false});
  if (!names_first) names(t);
  return t;
}

TEST(Attribution, ModulesAtTheTensorPeakAreTheLiveBlocksByTheByte) {
  std::unique_ptr<Report> report = TrainingStep(/*names_first=*/true).Analyze();
  ASSERT_EQ(report->processes.size(), 1u);
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const DeviceAttribution& a = d->attribution;
  ASSERT_TRUE(a.given);
  // Live at the peak (after the second backward block): everything but the temporary.
  const uint64_t fc1 = 1 * kMiB, fc2 = 2 * kMiB, head = 4 * kMiB, root = 512 * kKiB;
  const uint64_t none = 8 * kMiB, linked = 1 * kMiB, unlinked = 3 * kMiB;
  const uint64_t peak = fc1 + fc2 + head + root + none + linked + unlinked;
  EXPECT_EQ(a.tensor_peak_bytes, peak);
  EXPECT_EQ(d->torch.allocated_peak_bytes, peak);

  const ModuleBytes* m_fc1 = FindModule(a, "encoder.fc1");
  const ModuleBytes* m_fc2 = FindModule(a, "encoder.fc2");
  const ModuleBytes* m_encoder = FindModule(a, "encoder");
  const ModuleBytes* m_head = FindModule(a, "head");
  const ModuleBytes* m_root = FindModule(a, "<Net>");
  const ModuleBytes* m_none = FindModule(a, "");
  for (const ModuleBytes* m : {m_fc1, m_fc2, m_encoder, m_head, m_root, m_none}) {
    ASSERT_NE(m, nullptr);
  }
  EXPECT_EQ(m_fc1->self_bytes, fc1);
  // The linked backward block takes its forward op's module.
  EXPECT_EQ(m_fc2->self_bytes, fc2 + linked);
  EXPECT_EQ(m_encoder->self_bytes, 0u);
  EXPECT_EQ(m_encoder->bytes, fc1 + fc2 + linked);
  EXPECT_EQ(m_head->bytes, head);
  // The one root holds every module's bytes; the unlinked backward block has no module.
  EXPECT_EQ(m_root->self_bytes, root);
  EXPECT_EQ(m_root->bytes, root + fc1 + fc2 + linked + head);
  EXPECT_EQ(m_none->bytes, none + unlinked);
  EXPECT_EQ(m_encoder->count, 3u);
  uint64_t self_sum = 0;
  for (const ModuleBytes& m : a.modules) self_sum += m.self_bytes;
  EXPECT_EQ(self_sum, peak);

  // A tree: the root first, each child after its parent, one level deeper.
  EXPECT_EQ(a.modules.front().module, "<Net>");
  EXPECT_EQ(a.modules.front().depth, 0u);
  EXPECT_EQ(m_encoder->depth, 1u);
  EXPECT_EQ(m_fc1->depth, 2u);
  EXPECT_EQ(a.modules.back().module, "");
  auto index = [&](const ModuleBytes* m) { return m - a.modules.data(); };
  EXPECT_LT(index(m_encoder), index(m_fc1));
  EXPECT_LT(index(m_encoder), index(m_fc2));
  // Siblings by bytes at the peak: encoder and head hold 4 MiB each, so the own peak decides,
  // where encoder's temporary made it the higher.
  EXPECT_LT(index(m_encoder), index(m_head));

  // Over the run: encoder.fc1 held its block and the 6 MiB temporary together.
  EXPECT_EQ(m_fc1->own_peak_bytes, fc1 + 6 * kMiB);
  EXPECT_EQ(m_encoder->own_peak_bytes, fc1 + 6 * kMiB);
  EXPECT_EQ(m_head->own_peak_bytes, head);
  EXPECT_EQ(m_root->own_peak_bytes, root + fc1 + fc2 + linked + head);

  // By outer operator at the peak.
  const OperatorBytes* linear = FindOp(a, "aten::linear");
  const OperatorBytes* empty = FindOp(a, "aten::empty");
  const OperatorBytes* backward = FindOp(a, "AddmmBackward0");
  const OperatorBytes* no_op = FindOp(a, "");
  for (const OperatorBytes* o : {linear, empty, backward, no_op}) ASSERT_NE(o, nullptr);
  EXPECT_EQ(linear->bytes, fc1 + fc2);
  EXPECT_EQ(linear->count, 2u);
  EXPECT_EQ(empty->bytes, head + root);
  EXPECT_EQ(backward->bytes, linked + unlinked);
  EXPECT_EQ(no_op->bytes, none);
  EXPECT_EQ(FindOp(a, "aten::addmm"), nullptr);  // an inner op only
  EXPECT_EQ(a.operators.front().op, "");         // largest first
  uint64_t op_sum = 0;
  for (const OperatorBytes& o : a.operators) op_sum += o.bytes;
  EXPECT_EQ(op_sum, peak);

  // Backward blocks over the run, and the one whose forward op was never seen.
  EXPECT_EQ(a.backward_allocations, 2u);
  EXPECT_EQ(a.backward_bytes, linked + unlinked);
  EXPECT_EQ(a.unlinked_backward_allocations, 1u);
  EXPECT_EQ(a.unlinked_backward_bytes, unlinked);
}

TEST(Attribution, LargestBlocksNameWhereTheyWereBorn) {
  std::unique_ptr<Report> report = TrainingStep(/*names_first=*/true).Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const LiveAllocation* fc2 = FindLargest(*d, 0x2000);
  const LiveAllocation* linked = FindLargest(*d, 0x6000);
  const LiveAllocation* unlinked = FindLargest(*d, 0x7000);
  const LiveAllocation* none = FindLargest(*d, 0x5000);
  for (const LiveAllocation* l : {fc2, linked, unlinked, none}) ASSERT_NE(l, nullptr);
  EXPECT_EQ(fc2->module, "encoder.fc2");
  EXPECT_EQ(fc2->op, "aten::linear");
  EXPECT_EQ(fc2->inner_op, "aten::addmm");
  EXPECT_FALSE(fc2->backward);
  EXPECT_TRUE(linked->backward);
  EXPECT_TRUE(linked->linked);
  EXPECT_TRUE(linked->module_inherited);
  EXPECT_EQ(linked->module, "encoder.fc2");
  EXPECT_EQ(linked->op, "AddmmBackward0");
  EXPECT_EQ(linked->forward_op, "aten::linear");
  EXPECT_EQ(linked->forward_inner_op, "aten::addmm");
  EXPECT_TRUE(unlinked->backward);
  EXPECT_FALSE(unlinked->linked);
  EXPECT_EQ(unlinked->module, "");
  EXPECT_EQ(unlinked->forward_op, "");
  EXPECT_EQ(none->module, "");
  EXPECT_EQ(none->op, "");
}

// Definitions may come after their use (the ring and the per-thread buffers are read side by
// side): resolved once the stream is read, with the same figures.
TEST(Attribution, NamesDefinedAfterUseResolveTheSame) {
  std::unique_ptr<Report> first = TrainingStep(/*names_first=*/true).Analyze();
  std::unique_ptr<Report> later = TrainingStep(/*names_first=*/false).Analyze();
  const DeviceAttribution& a = FindDevice(first->processes[0], 0)->attribution;
  const DeviceAttribution& b = FindDevice(later->processes[0], 0)->attribution;
  ASSERT_EQ(a.operators.size(), b.operators.size());
  for (size_t i = 0; i < a.operators.size(); ++i) {
    EXPECT_EQ(a.operators[i].op, b.operators[i].op);
    EXPECT_EQ(a.operators[i].bytes, b.operators[i].bytes);
  }
  ASSERT_EQ(a.modules.size(), b.modules.size());
  for (size_t i = 0; i < a.modules.size(); ++i) {
    EXPECT_EQ(a.modules[i].module, b.modules[i].module);
    EXPECT_EQ(a.modules[i].bytes, b.modules[i].bytes);
    EXPECT_EQ(a.modules[i].self_bytes, b.modules[i].self_bytes);
  }
}

// A backward block's link needs the same autograd thread: the same sequence number of
// another thread is another node.
TEST(Attribution, BackwardLinkNeedsTheForwardThread) {
  AttributedTrace t;
  t.Module(kFc1, "fc1").Op(kLinear, "aten::linear").Op(kAddmmBackward, "AddmmBackward0");
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 5, kMain, false});
  t.Alloc(0x2000, 2 * kMiB, {0, kAddmmBackward, 0, 5, kWorker, true}, kWorker);
  t.Alloc(0x3000, 4 * kMiB, {0, kAddmmBackward, 0, 5, kMain, true}, kWorker);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->attribution.unlinked_backward_bytes, 2 * kMiB);
  EXPECT_EQ(d->attribution.backward_bytes, 6 * kMiB);
  EXPECT_FALSE(FindLargest(*d, 0x2000)->linked);
  EXPECT_TRUE(FindLargest(*d, 0x3000)->linked);
  EXPECT_EQ(FindModule(d->attribution, "fc1")->bytes, 1 * kMiB + 4 * kMiB);
}

// Two threads' events reach the collector in turn (each thread's buffer is drained whole):
// a backward block that arrives before its forward op's allocation is linked when it comes.
TEST(Attribution, ABackwardBlockArrivingFirstIsLinkedWhenItsForwardComes) {
  AttributedTrace t;
  t.Module(kFc1, "fc1").Op(kLinear, "aten::linear").Op(kAddmmBackward, "AddmmBackward0");
  t.Alloc(0x2000, 2 * kMiB, {0, kAddmmBackward, 0, 5, kMain, true}, kWorker);
  t.Alloc(0x3000, 4 * kMiB, {0, kAddmmBackward, 0, 9, kMain, true}, kWorker);  // never
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 5, kMain, false});
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const LiveAllocation* early = FindLargest(*d, 0x2000);
  ASSERT_NE(early, nullptr);
  EXPECT_TRUE(early->linked);
  EXPECT_EQ(early->module, "fc1");
  EXPECT_EQ(early->forward_op, "aten::linear");
  EXPECT_FALSE(FindLargest(*d, 0x3000)->linked);
  EXPECT_EQ(d->attribution.unlinked_backward_bytes, 4 * kMiB);
  EXPECT_EQ(FindModule(d->attribution, "fc1")->bytes, 1 * kMiB + 2 * kMiB);
}

// A view's forward op allocates nothing: its backward block is not linked, and takes the
// module of the thread's forward op just before it, said as a guess.
TEST(Attribution, AViewsBackwardTakesTheModuleOfTheForwardOpBeforeIt) {
  AttributedTrace t;
  t.Module(kFc1, "fc1").Module(kFc2, "fc2").Op(kLinear, "aten::linear");
  t.Op(kAddmmBackward, "ViewBackward0");
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 4, kMain, false});
  t.Alloc(0x2000, 1 * kMiB, {kFc2, kLinear, 0, 7, kMain, false});
  // Node 8 is fc2's view (no allocation); node 5 one of fc1's; node 2 has nothing before it.
  t.Alloc(0x3000, 2 * kMiB, {0, kAddmmBackward, 0, 8, kMain, true}, kWorker);
  t.Alloc(0x4000, 4 * kMiB, {0, kAddmmBackward, 0, 5, kMain, true}, kWorker);
  t.Alloc(0x5000, 8 * kMiB, {0, kAddmmBackward, 0, 2, kMain, true}, kWorker);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const LiveAllocation* view = FindLargest(*d, 0x3000);
  ASSERT_NE(view, nullptr);
  EXPECT_FALSE(view->linked);
  EXPECT_TRUE(view->module_from_earlier);
  EXPECT_EQ(view->module, "fc2");
  EXPECT_EQ(FindLargest(*d, 0x4000)->module, "fc1");
  EXPECT_EQ(FindLargest(*d, 0x5000)->module, "");
  EXPECT_FALSE(FindLargest(*d, 0x5000)->module_from_earlier);
  EXPECT_EQ(d->attribution.unlinked_backward_bytes, 14 * kMiB);
}

// A stack of one Python frame, `file`:`line`, with id `stack_id`.
void Line(AttributedTrace& t, uint32_t stack_id, const std::string& file, uint32_t line) {
  v1::Event e;
  e.mutable_interned_string()->set_id(90 + stack_id * 2);
  e.mutable_interned_string()->set_value("forward");
  t.Raw(e);
  e.mutable_interned_string()->set_id(91 + stack_id * 2);
  e.mutable_interned_string()->set_value(file);
  t.Raw(e);
  v1::Event frame;
  v1::StackFrame* f = frame.mutable_stack_frame();
  f->set_id(stack_id);
  f->set_kind(v1::STACK_FRAME_KIND_PYTHON);
  f->set_function_name_id(90 + stack_id * 2);
  f->set_file_name_id(91 + stack_id * 2);
  f->set_line(line);
  t.Raw(frame);
  v1::Event stack;
  stack.mutable_stack()->set_id(stack_id);
  stack.mutable_stack()->add_frame_ids(stack_id);
  t.Raw(stack);
}

// With its forward op said as an autograd node (it allocated nothing), a view's backward
// block names that op exactly, its module and its line, whether the node comes before the
// block or after it (the guess from the op before it then gives way).
TEST(Attribution, AViewsBackwardNamesTheNodeOfItsForwardOpWhicheverComesFirst) {
  enum : uint32_t { kView = 5, kReshape = 6 };
  AttributedTrace t;
  t.Module(kFc1, "fc1").Module(kFc2, "fc2").Op(kLinear, "aten::linear");
  t.Op(kAddmmBackward, "ViewBackward0").Op(kView, "aten::view").Op(kReshape, "aten::reshape");
  Line(t, 1, "model.py", 42);
  Line(t, 2, "model.py", 57);
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 4, kMain, false});
  t.Node({kFc1, kReshape, kView, 5, kMain, false}, kMain, /*stack_id=*/1);
  t.Alloc(0x2000, 1 * kMiB, {kFc2, kLinear, 0, 7, kMain, false});
  // Node 5's block after its node; node 8's before it, when fc2's op 7 is the guess.
  t.Alloc(0x3000, 2 * kMiB, {0, kAddmmBackward, 0, 5, kMain, true}, kWorker);
  t.Alloc(0x4000, 4 * kMiB, {0, kAddmmBackward, 0, 8, kMain, true}, kWorker);
  t.Node({kFc1, kView, 0, 8, kMain, false}, kMain, /*stack_id=*/2);
  // The same sequence of another thread is another node.
  t.Alloc(0x5000, 8 * kMiB, {0, kAddmmBackward, 0, 5, kWorker, true}, kWorker);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const LiveAllocation* after = FindLargest(*d, 0x3000);
  const LiveAllocation* before = FindLargest(*d, 0x4000);
  ASSERT_NE(after, nullptr);
  ASSERT_NE(before, nullptr);
  EXPECT_TRUE(after->linked);
  EXPECT_FALSE(after->module_from_earlier);
  EXPECT_EQ(after->module, "fc1");
  EXPECT_EQ(after->op, "ViewBackward0");
  EXPECT_EQ(after->forward_op, "aten::reshape");
  EXPECT_EQ(after->forward_inner_op, "aten::view");
  EXPECT_EQ(after->forward_line, "model.py:42");
  EXPECT_TRUE(before->linked);
  EXPECT_FALSE(before->module_from_earlier);
  EXPECT_EQ(before->module, "fc1");  // not fc2's, the guess
  EXPECT_EQ(before->forward_op, "aten::view");
  EXPECT_EQ(before->forward_inner_op, "");
  EXPECT_EQ(before->forward_line, "model.py:57");
  EXPECT_FALSE(FindLargest(*d, 0x5000)->linked);
  EXPECT_EQ(d->attribution.unlinked_backward_bytes, 8 * kMiB);
  EXPECT_EQ(FindModule(d->attribution, "fc1")->bytes, 1 * kMiB + 2 * kMiB + 4 * kMiB);
  EXPECT_EQ(FindModule(d->attribution, "fc2")->bytes, 1 * kMiB);
}

// A backward node that allocates several blocks before its forward op's record arrives (a
// node written into the ring after a drain, its backward allocations into the buffers
// before the next): every one of them waits and is linked, those with the same operators
// sharing one entry, those with other inner operators their own.
TEST(Attribution, EveryBackwardAllocationOfANodeWaitsForItsForwardOp) {
  enum : uint32_t { kView = 5, kMm = 6 };
  AttributedTrace t;
  t.Module(kFc1, "fc1").Op(kAddmmBackward, "ViewBackward0").Op(kView, "aten::view");
  t.Op(kMm, "aten::mm");
  t.Alloc(0x1000, 1 * kMiB, {0, kAddmmBackward, 0, 9, kMain, true}, kWorker);
  t.Alloc(0x2000, 2 * kMiB, {0, kAddmmBackward, 0, 9, kMain, true}, kWorker);
  t.Alloc(0x3000, 4 * kMiB, {0, kAddmmBackward, kMm, 9, kMain, true}, kWorker);
  t.Node({kFc1, kView, 0, 9, kMain, false}, kMain);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  for (uint64_t address : {0x1000, 0x2000, 0x3000}) {
    const LiveAllocation* block = FindLargest(*d, address);
    ASSERT_NE(block, nullptr) << address;
    EXPECT_TRUE(block->linked) << address;
    EXPECT_EQ(block->module, "fc1") << address;
    EXPECT_EQ(block->forward_op, "aten::view") << address;
  }
  EXPECT_EQ(FindLargest(*d, 0x3000)->inner_op, "aten::mm");
  EXPECT_EQ(d->attribution.unlinked_backward_bytes, 0u);
  EXPECT_EQ(FindModule(d->attribution, "fc1")->bytes, 7 * kMiB);
}

// A node is no allocator event: with nodes between every event (between an ALLOC and the
// event that settles it too), the allocator's figures, the blocks and the peak are those of
// the same trace without them; a node of a pair already allocated changes no link.
TEST(Attribution, AnAutogradNodeChangesNoAllocatorFigure) {
  auto trace = [](bool nodes) {
    AttributedTrace t;
    t.Module(kFc1, "fc1").Module(kFc2, "fc2").Op(kLinear, "aten::linear");
    t.Op(kAddmmBackward, "AddmmBackward0").Op(kEmpty, "aten::view");
    uint64_t sequence = 20;
    auto node = [&] {
      if (nodes) t.Node({kFc2, kEmpty, 0, ++sequence, kMain, false});
    };
    node();
    t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 4, kMain, false});
    node();
    t.Alloc(0x2000, 3 * kMiB, {kFc1, kLinear, 0, 5, kMain, false});
    node();
    t.Node({kFc2, kEmpty, 0, 4, kMain, false});  // pair 4 allocated: the ALLOC stays
    t.Free(0x1000);
    node();
    t.Alloc(0x3000, 2 * kMiB, {0, kAddmmBackward, 0, 4, kMain, true}, kWorker);
    node();
    return t.Analyze();
  };
  std::unique_ptr<Report> with = trace(true);
  std::unique_ptr<Report> without = trace(false);
  const TorchBridgeReport& a = with->processes[0].torch;
  const TorchBridgeReport& b = without->processes[0].torch;
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.events, 4u);
  EXPECT_EQ(a.blocks, 3u);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.lost_events, 0u);
  EXPECT_EQ(b.lost_events, 0u);
  EXPECT_EQ(a.counter_mismatches, 0u);
  EXPECT_EQ(a.estimated_block_sizes, b.estimated_block_sizes);
  EXPECT_EQ(a.estimated_block_sizes, 0u);
  const DeviceReport* d = FindDevice(with->processes[0], 0);
  const DeviceReport* e = FindDevice(without->processes[0], 0);
  ASSERT_NE(d, nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(d->torch.allocated_peak_bytes, 5 * kMiB);
  EXPECT_EQ(d->torch.allocated_peak_bytes, e->torch.allocated_peak_bytes);
  EXPECT_EQ(d->peak.largest.size(), e->peak.largest.size());
  EXPECT_EQ(with->processes[0].devices.size(), without->processes[0].devices.size());
  const LiveAllocation* backward = FindLargest(*d, 0x3000);
  ASSERT_NE(backward, nullptr);
  EXPECT_TRUE(backward->linked);
  EXPECT_EQ(backward->module, "fc1");
  EXPECT_EQ(backward->forward_op, "aten::linear");
}

// Ids never defined, ids of an unknown kind and a backward block with no sequence: no name,
// counted where a block without attribution is, and nothing breaks.
TEST(Attribution, UnknownIdsNameNothing) {
  AttributedTrace t;
  t.Module(kFc1, "fc1");
  t.Name(static_cast<v1::AttributionKind>(7), kFc2, "not a kind");  // a newer writer's
  t.Name(v1::ATTRIBUTION_KIND_MODULE, 0, "no id");
  t.Alloc(0x1000, 1 * kMiB, {kFc1, 0, 0, 0, 0, false});
  t.Alloc(0x2000, 2 * kMiB, {kFc2, 4000000000u, 77, 0, 0, false});
  t.Alloc(0x3000, 4 * kMiB, {0, 0, 0, 0, 0, true}, kWorker);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const DeviceAttribution& a = d->attribution;
  ASSERT_TRUE(a.given);
  EXPECT_EQ(FindModule(a, "fc1")->bytes, 1 * kMiB);
  EXPECT_EQ(FindModule(a, "")->bytes, 2 * kMiB + 4 * kMiB);
  EXPECT_EQ(FindModule(a, "not a kind"), nullptr);
  EXPECT_EQ(FindModule(a, "no id"), nullptr);
  EXPECT_EQ(FindOp(a, "")->bytes, 7 * kMiB);
  EXPECT_EQ(a.unlinked_backward_bytes, 4 * kMiB);
  const LiveAllocation* unknown = FindLargest(*d, 0x2000);
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->module, "");
  EXPECT_EQ(unknown->op, "");
  EXPECT_EQ(unknown->inner_op, "");
}

// A later, higher peak replaces the first one whole: a module whose blocks were freed in
// between has nothing at the peak, though it held the most at the first one.
TEST(Attribution, ALaterPeakReplacesTheFirst) {
  AttributedTrace t;
  t.Module(kFc1, "fc1").Module(kFc2, "fc2").Module(kHead, "head");
  t.Alloc(0x1000, 4 * kMiB, {kFc1, 0, 0, 0, 0, false});
  t.Alloc(0x2000, 2 * kMiB, {kFc2, 0, 0, 0, 0, false});  // first peak: 6 MiB
  t.Free(0x1000);
  t.Alloc(0x3000, 1 * kMiB, {kFc1, 0, 0, 0, 0, false});
  t.Free(0x3000);
  t.Alloc(0x4000, 8 * kMiB, {kHead, 0, 0, 0, 0, false});  // the peak: 10 MiB
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const DeviceAttribution& a = d->attribution;
  EXPECT_EQ(a.tensor_peak_bytes, 2 * kMiB + 8 * kMiB);
  const ModuleBytes* fc1 = FindModule(a, "fc1");
  ASSERT_NE(fc1, nullptr);  // a row for its own peak over the run
  EXPECT_EQ(fc1->bytes, 0u);
  EXPECT_EQ(fc1->own_peak_bytes, 4 * kMiB);
  EXPECT_EQ(FindModule(a, "fc2")->bytes, 2 * kMiB);
  EXPECT_EQ(FindModule(a, "head")->bytes, 8 * kMiB);
  EXPECT_EQ(a.modules.front().module, "head");  // the largest at the peak first
  EXPECT_EQ(FindOp(a, "")->bytes, a.tensor_peak_bytes);
}

// Without attribution nothing is given (and the report is as before).
TEST(Attribution, NotGivenWithoutAttribution) {
  AttributedTrace t;
  t.Alloc(0x1000, 1 * kMiB, {});
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->attribution.given);
  EXPECT_TRUE(d->attribution.modules.empty());
  EXPECT_EQ(d->torch.allocated_peak_bytes, 1 * kMiB);
}

// With `--stacks`, a backward block names the line of its forward allocation.
TEST(Attribution, BackwardNamesItsForwardLine) {
  AttributedTrace t;
  t.Module(kFc1, "fc1").Op(kLinear, "aten::linear").Op(kAddmmBackward, "AddmmBackward0");
  v1::Event e;
  e.mutable_interned_string()->set_id(90);
  e.mutable_interned_string()->set_value("forward");
  t.Raw(e);
  e.mutable_interned_string()->set_id(91);
  e.mutable_interned_string()->set_value("/home/me/model.py");
  t.Raw(e);
  v1::Event frame;
  v1::StackFrame* f = frame.mutable_stack_frame();
  f->set_id(1);
  f->set_kind(v1::STACK_FRAME_KIND_PYTHON);
  f->set_function_name_id(90);
  f->set_file_name_id(91);
  f->set_line(42);
  t.Raw(frame);
  v1::Event stack;
  stack.mutable_stack()->set_id(3);
  stack.mutable_stack()->add_frame_ids(1);
  t.Raw(stack);
  t.Alloc(0x1000, 1 * kMiB, {kFc1, kLinear, 0, 5, kMain, false}, kMain, /*stack_id=*/3);
  t.Alloc(0x2000, 2 * kMiB, {0, kAddmmBackward, 0, 5, kMain, true}, kWorker);
  std::unique_ptr<Report> report = t.Analyze();
  const DeviceReport* d = FindDevice(report->processes[0], 0);
  ASSERT_NE(d, nullptr);
  const LiveAllocation* backward = FindLargest(*d, 0x2000);
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->forward_line, "model.py:42");
  EXPECT_EQ(backward->module, "fc1");
}

}  // namespace
}  // namespace cumemtrace
