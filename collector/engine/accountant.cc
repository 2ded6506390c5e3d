#include "collector/engine/accountant.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "collector/engine/event_order.h"
#include "collector/engine/iterations.h"
#include "collector/engine/lifetimes.h"
#include "collector/engine/stacks.h"
#include "collector/engine/timeline_capture.h"

namespace cumemtrace::internal {
namespace {

constexpr uint32_t kNone = ~uint32_t{0};

// (slot, layer, address). A tensor (a block of PyTorch's allocator) starts at the same
// address as the segment that holds it: tensors are a layer of their own.
uint64_t Key(uint32_t slot, uint64_t address, uint8_t kind) {
  return AddressKey(slot, address) ^ (kind == kTorchAllocatedKind ? uint64_t{1} << 55 : 0);
}

// What the stream said about itself (StreamFacts), and how it ended.
void FillStreamFacts(const DecodedStream& s, ProcessReport* p) {
  static_cast<StreamFacts&>(*p) = s;
  for (const SequenceGap& g : s.sequence_gaps) p->lost_batches += g.missing;
  p->damaged = !s.damage.empty();
  p->torch = s.torch.report;

  // The launcher saw the real end (signals included); the tracer's record is second best.
  if (s.launcher_exit) {
    p->exit = *s.launcher_exit;
  } else if (s.process_exit_code) {
    p->exit.source = ExitStatus::Source::kTracer;
    p->exit.code = *s.process_exit_code;
  }
  p->complete = s.launcher_exit.has_value() || s.process_exit_code.has_value();
  if (!p->complete) p->incomplete_reasons.push_back("ended without an exit record");
  const bool read_error = s.close_reason == v1::CLOSE_REASON_IO_ERROR;
  if (s.closed && (read_error || s.close_reason == v1::CLOSE_REASON_PROTOCOL_ERROR)) {
    p->complete = false;
    p->incomplete_reasons.push_back(
        (read_error ? "the stream ended with a read error"
                    : "the collector closed the stream after a protocol error") +
        (s.close_error.empty() ? "" : ": " + s.close_error));
  } else if (s.closed && s.close_reason == v1::CLOSE_REASON_COLLECTOR_SHUTDOWN && !p->complete) {
    p->incomplete_reasons.push_back("the collector stopped while the process was connected");
  }
  if (!s.has_handshake) p->incomplete_reasons.push_back("no handshake was received");
  // Decided over all streams (analysis.cc): an exec also ends a stream while its pid runs.
  p->closed_while_running = s.closed_while_running && !s.process_exit_code.has_value();
}

// The stream's timed records (drops, exit) onto CLOCK_REALTIME, as its events were.
void ShiftRecordsToRealtime(DecodedStream* s) {
  const int64_t offset = s->realtime_offset_ns;
  if (offset == 0) return;
  for (DropRecord& d : s->drops) {
    d.first_ns = ToRealtime(offset, d.first_ns);
    d.last_ns = ToRealtime(offset, d.last_ns);
  }
  s->process_exit_ns = ToRealtime(offset, s->process_exit_ns);
  s->realtime_offset_ns = 0;  // done: a second analysis of the same stream must not shift again
}

void FillTorchLayers(const DeviceCounters& c, TorchLayers* t) {
  const KindStats& allocated = c.kinds[kTorchAllocatedKind];
  const KindStats& reserved = c.kinds[kTorchReservedKind];
  t->present = allocated.allocations + reserved.allocations > 0;
  if (!t->present) return;
  t->allocated_peak_bytes = allocated.peak_bytes;
  t->reserved_peak_bytes = reserved.peak_bytes;
  const uint64_t at_peak = c.torch_reserved_at_allocated_peak;
  t->reserved_at_allocated_peak_bytes = at_peak;
  t->fragmentation_at_peak_bytes = at_peak - std::min(at_peak, allocated.peak_bytes);
  t->other_device_peak_bytes = c.kinds[3].peak_bytes;
}

void FillDeviceReport(const DecodedStream& s, const DeviceCounters& c, uint32_t index,
                      uint64_t first, DeviceReport* out) {
  DeviceReport& d = *out;
  d = c.report;
  d.index = index;
  auto info = s.device_info.find(d.index);
  if (info != s.device_info.end()) {
    d.has_info = true;
    d.name = info->second.name;
    d.uuid = info->second.uuid;
    d.total_memory_bytes = info->second.total_memory_bytes;
  }
  d.peak.seen = c.peak_pos != kNever;
  if (d.peak.seen) {
    d.peak.bytes = c.peak;
    d.peak.time_abs_ns = c.peak_ns;
    d.peak.time_ns = Since(first, c.peak_ns);
  }
  for (uint8_t k = 0; k < kMemoryKinds; ++k) {
    if (c.kinds[k].allocations + c.kinds[k].releases > 0) d.by_kind[MemoryKindName(k)] = c.kinds[k];
    if (!IsDeviceMemory(k)) continue;
    d.live_at_exit_count += c.kinds[k].live_at_exit_count;
    d.live_at_exit_bytes += c.kinds[k].live_at_exit_bytes;
  }
  FillTorchLayers(c, &d.torch);
  d.not_program.static_allocations = c.kinds[6].allocations + c.kinds[7].allocations;
  d.not_program.static_releases = c.kinds[6].releases + c.kinds[7].releases;
  auto tracer = s.tracer_memory.find(d.index);
  if (tracer != s.tracer_memory.end()) {
    d.not_program.tracer_bytes = tracer->second.bytes;
    d.not_program.tracer_description = tracer->second.description;
  }
}

// Bytes live at the peak by allocating stack, the largest `top` (ties: the lower wire id).
void FillTopStacks(const std::vector<const Allocation*>& live, StackResolver& resolver, size_t top,
                   DevicePeak* peak) {
  std::unordered_map<uint32_t, StackAtPeak> by_stack;
  for (const Allocation* a : live) {
    if (a->stack_id == 0) continue;
    StackAtPeak& g = by_stack[a->stack_id];
    g.bytes += a->bytes;
    ++g.count;
  }
  std::vector<std::pair<uint32_t, StackAtPeak>> order(by_stack.begin(), by_stack.end());
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    return std::tie(y.second.bytes, x.first) < std::tie(x.second.bytes, y.first);
  });
  if (order.size() > top) order.resize(top);
  for (auto& [id, g] : order) {
    g.frame = resolver.UserFrameText(resolver.Resolve(id));
    peak->top_stacks.push_back(std::move(g));
  }
}

