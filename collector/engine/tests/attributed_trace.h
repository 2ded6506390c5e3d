// A fabricated stream of PyTorch allocator events with modules and operators (`run
// --modules`, `--ops`), for the engine's attribution tests and the page's flame graph test
// (viewer/test/attribution_trace_main.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "collector/engine/tests/trace_builder.h"

namespace cumemtrace::testing {

// The program's main thread and autograd's worker thread.
inline constexpr uint32_t kMain = 500, kWorker = 600;

struct Attribution {
  uint32_t module = 0;
  uint32_t op = 0;
  uint32_t inner_op = 0;
  uint64_t sequence = 0;  // seqNr + 1
  uint32_t autograd_thread = 0;
  bool backward = false;
};

// A caching allocator's ALLOC and FREE_REQUESTED events with its counters, each ALLOC with
// what was running; the block sizes settle exactly (multiples of 512, requested = block - 100).
class AttributedTrace {
 public:
  AttributedTrace() : s_(1, 4242) {
    s_.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
    v1::Event state;
    state.set_timestamp_ns(5);
    state.mutable_torch_bridge()->set_attached(true);
    s_.Raw(state);
  }
  AttributedTrace& Name(v1::AttributionKind kind, uint32_t id, const std::string& name) {
    v1::Event e;
    e.set_timestamp_ns(ts_);
    v1::AttributionName* n = e.mutable_attribution_name();
    n->set_kind(kind);
    n->set_id(id);
    n->set_name(name);
    s_.Raw(e);
    return *this;
  }
  AttributedTrace& Module(uint32_t id, const std::string& path) {
    return Name(v1::ATTRIBUTION_KIND_MODULE, id, path);
  }
  AttributedTrace& Op(uint32_t id, const std::string& name) {
    return Name(v1::ATTRIBUTION_KIND_OPERATOR, id, name);
  }
  AttributedTrace& Alloc(uint64_t address, uint64_t block, const Attribution& a,
                         uint32_t thread = kMain, uint32_t stack_id = 0) {
    v1::Event e = Event(v1::TORCH_ALLOCATOR_ACTION_ALLOC, address, thread);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_requested_bytes(block - 100);
    t->set_allocated_bytes_total(total_);
    t->set_allocated_bytes_current(current_);
    t->set_module_id(a.module);
    t->set_operator_id(a.op);
    t->set_inner_operator_id(a.inner_op);
    t->set_autograd_sequence(a.sequence);
    t->set_autograd_thread(a.autograd_thread);
    t->set_backward(a.backward);
    t->set_stack_id(stack_id);
    total_ += block;
    current_ += block;
    blocks_[address] = block;
    s_.Raw(e);
    return *this;
  }
  // A forward op that recorded autograd node `a.sequence` and allocated nothing (a view):
  // not an allocator event, it takes no sequence number.
  AttributedTrace& Node(const Attribution& a, uint32_t thread = kMain, uint32_t stack_id = 0) {
    v1::Event e;
    e.set_timestamp_ns(++ts_);
    v1::TorchAutogradNode* n = e.mutable_torch_autograd_node();
    n->set_thread_id(thread);
    n->set_module_id(a.module);
    n->set_operator_id(a.op);
    n->set_inner_operator_id(a.inner_op);
    n->set_autograd_sequence(a.sequence);
    n->set_autograd_thread(a.autograd_thread);
    n->set_stack_id(stack_id);
    s_.Raw(e);
    return *this;
  }
  AttributedTrace& Free(uint64_t address) {
    v1::Event e = Event(v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, address, kMain);
    e.mutable_torch_allocator()->set_requested_bytes(blocks_.at(address));
    current_ -= blocks_.at(address);
    blocks_.erase(address);
    s_.Raw(e);
    return *this;
  }
  AttributedTrace& Raw(const v1::Event& e) {
    s_.Raw(e);
    return *this;
  }
  AttributedTrace& Flush() {
    s_.Flush();
    return *this;
  }
  std::unique_ptr<Report> Analyze() {
    Finish();
    return testing::Analyze(s_.Chunks());
  }
  // The trace as a file, the launcher's exit after the process's.
  std::string Bytes() {
    Finish();
    s_.LauncherExit(0, 0);
    return FileBytes(s_.Chunks());
  }

 private:
  // A probe after the last event settles the last block from the counters, then the exit.
  void Finish() {
    v1::Event probe;
    probe.set_timestamp_ns(++ts_);
    v1::TorchAllocatorEvent* t = probe.mutable_torch_allocator();
    t->set_action(v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE);
    t->set_sequence(sequence_);
    t->set_allocated_bytes_total(total_);
    t->set_allocated_bytes_current(current_);
    s_.Raw(probe);
    s_.Exit(++ts_, 0).Flush();
  }
  v1::Event Event(v1::TorchAllocatorAction action, uint64_t address, uint32_t thread) {
    v1::Event e;
    e.set_timestamp_ns(++ts_);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(action);
    t->set_sequence(++sequence_);
    t->set_address(address);
    t->set_thread_id(thread);
    return e;
  }

  StreamBuilder s_;
  uint64_t ts_ = 10;
  uint64_t sequence_ = 0;
  uint64_t total_ = 0;
  uint64_t current_ = 0;
  std::map<uint64_t, uint64_t> blocks_;
};

}  // namespace cumemtrace::testing
