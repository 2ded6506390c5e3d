#include "collector/engine/lifetimes.h"

#include <algorithm>

#include "collector/engine/phase_rules.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {

const char* LifetimeClassName(LifetimeClass c) {
  static const char* const kNames[] = {"temporary", "activation", "gradient", "persistent"};
  return c < LifetimeClass::kOther ? kNames[static_cast<int>(c)] : "other";
}

const char* CategoryName(uint8_t category) {
  static const char* const kNames[] = {"",           "parameter",       "buffer",
                                       "gradient",   "optimizer_state", "input",
                                       "activation", "temporary",       "autograd_other",
                                       "workspace"};
  return category < kCategoryCount ? kNames[category] : "";
}

const char* MemoryVizCategoryName(uint8_t category) {
  // PyTorch's profiler has no buffer category: a module's buffers are its parameters' kin.
  static const char* const kNames[] = {"unknown",    "parameter",       "parameter",
                                       "gradient",   "optimizer_state", "input",
                                       "activation", "temporary",       "autograd_detail",
                                       "unknown"};
  return category < kCategoryCount ? kNames[category] : "unknown";
}

int TagPriority(uint8_t category) {
  switch (category) {
    case v1::CATEGORY_PARAMETER:
      return 6;
    case v1::CATEGORY_BUFFER:
      return 5;
    case v1::CATEGORY_OPTIMIZER_STATE:
      return 4;
    case v1::CATEGORY_GRADIENT:
      return 3;
    case v1::CATEGORY_INPUT:
      return 2;
    default:
      return category == 0 || category >= kCategoryCount ? 0 : 1;
  }
}

bool HasTrainingPhases(const std::vector<PhaseName>& names) {
  bool forward = false, backward = false;
  for (const PhaseName& n : names) {
    forward = forward || IsForwardLikePhase(n.name);
    backward = backward || IsBackwardLikePhase(n.name);
  }
  return forward && backward;
}

LifetimeClassifier::LifetimeClassifier(const PhaseTracker& phases,
                                       const OccurrenceLists& by_phase,
                                       const std::vector<IterationWindow>& iterations, bool exited)
    : names_(phases.names()),
      by_phase_(by_phase),
      exited_(exited),
      iterations_(iterations) {
  for (const OccurrenceRecord& o : phases.occurrences()) {
    const PhaseName& n = names_[static_cast<size_t>(o.phase)];
    if (!n.iteration) last_phase_end_ns_ = std::max(last_phase_end_ns_, o.end_ns);
    if (IsOptimizerLikePhase(n.name)) optimizer_starts_.push_back(o.start_ns);
    if (IsBackwardLikePhase(n.name)) backward_starts_.push_back(o.start_ns);
    if (IsForwardLikePhase(n.name) && (first_forward_ns_ == 0 || o.start_ns < first_forward_ns_)) {
      first_forward_ns_ = o.start_ns;
    }
  }
  std::sort(optimizer_starts_.begin(), optimizer_starts_.end());
  std::sort(backward_starts_.begin(), backward_starts_.end());
}

LifetimeClass LifetimeClassifier::Classify(uint64_t birth_ns, int32_t birth_phase,
                                           uint64_t death_ns, int32_t death_phase,
                                           bool freed) const {
  const std::string none;
  const std::string& born = birth_phase >= 0 ? names_[static_cast<size_t>(birth_phase)].name : none;
  const std::string& died = death_phase >= 0 ? names_[static_cast<size_t>(death_phase)].name : none;

  if (freed && birth_phase >= 0 && birth_phase == death_phase) {
    // The occurrence it was born in: the last one of that phase starting at or before birth.
    const auto& list = by_phase_[static_cast<size_t>(birth_phase)];
    auto after = std::upper_bound(list.begin(), list.end(), birth_ns,
                                  [](uint64_t t, const OccurrenceRecord* o) {
                                    return t < o->start_ns;
                                  });
    if (after != list.begin() && (*std::prev(after))->end_ns >= death_ns) {
      return LifetimeClass::kTemporary;
    }
  }
  // Alive at the start of an iteration it was not born in: the first iteration starting
  // after the birth starts before the death.
  auto next_iteration = std::upper_bound(
      iterations_.begin(), iterations_.end(), birth_ns,
      [](uint64_t t, const IterationWindow& w) { return t < w.start_ns; });
  const bool crosses_iteration =
      next_iteration != iterations_.end() && next_iteration->start_ns < death_ns;
  if (freed && IsForwardLikePhase(born) && IsBackwardLikePhase(died) && !crosses_iteration) {
    return LifetimeClass::kActivation;
  }
  // Alive when the last phase closed and freed in teardown, or never freed by a program that
  // ended on its own: it held on through every phase, whatever it was born as. Checked before
  // the gradient rule, because a one-step backprop program's gradients and its autograd
  // thread's cuBLAS workspace (born in backward, kept to exit) would otherwise leave persistent
  // below weights + optimizer state + workspaces, and activation memory above its EP twin's.
  // A program killed by a signal never reached its teardown: its last step keeps its classes.
  if (last_phase_end_ns_ != 0 && birth_ns < last_phase_end_ns_ &&
      (freed ? death_ns > last_phase_end_ns_ : exited_)) {
    return LifetimeClass::kPersistent;
  }
  if (IsBackwardLikePhase(born) && !crosses_iteration) {
    auto next = std::upper_bound(optimizer_starts_.begin(), optimizer_starts_.end(), birth_ns);
    if (next != optimizer_starts_.end() && *next < death_ns) return LifetimeClass::kGradient;
  }
  if (!freed || crosses_iteration) return LifetimeClass::kPersistent;
  return LifetimeClass::kOther;
}