// at_peak[slot]: the device allocations live at that slot's peak, in any order (reordered).
void FillPeakContents(std::vector<std::vector<const Allocation*>>& at_peak,
                      const PhaseTracker& phases, const DecodedStream& s, size_t top_allocations,
                      uint64_t first, ProcessReport* p) {
  // One for every device's stacks and forward lines: each stack is symbolized once.
  std::unique_ptr<StackResolver> resolver;
  if (!s.stacks.empty()) resolver = std::make_unique<StackResolver>(s);
  for (size_t slot = 0; slot < at_peak.size(); ++slot) {
    std::map<std::pair<int32_t, uint8_t>, LiveGroup> groups;
    for (const Allocation* a : at_peak[slot]) {
      LiveGroup& g = groups[{a->phase, a->kind}];
      ++g.count;
      g.bytes += a->bytes;
    }
    DevicePeak& peak = p->devices[slot].peak;
    for (auto& [key, g] : groups) {
      g.phase = phases.NameOf(key.first);
      g.kind = MemoryKindName(key.second);
      peak.live_by_phase_and_kind.push_back(std::move(g));
    }
    std::stable_sort(peak.live_by_phase_and_kind.begin(), peak.live_by_phase_and_kind.end(),
                     [](const LiveGroup& x, const LiveGroup& y) { return x.bytes > y.bytes; });
    std::vector<const Allocation*>& ids = at_peak[slot];
    peak.live_count = ids.size();
    const size_t top = std::min(top_allocations, ids.size());
    // Births have distinct positions, so this order is total: the result does not depend on
    // the order the allocations were collected in.
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(top), ids.end(),
                      [](const Allocation* x, const Allocation* y) {
                        return std::tie(y->bytes, x->birth_pos) < std::tie(x->bytes, y->birth_pos);
                      });
    for (size_t i = 0; i < top; ++i) {
      const Allocation& a = *ids[i];
      LiveAllocation& live = peak.largest.emplace_back();
      live.address = a.address;
      live.bytes = a.bytes;
      live.kind = MemoryKindName(a.kind);
      live.phase = phases.NameOf(a.phase);
      live.api = s.Resolve(a.api_id);
      live.thread_id = a.thread_id;
      live.birth_ns = Since(first, a.birth_ns);
      if (a.attribution == 0 || a.attribution >= s.attribution.births.size()) continue;
      const BirthAttribution& b = s.attribution.births[a.attribution];
      live.attributed = true;
      live.module = s.attribution.Name(v1::ATTRIBUTION_KIND_MODULE, b.module);
      live.op = s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.op);
      live.inner_op = s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.inner_op);
      live.backward = b.backward;
      live.linked = b.linked;
      live.module_inherited = b.module_inherited;
      live.module_from_earlier = b.module_from_earlier;
      live.forward_op = s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.forward_op);
      live.forward_inner_op = s.attribution.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.forward_inner_op);
      if (b.forward_stack != 0 && resolver != nullptr) {
        live.forward_line = resolver->PythonLineText(resolver->Resolve(b.forward_stack));
      }
    }
    if (resolver != nullptr) FillTopStacks(ids, *resolver, top_allocations, &peak);
  }
}

PhaseWindow WindowOf(const OccurrenceRecord& o, size_t slot) {
  return PhaseWindow{o.entry(slot), o.peak(slot), o.peak(slot) - o.entry(slot)};
}

// Entry, peak and rise of a phase on one slot, each set from one occurrence (`list`: the
// phase's occurrences by start): the highest peak, the first, and the median of the rest.
void SetPhaseWindows(const std::vector<const OccurrenceRecord*>& list, size_t slot,
                     PhaseDeviceStats* d) {
  if (list.empty()) return;
  auto by_peak = [slot](const auto* x, const auto* y) { return x->peak(slot) < y->peak(slot); };
  static_cast<PhaseWindow&>(*d) =
      WindowOf(**std::max_element(list.begin(), list.end(), by_peak), slot);
  d->first = WindowOf(*list[0], slot);
  if (list.size() < 2) return;
  std::vector<const OccurrenceRecord*> rest(list.begin() + 1, list.end());
  auto by_rise = [slot](const auto* x, const auto* y) {
    return x->peak(slot) - x->entry(slot) < y->peak(slot) - y->entry(slot);
  };
  std::stable_sort(rest.begin(), rest.end(), by_rise);
  d->steady = WindowOf(*rest[(rest.size() - 1) / 2], slot);  // the lower median
  d->steady_of = rest.size();
}

void FillPhaseReports(const PhaseTracker& phases, const OccurrenceLists& by_phase,
                      const std::vector<uint32_t>& slot_device, const DecodedStream& s,
                      uint64_t first, ProcessReport* p) {
  for (size_t i = 0; i < phases.names().size(); ++i) {
    const PhaseName& n = phases.names()[i];
    if (n.rollup) continue;
    PhaseReport r;
    static_cast<PhaseCounts&>(r) = n;
    r.domain = s.Resolve(n.domain_id);
    r.message = s.Resolve(n.message_id);
    r.first_open_ns = Since(first, n.first_open_ns);
    for (uint32_t slot = 0; slot < slot_device.size(); ++slot) {
      PhaseDeviceStats d;
      static_cast<PhaseCounters&>(d) = phases.counters(static_cast<int32_t>(i), slot);
      d.index = slot_device[slot];
      SetPhaseWindows(by_phase[i], slot, &d);
      r.devices.push_back(d);
    }
    p->phases.push_back(std::move(r));
  }
}

void FillDropReports(const DecodedStream& s, uint64_t first, ProcessReport* p) {
  std::map<int, DropSummary> drops;
  for (const DropRecord& d : s.drops) {
    DropSummary& sum = drops[d.source];
    sum.source = Named(d.source, {"unspecified", "cupti", "tracer_queue"});
    sum.total += d.count;
    const bool timed = d.first_ns != 0;
    sum.windows.push_back(DropWindow{d.count, timed ? Since(first, d.first_ns) : 0,
                                     timed ? Since(first, std::max(d.first_ns, d.last_ns)) : 0,
                                     timed});
  }
  for (auto& [source, sum] : drops) p->dropped.push_back(std::move(sum));
}

}  // namespace

const char* MemoryKindName(uint8_t kind) {
  return Named(kind, {"UNKNOWN", "PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED",
                      "DEVICE_STATIC", "MANAGED_STATIC", "TORCH_ALLOCATED", "TORCH_RESERVED"});
}

Accountant::Accountant(const AnalysisOptions& options, Retention retention, const PhaseRules* rules,
                       const DecodedStream* stream, StreamingStats* stats)
    : options_(options),
      retention_(retention),
      stats_(*stats),
      stream_(stream),
      scan_inference_(options.infer_phases),
      phases_(0, stream, rules) {}

