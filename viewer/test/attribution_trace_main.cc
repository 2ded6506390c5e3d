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

#include "collector/engine/tests/attributed_trace.h"

namespace {

using cumemtrace::testing::AttributedTrace;
using cumemtrace::testing::kMain;

std::string Trace() {
  constexpr uint64_t KiB = 1024;
  enum : uint32_t { kEncoderAttn = 1, kDecoderMlp, kNet };
  enum : uint32_t { kLinear = 1, kAddmm, kAddmmBackward, kMm, kEmpty, kViewBackward };
  AttributedTrace t;
  t.Module(kEncoderAttn, "encoder.attn").Module(kDecoderMlp, "decoder.mlp").Module(kNet, "<Net>");
  t.Op(kLinear, "aten::linear").Op(kAddmm, "aten::addmm").Op(kAddmmBackward, "AddmmBackward0");
  t.Op(kMm, "aten::mm").Op(kEmpty, "aten::empty").Op(kViewBackward, "ViewBackward0");
  t.Alloc(0x10000000, 3072 * KiB, {kEncoderAttn, kLinear, kAddmm, 7, kMain, false});
  t.Alloc(0x20000000, 1024 * KiB, {kDecoderMlp, kLinear, kAddmm, 8, kMain, false});
  t.Alloc(0x30000000, 2048 * KiB, {0, kAddmmBackward, kMm, 8, kMain, true});
  t.Alloc(0x40000000, 512 * KiB, {kNet, kEmpty, kEmpty, 0, 0, false});
  t.Alloc(0x50000000, 256 * KiB, {});
  t.Alloc(0x60000000, 640 * KiB, {0, kViewBackward, 0, 30, kMain, true});
  t.Free(0x10000000);
  return t.Bytes();
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
