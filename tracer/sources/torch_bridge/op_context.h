// What operator is running on each thread, for `run --ops` and `run --modules`: the shim's
// RecordFunction callbacks push and pop frames here, and the allocator's hook copies the
// thread's state into each ALLOC (bridge_core.h), on the same thread, with no lock.
//
// Written without torch's types so that the unit tests drive this exact code: the shim turns
// an at::RecordFunction into an OpFrame, and names into ids with OpNames.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace cumemtrace::torch_bridge {

// One running operator or autograd node.
struct OpFrame {
  uint32_t op = 0;        // OpNames id of its name
  uint64_t sequence = 0;  // autograd's seqNr + 1, 0: none (-1)
  uint32_t thread = 0;    // RecordFunction's thread id (backward: the forward's)
  bool backward = false;  // an autograd node run by backward (BACKWARD_FUNCTION scope)
  // Its autograd node is accounted for: an ALLOC took its sequence (Fill), or an op inside
  // it with the same sequence was recorded (allocated or said as a node).
  bool named = false;
};

// A forward op whose autograd node no ALLOC names (a view, a select, a transpose allocates
// nothing): recorded on its own, so that its node's backward allocations name it exactly.
// Filled as an ALLOC's attribution would be when the op ends.
struct AutogradNode {
  uint32_t op = 0;        // the outermost running op (the one the program called)
  uint32_t inner_op = 0;  // the op that recorded the node, 0 when it is the outermost
  uint64_t sequence = 0;  // autograd's seqNr + 1 (never 0)
  uint32_t thread = 0;    // RecordFunction's thread id
};

// The frames of one thread. Deeper frames than kDepth are counted, not kept: an ALLOC then
// names the deepest kept frame as its inner operator.
class OpStack {
 public:
  static constexpr uint32_t kDepth = 32;
  // What Fill's `autograd_next` returns when autograd's counter cannot be read.
  static constexpr uint64_t kUnknown = UINT64_MAX;

  void Enter(const OpFrame& frame) {
    if (depth_ < kDepth) {
      frames_[depth_] = frame;
      frames_[depth_].named = false;
    }
    ++depth_;
  }
  // An end without its start (an async op's end on another thread) is ignored. True when
  // the ending frame must be recorded as an autograd node (*node filled): a forward frame with
  // a sequence that autograd used (`autograd_next()`, at::sequence_number::peek() at the end,
  // is past it: the op, or one inside it, recorded a node; 0: unknown, never) and that no
  // ALLOC and no op inside it with the same sequence accounted for. Ops that record no node
  // (in no_grad, or not differentiable) share the next op's sequence: they are left out by
  // that test. Backward frames, frames without a sequence and frames deeper than kDepth never
  // are. `autograd_next` is called only for a frame that may be one.
  template <typename Next>
  bool ExitWith(Next&& autograd_next, AutogradNode* node) {
    if (depth_ == 0) return false;
    --depth_;
    if (depth_ >= kDepth) return false;
    const OpFrame& frame = frames_[depth_];
    OpFrame* parent = depth_ > 0 ? &frames_[depth_ - 1] : nullptr;
    if (frame.backward) {
      // Autograd's engine wraps the node in a FUNCTION-scope RecordFunction of the node's
      // sequence ("autograd::engine::evaluate_function: MmBackward0"): no forward op.
      if (parent != nullptr) parent->named = true;
      return false;
    }
    if (frame.sequence == 0) return false;
    const bool due = !frame.named && autograd_next() >= frame.sequence;
    // The op that called this one with the same sequence (linear around addmm, reshape
    // around view) has its node accounted for by this frame's ALLOC or node.
    if (parent != nullptr && (frame.named || due) && parent->sequence == frame.sequence &&
        parent->thread == frame.thread) {
      parent->named = true;
    }
    if (!due || node == nullptr) return false;
    // The operators as Fill names them: inside a backward node (create_graph, a reentrant
    // checkpoint's recomputation) the node, not autograd's engine's wrapper around it.
    Operators(depth_ + 1, &node->op, &node->inner_op);
    node->sequence = frame.sequence;
    node->thread = frame.thread;
    return true;
  }
  bool Exit(uint64_t autograd_next = 0, AutogradNode* node = nullptr) {
    return ExitWith([autograd_next] { return autograd_next; }, node);
  }
  uint32_t depth() const { return depth_; }