void Accountant::SetCategoryPass(CategoryPass pass, const Accountant* previous,
                                 std::vector<uint8_t>* categories) {
  category_pass_ = pass;
  previous_ = previous;
  categories_ = categories;
  if (pass == CategoryPass::kClassify) categories_->clear();
  scan_inference_ = false;  // the phases are known by now
}

void Accountant::KeepOnlyClassifier() {
  live_ = AddressMap();
  std::vector<Allocation>().swap(pool_);
  std::vector<uint32_t>().swap(free_);
  std::vector<Event>().swap(swept_);
  for (std::vector<Allocation>& list : freed_at_peak_) std::vector<Allocation>().swap(list);
}

TensorLayer Accountant::LayerOf(uint32_t slot) const {
  if (devices_[slot].kinds[kTorchAllocatedKind].allocations > 0) {
    return TensorLayer::kTorchAllocated;
  }
  for (const Group& g : groups_[0]) {
    if (g.slot == slot && g.stats.allocations > 0 &&
        stream_->Resolve(g.id).find("Async") != std::string::npos) {
      return TensorLayer::kAsync;
    }
  }
  return TensorLayer::kDevice;
}

bool Accountant::IsTensor(const Allocation& a, TensorLayer layer) {
  if (!IsDeviceMemory(a.kind)) return false;
  switch (layer) {
    case TensorLayer::kTorchAllocated:
      return a.kind == kTorchAllocatedKind;
    case TensorLayer::kAsync: {
      auto [it, inserted] = async_api_.emplace(a.api_id, false);
      if (inserted) it->second = stream_->Resolve(a.api_id).find("Async") != std::string::npos;
      return it->second;
    }
    case TensorLayer::kDevice:
      break;
  }
  return true;
}

uint8_t Accountant::FinalCategory(const Allocation& a, const LifetimeClassifier& classifier,
                                  uint64_t end_ns) const {
  if (a.tag != 0) return static_cast<uint8_t>(a.tag | kFromObjects);
  const bool freed = a.death_pos != kNever;
  // The categories the program's objects named in the whole process (the previous pass's,
  // in a category pass): where they named gradients, say, an allocation they did not name
  // is no gradient.
  const uint32_t objects =
      previous_ != nullptr ? previous_->tagged_categories_ : tagged_categories_;
  return classifier.Categorize(a.birth_ns, a.phase, freed ? a.death_ns : end_ns,
                               freed ? a.death_phase : -1, freed, objects);
}

// kApply: a device allocation is born; its category, from the bytes kClassify wrote.
void Accountant::CategoryBirth(Allocation& a, uint32_t slot) {
  CategorySlot& c = category_slots_[slot];
  const uint8_t code = a.ordinal < categories_->size() ? (*categories_)[a.ordinal] : 0;
  const auto category = static_cast<uint8_t>(code & ~kFromObjects);
  if (category == 0 || category >= kCategoryCount || !IsTensor(a, slot_layer_[slot])) {
    c.other_live[a.caller_id] += a.bytes;
    return;
  }
  a.category = code;
  const bool objects = (code & kFromObjects) != 0;
  c.now.bytes[category] += a.bytes;
  ++c.allocations[category];
  if (objects) {
    c.now.objects[category] += a.bytes;
    ++c.objects_allocations[category];
  }
  if (c.now.bytes[category] > c.own_peak.bytes[category]) {
    c.own_peak.bytes[category] = c.now.bytes[category];
    c.own_peak.objects[category] = c.now.objects[category];
    c.own_peak_ns[category] = a.birth_ns;
  }
  c.tensor_live += a.bytes;
  if (c.tensor_live > c.tensor_peak || !c.tensor_peak_seen) {
    const DeviceCounters& d = devices_[slot];
    c.tensor_peak_seen = true;
    c.tensor_peak = c.tensor_live;
    c.tensor_peak_ns = a.birth_ns;
    c.at_tensor_peak = c.now;
    const uint64_t reserved = d.kind_live[kTorchReservedKind];
    c.cache_at_tensor_peak = reserved - std::min(reserved, d.kind_live[kTorchAllocatedKind]);
    c.other_at_tensor_peak = d.in_use - std::min(d.in_use, c.tensor_live);
    c.other_at_tensor_peak_by_library = c.other_live;
  }
}

void Accountant::CategoryDeath(const Allocation& a) {
  CategorySlot& c = category_slots_[a.slot];
  const auto category = static_cast<uint8_t>(a.category & ~kFromObjects);
  if (category == 0) {
    auto it = c.other_live.find(a.caller_id);
    if (it != c.other_live.end() && (it->second -= std::min(it->second, a.bytes)) == 0) {
      c.other_live.erase(it);
    }
    return;
  }
  c.now.bytes[category] -= a.bytes;
  if ((a.category & kFromObjects) != 0) c.now.objects[category] -= a.bytes;
  c.tensor_live -= a.bytes;
}

const std::vector<uint32_t>& Accountant::ModuleChain(uint32_t module_id) {
  auto [it, inserted] = module_chains_.try_emplace(module_id);
  if (!inserted) return it->second;
  // A name not defined yet counts as no module, for good: a tensor's bytes must leave the
  // nodes they entered.
  std::string path = stream_->attribution.Name(v1::ATTRIBUTION_KIND_MODULE, module_id);
  for (;;) {
    auto [node, added] =
        module_node_index_.try_emplace(path, static_cast<uint32_t>(module_nodes_.size()));
    if (added) module_nodes_.push_back(path);
    it->second.push_back(node->second);
    const size_t dot = path.rfind('.');
    if (path.empty() || path[0] == '<' || dot == std::string::npos) break;
    path.resize(dot);
  }
  return it->second;
}

