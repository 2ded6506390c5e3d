// Writes a fabricated PyTorch step with modules and operators (`run --modules --ops`) as a
// trace file, for the browser test of the flame graph by module and by operator
// (flame_by.test.mjs), which checks the page `cumemtrace export` makes of it against
// `cumemtrace report --json` of the same trace: attribution_trace PATH
//   KiB   module           operator (inner)              autograd
//   3072  encoder.attn     aten::linear (aten::addmm)    forward, sequence 7
//   1024  decoder.mlp      aten::linear (aten::addmm)    forward, sequence 8
//   2048  (its forward's)  AddmmBackward0 (aten::mm)     backward of sequence 8: decoder.mlp
//    512  <Net>            aten::empty                   forward
//    256  (none)           (none)
//    640  (none)           ViewBackward0                 backward of sequence 30 (no forward)
// then the 3072 KiB block is freed: the tensors' peak is before it.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>

#include "collector/engine/tests/trace_builder.h"
#include "cumemtrace/v1/trace.pb.h"

namespace {

using cumemtrace::testing::StreamBuilder;
namespace v1 = cumemtrace::v1;

std::string Trace() {
  constexpr uint64_t KiB = 1024;
  constexpr uint32_t kThread = 11;
  StreamBuilder s(1, 6161);
  s.Device(0, "NVIDIA H100 80GB HBM3", uint64_t{80} << 30).Flush();
  uint64_t ts = 10, sequence = 0, total = 0, current = 0;
  v1::Event bridge;
  bridge.set_timestamp_ns(++ts);
  bridge.mutable_torch_bridge()->set_attached(true);
  s.Raw(bridge);
  auto name = [&](v1::AttributionKind kind, uint32_t id, const std::string& text) {
    v1::Event e;
    e.set_timestamp_ns(++ts);
    e.mutable_attribution_name()->set_kind(kind);
    e.mutable_attribution_name()->set_id(id);
    e.mutable_attribution_name()->set_name(text);
    s.Raw(e);
  };
  enum : uint32_t { kEncoderAttn = 1, kDecoderMlp, kNet };
  enum : uint32_t { kLinear = 1, kAddmm, kAddmmBackward, kMm, kEmpty, kViewBackward };
  name(v1::ATTRIBUTION_KIND_MODULE, kEncoderAttn, "encoder.attn");
  name(v1::ATTRIBUTION_KIND_MODULE, kDecoderMlp, "decoder.mlp");
  name(v1::ATTRIBUTION_KIND_MODULE, kNet, "<Net>");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kLinear, "aten::linear");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kAddmm, "aten::addmm");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kAddmmBackward, "AddmmBackward0");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kMm, "aten::mm");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kEmpty, "aten::empty");
  name(v1::ATTRIBUTION_KIND_OPERATOR, kViewBackward, "ViewBackward0");
  auto torch = [&](v1::TorchAllocatorAction action, uint64_t address, uint64_t bytes,
                   uint32_t module, uint32_t op, uint32_t inner, uint64_t autograd_sequence,
                   bool backward) {
    v1::Event e;
    e.set_timestamp_ns(++ts);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(action);
    t->set_sequence(++sequence);
    t->set_address(address);
    // As the allocator's hook reads them: an ALLOC carries the counters before its block (the
    // next event's show its size), a free none.
    if (action == v1::TORCH_ALLOCATOR_ACTION_ALLOC) {
      t->set_requested_bytes(bytes);
      t->set_allocated_bytes_total(total);
      t->set_allocated_bytes_current(current);
      total += bytes;
      current += bytes;
    } else {
      current -= bytes;
    }
    t->set_module_id(module);
    t->set_operator_id(op);
    t->set_inner_operator_id(inner);
    t->set_autograd_sequence(autograd_sequence);
    t->set_autograd_thread(autograd_sequence != 0 ? kThread : 0);
    t->set_backward(backward);
    s.Raw(e);
  };
  const auto alloc = v1::TORCH_ALLOCATOR_ACTION_ALLOC;
  torch(alloc, 0x10000000, 3072 * KiB, kEncoderAttn, kLinear, kAddmm, 7, false);
  torch(alloc, 0x20000000, 1024 * KiB, kDecoderMlp, kLinear, kAddmm, 8, false);
  torch(alloc, 0x30000000, 2048 * KiB, 0, kAddmmBackward, kMm, 8, true);
  torch(alloc, 0x40000000, 512 * KiB, kNet, kEmpty, kEmpty, 0, false);
  torch(alloc, 0x50000000, 256 * KiB, 0, 0, 0, 0, false);
  torch(alloc, 0x60000000, 640 * KiB, 0, kViewBackward, 0, 30, true);
  torch(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, 0x10000000, 3072 * KiB, 0, 0, 0, 0, false);
  v1::Event probe;
  probe.set_timestamp_ns(++ts);
  probe.mutable_torch_allocator()->set_action(v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE);
  probe.mutable_torch_allocator()->set_sequence(sequence);
  probe.mutable_torch_allocator()->set_allocated_bytes_total(total);
  probe.mutable_torch_allocator()->set_allocated_bytes_current(current);
  s.Raw(probe);
  s.Exit(++ts, 0).LauncherExit(0, 0);
  return cumemtrace::testing::FileBytes(s.Chunks());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: attribution_trace PATH\n";
    return 2;
  }
  std::ofstream out(argv[1], std::ios::binary);
  out << Trace();
  return out ? 0 : 1;
}