  // The attribution of a tensor born now. Outermost: the op the program called, or in
  // backward the node autograd runs. The sequence: in backward, the innermost node's (ops inside
  // a node record none, unless the backward builds a graph of its own); in forward, the
  // innermost op that recorded an autograd node (`aten::addmm` inside `aten::linear`): the
  // node whose backward later names this allocation's forward op; that frame is then named
  // (no AutogradNode of its own at Exit).
  //
  // With `autograd_next` (at::sequence_number::peek(), read at the ALLOC): a forward frame
  // whose sequence autograd has not used yet recorded no node (an op on tensors that need no
  // gradient, `x > 0`, a mask's `.to()`): its sequence is the next node's, which another op
  // records, so the ALLOC gets none rather than take that op's place as its forward op.
  void Fill(cumemtrace_torch_event* event) {
    FillWith([] { return kUnknown; }, event);
  }
  template <typename Next>
  void FillWith(Next&& autograd_next, cumemtrace_torch_event* event) {
    const uint32_t kept = depth_ < kDepth ? depth_ : kDepth;
    if (kept == 0) return;
    Operators(kept, &event->op, &event->inner_op);
    for (uint32_t i = kept; i-- > 0;) {
      if (frames_[i].backward) {
        event->autograd_sequence = frames_[i].sequence | CUMEMTRACE_TORCH_BACKWARD_BIT;
        event->autograd_thread = frames_[i].thread;
        return;
      }
    }
    for (uint32_t i = kept; i-- > 0;) {
      if (frames_[i].sequence != 0) {
        const uint64_t next = autograd_next();
        if (next != kUnknown && next < frames_[i].sequence) return;  // no node recorded
        event->autograd_sequence = frames_[i].sequence;
        event->autograd_thread = frames_[i].thread;
        frames_[i].named = true;
        return;
      }
    }
  }

 private:
  // The outermost and innermost ops of the `kept` (> 0) innermost-last frames; the inner one
  // 0 when it is the outermost. In backward the outermost is the outermost backward frame:
  // autograd's engine wraps each node in a RecordFunction of its own
  // ("autograd::engine::evaluate_function: MmBackward0").
  void Operators(uint32_t kept, uint32_t* op, uint32_t* inner_op) const {
    uint32_t outer = 0;
    while (outer + 1 < kept && !frames_[outer].backward) ++outer;
    if (!frames_[outer].backward) outer = 0;
    *op = frames_[outer].op;
    *inner_op = kept > outer + 1 ? frames_[kept - 1].op : 0;
  }

  OpFrame frames_[kDepth];
  uint32_t depth_ = 0;
};

// Operator names to ids, from 1, each defined once through `define` (the tracer writes the
// definition into its ring before the first ALLOC that uses it). A name's pointer is not
// stable (autograd nodes' names are strings the RecordFunction owns), so a thread's cache,
// keyed by pointer, is checked against the name itself.
class OpNames {
 public:
  OpNames(cumemtrace_torch_name_fn define, void* context) : define_(define), context_(context) {}

  struct Cache {
    static constexpr uint32_t kSlots = 256;
    const char* pointer[kSlots] = {};
    const std::string* name[kSlots] = {};
    uint32_t id[kSlots] = {};
  };

  uint32_t IdOf(const char* name, Cache* cache) {
    if (name == nullptr) return 0;
    const uint32_t slot = static_cast<uint32_t>((reinterpret_cast<uintptr_t>(name) >> 3) ^
                                                (reinterpret_cast<uintptr_t>(name) >> 11)) %
                          Cache::kSlots;
    if (cache->pointer[slot] == name && strcmp(cache->name[slot]->c_str(), name) == 0) {
      return cache->id[slot];
    }
    const std::string* kept = nullptr;
    const uint32_t id = Intern(name, &kept);
    if (id == 0) return 0;
    cache->pointer[slot] = name;
    cache->name[slot] = kept;
    cache->id[slot] = id;
    return id;
  }

  // Names beyond this are not defined (a program that makes names without end): their
  // allocations name no operator.
  static constexpr uint32_t kMaxNames = 1u << 20;

 private:
  uint32_t Intern(const char* name, const std::string** kept) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = ids_.find(name);
    if (found != ids_.end()) {
      *kept = &found->first;
      return found->second;
    }
    if (ids_.size() >= kMaxNames) return 0;
    const uint32_t id = static_cast<uint32_t>(ids_.size()) + 1;
    auto inserted = ids_.emplace(name, id).first;  // node-based: the key's address stays
    *kept = &inserted->first;
    define_(CUMEMTRACE_TORCH_NAME_OPERATOR, id, name, context_);
    return id;
  }

  cumemtrace_torch_name_fn define_;
  void* context_;
  std::mutex mutex_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace cumemtrace::torch_bridge