void Accountant::AttributionLive(const Allocation& a, bool birth) {
  AttributionSlot& t = attribution_slots_[a.slot];
  const uint32_t i = a.attribution;
  if (t.live_bytes.size() <= i) {
    for (auto* v : {&t.live_bytes, &t.live_count, &t.peak_bytes, &t.peak_count}) {
      v->resize(i + 1, 0);
    }
    t.is_changed.resize(i + 1, 0);
  }
  t.live_bytes[i] = birth ? t.live_bytes[i] + a.bytes : t.live_bytes[i] - a.bytes;
  t.live_count[i] = birth ? t.live_count[i] + 1 : t.live_count[i] - 1;
  if (t.is_changed[i] == 0) {
    t.is_changed[i] = 1;
    t.changed.push_back(i);
  }
  const std::vector<BirthAttribution>& births = stream_->attribution.births;
  const BirthAttribution b = i < births.size() ? births[i] : BirthAttribution();
  const std::vector<uint32_t>& chain = ModuleChain(b.module);
  if (t.node_live.size() < module_nodes_.size()) {
    t.node_live.resize(module_nodes_.size(), 0);
    t.node_peak.resize(module_nodes_.size(), 0);
  }
  for (const uint32_t node : chain) {
    if (birth) {
      t.node_live[node] += a.bytes;
      t.node_peak[node] = std::max(t.node_peak[node], t.node_live[node]);
    } else {
      t.node_live[node] -= a.bytes;
    }
  }
  if (!module_nodes_[chain.front()].empty()) {
    if (birth) {
      t.module_live += a.bytes;
      t.module_peak = std::max(t.module_peak, t.module_live);
    } else {
      t.module_live -= a.bytes;
    }
  }
  if (birth && b.backward) {
    ++t.backward_allocations;
    t.backward_bytes += a.bytes;
    if (!b.linked) {
      ++t.unlinked_allocations;
      t.unlinked_bytes += a.bytes;
    }
  }
}

void Accountant::AttributionPeak(uint32_t slot, uint64_t ts) {
  AttributionSlot& t = attribution_slots_[slot];
  for (const uint32_t i : t.changed) {
    t.peak_bytes[i] = t.live_bytes[i];
    t.peak_count[i] = t.live_count[i];
    t.is_changed[i] = 0;
  }
  t.changed.clear();
  t.peak_ns = ts;
}

void Accountant::FillAttribution(const DecodedStream& s, const std::vector<uint32_t>& new_slot,
                                 uint64_t first, ProcessReport* p) const {
  if (!s.attribution.seen) return;
  const AttributionDecode& names = s.attribution;
  for (uint32_t slot = 0; slot < attribution_slots_.size(); ++slot) {
    const AttributionSlot& t = attribution_slots_[slot];
    DeviceAttribution& out = p->devices[new_slot[slot]].attribution;
    const KindStats& tensors = devices_[slot].kinds[kTorchAllocatedKind];
    if (tensors.allocations == 0) continue;
    out.given = true;
    out.tensor_peak_bytes = tensors.peak_bytes;
    out.tensor_peak_time_ns = Since(first, t.peak_ns);
    out.backward_allocations = t.backward_allocations;
    out.backward_bytes = t.backward_bytes;
    out.unlinked_backward_allocations = t.unlinked_allocations;
    out.unlinked_backward_bytes = t.unlinked_bytes;

    // At the peak, by outer operator and by module (two ids of one name merge).
    std::map<std::string, OperatorBytes> ops;
    std::map<std::string, ModuleBytes> modules;
    for (uint32_t i = 0; i < t.peak_count.size(); ++i) {
      if (t.peak_count[i] == 0) continue;
      const BirthAttribution b = i < names.births.size() ? names.births[i] : BirthAttribution();
      OperatorBytes& op = ops[names.Name(v1::ATTRIBUTION_KIND_OPERATOR, b.op)];
      op.bytes += t.peak_bytes[i];
      op.count += t.peak_count[i];
      ModuleBytes& m = modules[names.Name(v1::ATTRIBUTION_KIND_MODULE, b.module)];
      m.self_bytes += t.peak_bytes[i];
      m.count += t.peak_count[i];
    }
    for (auto& [name, op] : ops) {
      op.op = name;
      out.operators.push_back(op);
    }
    std::stable_sort(
        out.operators.begin(), out.operators.end(),
        [](const OperatorBytes& x, const OperatorBytes& y) { return x.bytes > y.bytes; });

    // The tree: a path's parent is the path without its last segment; a top-level path's is
    // the root module (`<GPT>`) when the process named exactly one.
    for (uint32_t node = 0; node < t.node_peak.size(); ++node) {
      if (t.node_peak[node] > 0) modules.try_emplace(module_nodes_[node]);
    }
    std::vector<std::string> roots;
    for (const auto& [path, m] : modules) {
      if (!path.empty() && path[0] == '<') roots.push_back(path);
    }
    const std::string root = roots.size() == 1 ? roots[0] : std::string();
    auto parent = [&](const std::string& path) -> std::string {
      if (path.empty() || path[0] == '<') return {};
      const size_t dot = path.rfind('.');
      return dot == std::string::npos ? root : path.substr(0, dot);
    };
    std::vector<std::string> paths;
    for (const auto& [path, m] : modules) paths.push_back(path);
    for (const std::string& path : paths) {  // every parent is a row
      for (std::string up = parent(path); !up.empty(); up = parent(up)) modules.try_emplace(up);
    }
    std::map<std::string, uint64_t> self_count;
    for (auto& [path, m] : modules) self_count[path] = std::exchange(m.count, 0);
    std::map<std::string, std::vector<std::string>> children;
    std::vector<std::string> tops;
    for (auto& [path, m] : modules) {
      m.module = path;
      if (path.empty()) {
        m.bytes = m.self_bytes;
        m.count = self_count[path];
        continue;
      }
      const std::string up = parent(path);
      (up.empty() ? tops : children[up]).push_back(path);
      for (std::string a = path; !a.empty(); a = parent(a)) {
        ModuleBytes& into = modules.find(a)->second;  // every parent is a row (above)
        into.bytes += m.self_bytes;
        into.count += self_count[path];
      }
    }
    // Over the run: each path's subtree at its highest, from the sweep; the one root's is
    // every module's.
    for (auto& [path, m] : modules) {
      auto node = module_node_index_.find(path);
      if (node != module_node_index_.end() && node->second < t.node_peak.size()) {
        m.own_peak_bytes = t.node_peak[node->second];
      }
      if (!root.empty() && path == root)
        m.own_peak_bytes = std::max(m.own_peak_bytes, t.module_peak);
    }
    // Depth-first, each node before its children, siblings by bytes at the peak.
    auto by_bytes = [&](std::vector<std::string>& list) {
      std::sort(list.begin(), list.end(), [&](const std::string& x, const std::string& y) {
        const ModuleBytes& a = modules[x];
        const ModuleBytes& b = modules[y];
        return std::tie(b.bytes, b.own_peak_bytes, a.module) <
               std::tie(a.bytes, a.own_peak_bytes, b.module);
      });
    };
    std::vector<std::pair<std::string, uint32_t>> todo;
    by_bytes(tops);
    for (auto it = tops.rbegin(); it != tops.rend(); ++it) todo.emplace_back(*it, 0);
    while (!todo.empty()) {
      auto [path, depth] = todo.back();
      todo.pop_back();
      ModuleBytes m = modules[path];
      m.depth = depth;
      out.modules.push_back(std::move(m));
      std::vector<std::string>& kids = children[path];
      by_bytes(kids);
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) todo.emplace_back(*it, depth + 1);
    }
    if (auto none = modules.find(std::string()); none != modules.end()) {
      out.modules.push_back(none->second);
    }
  }
}