uint8_t LifetimeClassifier::Categorize(uint64_t birth_ns, int32_t birth_phase, uint64_t death_ns,
                                       int32_t death_phase, bool freed, uint32_t objects) const {
  const auto named = [objects](v1::Category c) { return (objects & (1u << c)) != 0; };
  const LifetimeClass c = Classify(birth_ns, birth_phase, death_ns, death_phase, freed);
  if (c == LifetimeClass::kTemporary) return v1::CATEGORY_TEMPORARY;
  if (c == LifetimeClass::kActivation) return v1::CATEGORY_ACTIVATION;
  const std::string none;
  const PhaseName* born = birth_phase >= 0 ? &names_[static_cast<size_t>(birth_phase)] : nullptr;
  const std::string& died = death_phase >= 0 ? names_[static_cast<size_t>(death_phase)].name : none;
  // Born in forward, still live when a backward starts, and freed in backward or at teardown:
  // what backward needed from forward (a one-step program frees some of it only on exit).
  // Never freed at all is something else: a library's workspace, a cache.
  if (born != nullptr && IsForwardLikePhase(born->name)) {
    auto backward = std::upper_bound(backward_starts_.begin(), backward_starts_.end(), birth_ns);
    const bool teardown = freed && last_phase_end_ns_ != 0 && birth_ns < last_phase_end_ns_ &&
                          death_ns > last_phase_end_ns_;
    if (backward != backward_starts_.end() && *backward < death_ns &&
        ((freed && IsBackwardLikePhase(died)) || teardown)) {
      return v1::CATEGORY_ACTIVATION;
    }
  }
  if (c == LifetimeClass::kGradient && !named(v1::CATEGORY_GRADIENT)) {
    return v1::CATEGORY_GRADIENT;
  }
  // Born outside every phase (an iteration's range is no phase of its own here) and freed
  // by the end of the first iteration that ends after its birth (the one it was born in, or
  // the next): a batch.
  if (freed && (born == nullptr || born->iteration)) {
    auto next = std::upper_bound(iterations_.begin(), iterations_.end(), birth_ns,
                                 [](uint64_t t, const IterationWindow& w) { return t < w.end_ns; });
    if (iterations_.empty() ? c != LifetimeClass::kPersistent
                            : next != iterations_.end() && death_ns <= next->end_ns) {
      return v1::CATEGORY_INPUT;
    }
  }
  if (c == LifetimeClass::kPersistent) {
    if (first_forward_ns_ != 0 && birth_ns < first_forward_ns_ && !named(v1::CATEGORY_PARAMETER)) {
      return v1::CATEGORY_PARAMETER;
    }
    if (born != nullptr && IsOptimizerLikePhase(born->name) &&
        !named(v1::CATEGORY_OPTIMIZER_STATE)) {
      return v1::CATEGORY_OPTIMIZER_STATE;
    }
    if (born != nullptr && IsBackwardLikePhase(born->name) && !named(v1::CATEGORY_GRADIENT)) {
      return v1::CATEGORY_GRADIENT;
    }
  }
  return v1::CATEGORY_AUTOGRAD_OTHER;
}

}  // namespace cumemtrace::internal
