// Test helper: a fabricated training step of a PyTorch program with the allocator bridge,
// whose memory has every layer the page stacks by category: tensors the program's objects
// named (parameter, gradient, optimizer state) and tensors whose category is inferred
// (activations, a temporary), cuBLAS's workspace (device memory PyTorch never sees) and
// PyTorch's cache beyond its tensors. The device peak (in forward) and the tensors' peak (in
// the optimizer) are at different instants, with different figures.
//   MiB       forward                 backward              optimizer
//   segments  A 64                    + B 32                (96 reserved)
//   tensors   weights 16, act 20 + 16 - act2, + grad 16,    + state 16, + temp 10, - temp
//                                     - act1
//   cuBLAS    8                       - 8
// With `churn`, the optimizer also allocates and frees that many 1 MiB blocks before the
// temporary: steps enough to make the category series sample.
#pragma once

#include <cstdint>
#include <vector>

#include "collector/engine/tests/trace_builder.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::testing {

inline std::vector<v1::TraceChunk> CategoryTraceChunks(int churn = 0) {
  constexpr uint64_t MiB = 1 << 20;
  constexpr uint32_t kThread = 77, kForward = 1, kBackward = 2, kOptimizer = 3, kMalloc = 4,
                     kC10 = 5, kCublas = 6;
  constexpr uint64_t A = 0x7f0000000000, B = 0x7f1000000000, kWorkspace = 0x7f2000000000;
  StreamBuilder s(1, 5151);
  s.handshake().set_allocator_mode("native");
  s.String(kForward, "forward").String(kBackward, "backward").String(kOptimizer, "optimizer");
  s.String(kMalloc, "cudaMalloc").String(kC10, "/venv/torch/lib/libc10_cuda.so");
  s.String(kCublas, "/venv/nvidia/cublas/lib/libcublas.so.13");
  s.Device(0, "NVIDIA H100 80GB HBM3", 80 * 1024 * MiB).Flush();
  uint64_t ts = 10, sequence = 0, total = 0, current = 0;
  v1::Event bridge;
  bridge.set_timestamp_ns(++ts);
  bridge.mutable_torch_bridge()->set_attached(true);
  s.Raw(bridge);
  auto torch = [&](v1::TorchAllocatorAction action, uint64_t address, uint64_t bytes) {
    s.Torch(++ts, action, ++sequence, address, bytes, total, current, kThread);
  };
  auto segment = [&](uint64_t address, uint64_t bytes) {
    s.Alloc(++ts, 0, address, bytes, kDevice, kThread, kMalloc, kC10);
    torch(v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC, address, bytes);
  };
  // The block's size is the allocator's counter at the next event minus this one's.
  auto alloc = [&](uint64_t address, uint64_t bytes) {
    torch(v1::TORCH_ALLOCATOR_ACTION_ALLOC, address, bytes);
    total += bytes;
    current += bytes;
  };
  auto release = [&](uint64_t address, uint64_t bytes) {
    torch(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, address, bytes);
    current -= bytes;
  };
  auto tag = [&](uint64_t address, uint64_t bytes, v1::Category category) {
    v1::Event e;
    e.set_timestamp_ns(++ts);
    v1::TensorCategory* t = e.mutable_tensor_category();
    t->set_device(0);
    t->set_address(address);
    t->set_bytes(bytes);
    t->set_category(category);
    s.Raw(e);
  };
  segment(A, 64 * MiB);
  alloc(A, 16 * MiB);
  tag(A, 16 * MiB, v1::CATEGORY_PARAMETER);
  s.Push(++ts, kThread, kForward);
  s.Alloc(++ts, 0, kWorkspace, 8 * MiB, kDevice, kThread, kMalloc, kCublas);
  alloc(A + 16 * MiB, 20 * MiB);
  alloc(A + 36 * MiB, 16 * MiB);
  s.Pop(++ts, kThread);
  s.Push(++ts, kThread, kBackward);
  release(A + 36 * MiB, 16 * MiB);
  s.Free(++ts, 0, kWorkspace, 8 * MiB, kDevice, kThread);
  segment(B, 32 * MiB);
  alloc(B, 16 * MiB);
  tag(B, 16 * MiB, v1::CATEGORY_GRADIENT);
  release(A + 16 * MiB, 20 * MiB);
  s.Pop(++ts, kThread);
  s.Push(++ts, kThread, kOptimizer);
  alloc(A + 16 * MiB, 16 * MiB);
  tag(A + 16 * MiB, 16 * MiB, v1::CATEGORY_OPTIMIZER_STATE);
  for (int i = 0; i < churn; ++i) {
    alloc(A + 32 * MiB, MiB);
    release(A + 32 * MiB, MiB);
  }
  alloc(A + 32 * MiB, 10 * MiB);
  release(A + 32 * MiB, 10 * MiB);
  s.Pop(++ts, kThread);
  s.Exit(++ts, 0).LauncherExit(0, 0);
  return s.Chunks();
}

}  // namespace cumemtrace::testing