void Accountant::EndClassify() {
  live_.ForEachValue([&](uint32_t index) {
    const Allocation& a = pool_[index];
    if (IsDeviceMemory(a.kind) && a.ordinal < categories_->size()) {
      (*categories_)[a.ordinal] = FinalCategory(a, *previous_->classifier_, previous_->end_ns_);
    }
  });
}

// A TensorCategory names the allocation live at its address: a tensor (the bridge's block)
// first, else device memory there (async mode's cudaMallocAsync).
void Accountant::Tag(const Event& e) {
  ++tags_;
  if (e.kind < kCategoryCount) tagged_categories_ |= 1u << e.kind;
  const bool known =
      e.device < direct_slot_.size() ? direct_slot_[e.device] != 0 : far_slot_.count(e.device) != 0;
  size_t found = AddressMap::kNotFound;
  if (known && e.kind != 0) {
    const uint32_t slot = SlotOf(e.device);
    found = live_.Find(Key(slot, e.a, kTorchAllocatedKind));
    if (found == AddressMap::kNotFound) {
      found = live_.Find(Key(slot, e.a, v1::MEMORY_KIND_DEVICE));
      if (found != AddressMap::kNotFound && !IsDeviceMemory(pool_[live_.ValueAt(found)].kind)) {
        found = AddressMap::kNotFound;
      }
    }
  }
  if (found == AddressMap::kNotFound) {
    ++tags_unmatched_;
    return;
  }
  Allocation& a = pool_[live_.ValueAt(found)];
  if (TagPriority(e.kind) > TagPriority(a.tag)) a.tag = e.kind;
}

void Accountant::FillCategories(const DecodedStream& s, ProcessReport* p) const {
  failed_.FillCategories(p);
  const uint64_t first = p->first_timestamp_abs_ns;
  for (uint32_t slot = 0; slot < category_slots_.size(); ++slot) {
    auto device = std::find_if(p->devices.begin(), p->devices.end(), [&](const DeviceReport& d) {
      return d.index == slot_device_[slot];
    });
    if (device == p->devices.end()) continue;
    const CategorySlot& c = category_slots_[slot];
    DeviceCategories& out = device->categories;
    out.given = true;
    out.tensor_layer = slot_layer_[slot] == TensorLayer::kTorchAllocated ? "torch_allocated"
                       : slot_layer_[slot] == TensorLayer::kAsync        ? "async"
                                                                         : "device";
    out.tensor_peak_bytes = c.tensor_peak;
    out.tensor_peak_time_ns = c.tensor_peak_seen ? Since(first, c.tensor_peak_ns) : 0;
    out.cache_at_tensor_peak_bytes = c.cache_at_tensor_peak;
    out.not_torch_at_tensor_peak_bytes = c.other_at_tensor_peak;
    out.cache_at_device_peak_bytes = c.cache_at_device_peak;
    out.not_torch_at_device_peak_bytes = c.other_at_device_peak;
    auto libraries = [&](const std::unordered_map<uint32_t, uint64_t>& live,
                         std::map<std::string, uint64_t>* named) {
      for (const auto& [id, bytes] : live) {
        if (bytes > 0) (*named)[id != 0 ? s.Resolve(id) : "(not unwound)"] += bytes;
      }
    };
    libraries(c.other_at_tensor_peak_by_library, &out.not_torch_at_tensor_peak_by_library);
    libraries(c.other_at_device_peak_by_library, &out.not_torch_at_device_peak_by_library);
    for (uint8_t k = 1; k < kCategoryCount; ++k) {
      if (c.allocations[k] == 0) continue;
      CategoryFigures& f = out.by_category[CategoryName(k)];
      f.at_tensor_peak = CategoryBytes{c.at_tensor_peak.bytes[k], c.at_tensor_peak.objects[k]};
      f.at_device_peak = CategoryBytes{c.at_device_peak.bytes[k], c.at_device_peak.objects[k]};
      f.at_end = CategoryBytes{c.now.bytes[k], c.now.objects[k]};
      f.own_peak = CategoryBytes{c.own_peak.bytes[k], c.own_peak.objects[k]};
      f.own_peak_time_ns = Since(first, c.own_peak_ns[k]);
      f.allocations = c.allocations[k];
      f.objects_allocations = c.objects_allocations[k];
    }
  }
}

void Accountant::SetInferred(const PhaseInferenceReport& outcome, std::vector<Event> ranges) {
  inferred_ = true;
  scan_inference_ = false;
  inference_ = outcome;
  SortEvents(&ranges);
  synthetic_ = std::move(ranges);
}

uint32_t Accountant::SlotOf(uint32_t device) {
  if (device < direct_slot_.size() && direct_slot_[device] != 0) return direct_slot_[device] - 1;
  if (device >= 4096) {
    auto it = far_slot_.find(device);
    if (it != far_slot_.end()) return it->second;
  }
  const auto slot = static_cast<uint32_t>(slot_device_.size());
  slot_device_.push_back(device);
  devices_.emplace_back().timeline.index = device;
  in_use_.push_back(0);
  freed_at_peak_.emplace_back();
  attribution_slots_.emplace_back();
  phases_.AddSlot();
  if (category_pass_ == CategoryPass::kApply) {
    category_slots_.emplace_back();
    auto layer = previous_->layer_by_device_.find(device);
    slot_layer_.push_back(layer == previous_->layer_by_device_.end() ? TensorLayer::kDevice
                                                                     : layer->second);
  }
  if (device < 4096) {
    if (direct_slot_.size() <= device) direct_slot_.resize(device + 1, 0);
    direct_slot_[device] = slot + 1;
  } else {
    far_slot_[device] = slot;
  }
  return slot;
}

uint32_t Accountant::GroupOf(int which, uint32_t slot, uint32_t id) {
  const uint64_t key = (static_cast<uint64_t>(slot) << 32) | id;
  // Programs allocate through few APIs and libraries: the last group usually matches.
  if (last_group_key_[which] == key) return last_group_[which];
  auto [it, inserted] = group_index_[which].emplace(key, 0);
  if (inserted) {
    it->second = static_cast<uint32_t>(groups_[which].size());
    groups_[which].push_back(Group{slot, id, OriginStats(), 0});
  }
  last_group_key_[which] = key;
  last_group_[which] = it->second;
  return it->second;
}

uint32_t Accountant::NewLive() {
  if (!free_.empty()) {
    const uint32_t index = free_.back();
    free_.pop_back();
    return index;
  }
  pool_.emplace_back();
  return static_cast<uint32_t>(pool_.size() - 1);
}

// An allocation dies at the current position (release, or a new allocation at its live
// address): the device's counters, and kept if it was live at the device's peak.
void Accountant::Die(uint32_t index, uint64_t ts, int32_t death_phase) {
  Allocation& a = pool_[index];
  a.death_pos = pos_;
  a.death_ns = ts;
  a.death_phase = death_phase;
  DeviceCounters& d = devices_[a.slot];
  d.kind_live[a.kind] -= a.bytes;
  if (a.kind == kTorchAllocatedKind) AttributionLive(a, /*birth=*/false);
  if (IsDeviceMemory(a.kind)) {
    // Here, not in Release: an allocation of another kind at a live address ends one too.
    d.in_use -= a.bytes;
    in_use_[a.slot] = d.in_use;
  }
  a.death_step = TimelineStep(a, ts);
  if (!IsDeviceMemory(a.kind)) return;
  if (category_pass_ == CategoryPass::kClassify && a.ordinal < categories_->size()) {
    (*categories_)[a.ordinal] = FinalCategory(a, *previous_->classifier_, previous_->end_ns_);
  } else if (category_pass_ == CategoryPass::kApply) {
    CategoryDeath(a);
  }
  if (d.peak_pos != kNever && a.birth_pos <= d.peak_pos) {
    freed_at_peak_[a.slot].push_back(a);
    ++kept_at_peak_;
    stats_.max_kept_at_peak = std::max(stats_.max_kept_at_peak, kept_at_peak_);
  }
}

// With kKeepAll, the step of a's device timeline for its birth or death at `ts`, made after
// the counters moved: device memory in use, or the module globals live. Returns the index of
// a device memory step, else kNoStep.
uint32_t Accountant::TimelineStep(const Allocation& a, uint64_t ts) {
  if (retention_ != Retention::kKeepAll) return kNoStep;
  DeviceCounters& d = devices_[a.slot];
  if (IsStaticMemory(a.kind)) {
    d.timeline.static_memory.push_back(MemoryStep{ts, d.kind_live[6] + d.kind_live[7]});
  }
  if (a.kind == kTorchReservedKind) {
    d.timeline.torch_reserved.push_back(ReservedStep{
        static_cast<uint32_t>(d.timeline.device_memory.size()), d.kind_live[kTorchReservedKind]});
  }
  if (!IsDeviceMemory(a.kind)) return kNoStep;
  d.timeline.device_memory.push_back(MemoryStep{ts, d.in_use});
  return static_cast<uint32_t>(d.timeline.device_memory.size() - 1);
}

void Accountant::Forget(uint32_t index) {
  const Allocation& a = pool_[index];
  if (IsDeviceMemory(a.kind)) {
    for (int g = 0; g < 2; ++g) groups_[g][a.group[g]].live -= a.bytes;
  }
  if (retention_ == Retention::kLiveAndPeak) free_.push_back(index);
  --live_count_;
}

void Accountant::Allocate(const Event& e, uint32_t slot) {
  const uint8_t kind = e.kind < kMemoryKinds ? e.kind : 0;
  DeviceCounters& d = devices_[slot];
  const uint64_t key = Key(slot, e.a, kind);
  const size_t found = live_.Find(key);
  uint32_t killed = kNone;
  if (found != AddressMap::kNotFound) {
    // The release was lost (dropped records) or never reported: the old allocation ends
    // here, so that the address is not counted twice.
    ++d.report.reallocated_live_address;
    killed = live_.ValueAt(found);
    live_.EraseAt(found);
    Die(killed, e.timestamp_ns, -1);
  }
  const uint32_t index = NewLive();
  ++live_count_;
  stats_.max_live = std::max(stats_.max_live, live_count_);
  const auto stream = static_cast<uint32_t>(e.c);
  pool_[index] =
      Allocation{e.a,    e.b,       pos_,        e.timestamp_ns, slot,       attribution_.innermost,
                 stream, e.name_id, e.caller_id, e.thread_id,    e.stack_id, kind};
  live_.Insert(key, index);
  if (kind == kTorchAllocatedKind) {
    pool_[index].attribution = e.aux_id;
    AttributionLive(pool_[index], /*birth=*/true);
  }

  KindStats& k = d.kinds[kind];
  ++k.allocations;
  k.allocated_bytes += e.b;
  d.kind_live[kind] += e.b;
  if (d.kind_live[kind] > k.peak_bytes) {
    k.peak_bytes = d.kind_live[kind];
    if (kind == kTorchAllocatedKind) {
      d.torch_reserved_at_allocated_peak = d.kind_live[kTorchReservedKind];
      AttributionPeak(slot, e.timestamp_ns);
    }
  }
  if (IsStaticMemory(kind)) {
    uint64_t& static_peak = d.report.not_program.static_peak_bytes;
    static_peak = std::max(static_peak, d.kind_live[6] + d.kind_live[7]);
  }
  if (IsDeviceMemory(kind)) {
    d.in_use += e.b;
    pool_[index].ordinal = next_ordinal_++;
    if (category_pass_ == CategoryPass::kClassify) {
      categories_->push_back(0);
    } else if (category_pass_ == CategoryPass::kApply) {
      CategoryBirth(pool_[index], slot);
    }
  }
  pool_[index].birth_step = TimelineStep(pool_[index], e.timestamp_ns);
  if (IsDeviceMemory(kind)) {
    if (d.in_use > d.peak || d.peak_pos == kNever) {
      d.peak = d.in_use;
      d.peak_pos = pos_;
      d.peak_ns = e.timestamp_ns;
      d.timeline.peak_step = pool_[index].birth_step;
      // None of those freed so far was live at this new peak.
      kept_at_peak_ -= freed_at_peak_[slot].size();
      freed_at_peak_[slot].clear();
      if (category_pass_ == CategoryPass::kApply) {
        CategorySlot& c = category_slots_[slot];
        c.at_device_peak = c.now;
        const uint64_t reserved = d.kind_live[kTorchReservedKind];
        c.cache_at_device_peak = reserved - std::min(reserved, d.kind_live[kTorchAllocatedKind]);
        c.other_at_device_peak = d.in_use - std::min(d.in_use, c.tensor_live);
        c.other_at_device_peak_by_library = c.other_live;
      }
    }
    in_use_[slot] = d.in_use;
    phases_.OnInUse(slot, d.in_use);
    for (int32_t phase : attribution_.names) {
      PhaseCounters& c = phases_.counters(phase, slot);
      ++c.allocations;
      c.allocated_bytes += e.b;
    }
    // By origin: the birth counts before the death of a block at the same address.
    const uint32_t ids[2] = {e.name_id, e.caller_id};
    for (int g = 0; g < 2; ++g) {
      const uint32_t group = GroupOf(g, slot, ids[g]);
      pool_[index].group[g] = group;
      Group& G = groups_[g][group];
      ++G.stats.allocations;
      G.stats.allocated_bytes += e.b;
      G.live += e.b;
      G.stats.peak_bytes = std::max(G.stats.peak_bytes, G.live);
    }
  }
  if (killed != kNone) Forget(killed);
}

void Accountant::Release(const Event& e, uint32_t slot) {
  const size_t found = live_.Find(Key(slot, e.a, e.kind));
  DeviceCounters& d = devices_[slot];
  if (found == AddressMap::kNotFound) {
    ++d.report.not_program.released_unknown_count;
    d.report.not_program.released_unknown_bytes += e.b;
    return;
  }
  const uint32_t index = live_.ValueAt(found);
  live_.EraseAt(found);
  const uint8_t kind = pool_[index].kind;
  const uint64_t bytes = pool_[index].bytes;
  KindStats& k = d.kinds[kind];
  ++k.releases;
  k.released_bytes += bytes;
  const bool device = IsDeviceMemory(kind);
  if (device) phases_.Attribute(e.thread_id, &attribution_);
  Die(index, e.timestamp_ns, device ? attribution_.innermost : -1);
  if (device) {
    for (int32_t phase : attribution_.names) {
      PhaseCounters& c = phases_.counters(phase, slot);
      ++c.frees;
      c.freed_bytes += bytes;
    }
  }
  Forget(index);
}

void Accountant::SweepOne(const Event& e) {
  if (scan_inference_) inference_scan_.Add(e);
  if (retention_ == Retention::kKeepAll) swept_.push_back(e);
  if (!any_ || e.timestamp_ns < first_) first_ = e.timestamp_ns;
  any_ = true;
  last_ = std::max(last_, e.timestamp_ns);
  switch (e.type) {
    case EventType::kRangeOpen:
      phases_.Open(e, in_use_, pos_);
      break;
    case EventType::kRangeClose:
      if (!phases_.Close(e, in_use_)) ++unmatched_range_closes_;
      break;
    case EventType::kMark:
      ++nvtx_marks_;
      break;
    case EventType::kCategory:
      Tag(e);
      break;
    case EventType::kRelease:
      failed_.OnMemoryEvent(e);
      Release(e, SlotOf(e.device));
      break;
    case EventType::kAllocate:
    case EventType::kFailedAllocation: {
      const uint32_t slot = SlotOf(e.device);
      failed_.OnMemoryEvent(e);
      phases_.Attribute(e.thread_id, &attribution_);
      if (e.type == EventType::kAllocate) {
        Allocate(e, slot);
      } else {
        // What held the device's memory then, for the post-mortem (oom.h).
        std::vector<HeldAllocation> live;
        live_.ForEachValue([&](uint32_t index) {
          const Allocation& a = pool_[index];
          if (a.slot != slot || !IsDeviceMemory(a.kind)) return;
          live.push_back(HeldAllocation{a.address, a.bytes, a.phase, a.caller_id, a.stack_id,
                                        a.kind, a.birth_ns, a.category});
        });
        failed_.OnFailed(*stream_, e, slot, attribution_, in_use_[slot], live);
      }
      break;
    }
    case EventType::kKernel: {
      last_ = std::max(last_, e.a);
      const uint32_t slot = SlotOf(e.device);
      DeviceCounters& d = devices_[slot];
      ++d.report.kernel_count;
      d.report.kernel_busy_ns += e.a > e.timestamp_ns ? e.a - e.timestamp_ns : 0;
      phases_.Attribute(e.thread_id, &attribution_);
      for (int32_t phase : attribution_.names) ++phases_.counters(phase, slot).kernels;
      break;
    }
  }
  ++pos_;
}

ProcessReport Accountant::Finish(DecodedStream& s, uint64_t events, uint64_t late_events,
                                 ProcessTimeline* timeline) {
  while (next_synthetic_ < synthetic_.size()) SweepOne(synthetic_[next_synthetic_++]);
  if (options_.infer_phases && !inferred_) {
    // Pass 1 of the inference ran with the sweep; when it finds the phases can be inferred,
    // this report is not used: the caller reads the process again (passes 2 and 3, then a
    // sweep with the inferred ranges).
    inference_ = inference_scan_.Decide(s, *phases_.rules(), &needs_inference_);
  }
  ProcessReport p;
  FillStreamFacts(s, &p);
  p.events = events;
  p.late_events = late_events;
  ShiftRecordsToRealtime(&s);
  if (options_.infer_phases) p.phase_inference = inference_;

  // Devices named only by the stream's records get a slot too.
  for (const auto& [index, info] : s.device_info) SlotOf(index);
  for (const auto& [index, t] : s.tracer_memory) SlotOf(index);

  // The exit record and the drop windows extend the process's time (0: not known).
  uint64_t first = any_ ? first_ : 0, last = last_;
  auto extend = [&](uint64_t from, uint64_t to) {
    if (from != 0 && (!any_ || from < first)) first = from;
    last = std::max(last, to);
  };
  extend(s.process_exit_ns, s.process_exit_ns);
  for (const DropRecord& d : s.drops) extend(d.first_ns, d.last_ns);
  p.first_timestamp_abs_ns = first;
  p.duration_ns = last - first;

  // What is still live closes at the end. What was live at each peak: still live and born by
  // then, or kept when freed.
  std::vector<const Allocation*> at_peak;
  live_.ForEachValue([&](uint32_t index) {
    const Allocation& a = pool_[index];
    KindStats& k = devices_[a.slot].kinds[a.kind];
    ++k.live_at_exit_count;
    k.live_at_exit_bytes += a.bytes;
    if (!IsDeviceMemory(a.kind)) return;
    for (int g = 0; g < 2; ++g) groups_[g][a.group[g]].stats.live_at_exit_bytes += a.bytes;
    const uint64_t peak_pos = devices_[a.slot].peak_pos;
    if (peak_pos != kNever && a.birth_pos <= peak_pos) at_peak.push_back(&a);
  });
  for (const std::vector<Allocation>& list : freed_at_peak_) {
    for (const Allocation& a : list) at_peak.push_back(&a);
  }
  phases_.CloseAll(last, in_use_);

  // Slots in device order.
  const size_t n_slots = slot_device_.size();
  std::vector<uint32_t> sorted = slot_device_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> new_slot;
  for (const uint32_t device : slot_device_) {
    new_slot.push_back(static_cast<uint32_t>(
        std::lower_bound(sorted.begin(), sorted.end(), device) - sorted.begin()));
  }
  failed_.Finish(s, first, &phases_, &p);  // counts in phases by the slots it was given
  phases_.ReorderSlots(new_slot);

  p.rolled_up_ranges = phases_.rolled_up_ranges();
  p.nvtx_marks = nvtx_marks_;
  p.unmatched_range_closes = unmatched_range_closes_;

  p.devices.resize(n_slots);
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    FillDeviceReport(s, devices_[slot], slot_device_[slot], first, &p.devices[new_slot[slot]]);
  }
  // Kernels without GPU times were seen at their launch, also when the tracer began counting
  // them after its handshake (the default does when PyTorch's tensors are unseen).
  for (const DeviceReport& d : p.devices) {
    if (d.kernel_count > 0 && d.kernel_busy_ns == 0) p.kernel_launches_enabled = true;
  }

  // By API and by calling module. Two ids with one text (a string sent again after a lost
  // batch) merge.
  for (int g = 0; g < 2; ++g) {
    for (const Allocation* a : at_peak)
      groups_[g][a->group[g]].stats.live_at_peak_bytes += a->bytes;
    for (const Group& G : groups_[g]) {
      DeviceReport& d = p.devices[new_slot[G.slot]];
      OriginStats& merged = (g == 0 ? d.by_api : d.by_library)[G.id != 0 ? s.Resolve(G.id)
                                                               : g == 0  ? "(unknown)"
                                                                         : "(not unwound)"];
      merged.allocations += G.stats.allocations;
      merged.allocated_bytes += G.stats.allocated_bytes;
      merged.peak_bytes = std::max(merged.peak_bytes, G.stats.peak_bytes);
      merged.live_at_peak_bytes += G.stats.live_at_peak_bytes;
      merged.live_at_exit_bytes += G.stats.live_at_exit_bytes;
    }
  }

  FillAttribution(s, new_slot, first, &p);
  std::vector<std::vector<const Allocation*>> peak_contents(n_slots);
  for (const Allocation* a : at_peak) peak_contents[new_slot[a->slot]].push_back(a);
  FillPeakContents(peak_contents, phases_, s, options_.top_allocations, first, &p);

  // Each phase's occurrences by start, for its report and for the lifetime classes.
  by_phase_ = phases_.OccurrencesByPhase();
  FillPhaseReports(phases_, by_phase_, sorted, s, first, &p);
  iterations_ = AddIterations(phases_, by_phase_, sorted, first, options_, &p);

  // Lifetime classes: of what was live at the peak, and with kKeepAll of every allocation.
  const bool exited = p.complete && p.exit.signal == 0;
  classifier_ = std::make_unique<LifetimeClassifier>(phases_, by_phase_, iterations_, exited);
  const LifetimeClassifier& classifier = *classifier_;
  end_ns_ = last;
  categories_given_ = HasTrainingPhases(phases_.names()) || tags_ > 0;
  p.categories_given = categories_given_;
  p.category_tags = tags_;
  p.category_tags_unmatched = tags_unmatched_;
  std::vector<TensorLayer> layers;
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    layers.push_back(LayerOf(slot));
    layer_by_device_[slot_device_[slot]] = layers.back();
  }
  auto classify = [&](const Allocation& a) {
    const bool freed = a.death_pos != kNever;
    return classifier.Classify(a.birth_ns, a.phase, freed ? a.death_ns : last,
                               freed ? a.death_phase : -1, freed);
  };
  if (HasTrainingPhases(phases_.names())) {
    for (const Allocation* a : at_peak) {
      LifetimeAtPeak& l = p.devices[new_slot[a->slot]].lifetime_at_peak;
      l.bytes_by_class[LifetimeClassName(classify(*a))] += a->bytes;
    }
    for (DeviceReport& d : p.devices) {
      LifetimeAtPeak& l = d.lifetime_at_peak;
      l.given = true;
      auto persistent = l.bytes_by_class.find("persistent");
      const uint64_t held = persistent == l.bytes_by_class.end() ? 0 : persistent->second;
      l.activation_memory_bytes = d.peak.bytes - std::min(d.peak.bytes, held);
    }
  }
  FillDropReports(s, first, &p);
  if (retention_ != Retention::kKeepAll) return p;

  for (Allocation& a : pool_) {
    if (categories_given_ && IsTensor(a, layers[a.slot])) {
      a.category = FinalCategory(a, classifier, last);
    }
    a.slot = new_slot[a.slot];
    if (!IsDeviceMemory(a.kind)) continue;
    const LifetimeClass lifetime_class = classify(a);
    a.lifetime_class = static_cast<uint8_t>(lifetime_class);
    if (!options_.keep_lifetimes) continue;
    const bool freed = a.death_pos != kNever;
    AllocationLifetime& row = p.lifetimes.emplace_back();
    row.device = sorted[a.slot];
    row.stream = a.stream;
    row.kind = MemoryKindName(a.kind);
    row.api = s.Resolve(a.api_id);
    row.library = s.Resolve(a.caller_id);
    row.address = a.address;
    row.bytes = a.bytes;
    row.birth_ns = Since(first, a.birth_ns);
    row.death_ns = freed ? static_cast<int64_t>(Since(first, a.death_ns)) : -1;
    row.birth_phase = phases_.NameOf(a.phase);
    row.death_phase = freed ? phases_.NameOf(a.death_phase) : std::string();
    row.birth_iteration = IterationOf(iterations_, a.birth_ns);
    row.death_iteration = freed ? IterationOf(iterations_, a.death_ns) : -1;
    row.lifetime_class = LifetimeClassName(lifetime_class);
    row.category = CategoryName(static_cast<uint8_t>(a.category & ~kFromObjects));
    row.category_from_objects = (a.category & kFromObjects) != 0;
  }
  if (timeline != nullptr) {
    timeline->devices.resize(n_slots);
    for (uint32_t slot = 0; slot < n_slots; ++slot) {
      DeviceTimeline& t = timeline->devices[new_slot[slot]];
      t = std::move(devices_[slot].timeline);
      for (auto* steps : {&t.device_memory, &t.static_memory}) {
        for (MemoryStep& step : *steps) step.time_ns = Since(first, step.time_ns);
      }
    }
    CaptureTimeline(s, swept_, pool_, phases_, p, options_.keep_lifetimes, timeline);
  }
  return p;
}

std::unique_ptr<EventOrder> OrderFor(bool sorted, const StreamingOptions& streaming,
                                     Accountant* accountant, StreamingStats* stats) {
  return MakeOrder(sorted, streaming, accountant, stats);
}

}  // namespace cumemtrace::internal
