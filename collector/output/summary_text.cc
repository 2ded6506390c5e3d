// PrintSummaryText: the terminal summary. Human units everywhere, exact bytes where a
// number will be compared (the peak), columns aligned.
#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/output/summary.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::BaseName;
using internal::Bytes;
using internal::Format;
using internal::LifetimeClassLabel;
using internal::PhaseName;
using internal::PrintTable;
using internal::Row;

// 1234567 -> "1,234,567"
std::string Grouped(uint64_t value) {
  std::string out = std::to_string(value);
  for (int i = static_cast<int>(out.size()) - 3; i > 0; i -= 3) out.insert(i, ",");
  return out;
}

std::string Duration(uint64_t ns) {
  const double v = static_cast<double>(ns);
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1000000) return Format("%.1f us", v / 1e3);
  if (ns < 1000000000) return Format("%.1f ms", v / 1e6);
  if (ns < 600ull * 1000000000) return Format("%.3f s", v / 1e9);
  return Format("%.1f min", v / 60e9);
}

std::string At(uint64_t ns) { return "+" + Duration(ns); }

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string Plural(uint64_t n, const std::string& one, const std::string& many = "") {
  return Grouped(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

// A command line or a name on one terminal line: control characters escaped, long ones
// shortened (`python -c "..."` carries whole programs).
std::string OneLine(const std::string& text, size_t max_chars) {
  return internal::TerminalText(text, max_chars);
}

std::string ExitText(const ExitStatus& exit) {
  switch (exit.source) {
    case ExitStatus::Source::kLauncher:
      if (exit.signal != 0) {
        return "killed by signal " + std::to_string(exit.signal) +
               (exit.core_dumped ? " (core dumped)" : "");
      }
      return "exit code " + std::to_string(exit.code);
    case ExitStatus::Source::kTracer:
      return "exit code " + std::to_string(exit.code) + " (seen by the tracer)";
    default:
      return "exit unknown";
  }
}

// A titled table of `list`, one row per item under the header; nothing for an empty list.
template <typename List, typename F>
void Section(std::ostream& out, const std::string& indent, const char* title, Row header,
             const char* align, const List& list, F row) {
  if (list.empty()) return;
  out << indent << title << ":\n";
  std::vector<Row> rows{std::move(header)};
  for (const auto& item : list) rows.push_back(row(item));
  PrintTable(out, indent + "  ", rows, align);
}

// `rows` without column `c`: the gpu column, where there is one GPU.
void EraseColumn(std::vector<Row>& rows, size_t c) {
  for (Row& row : rows) {
    if (row.size() > c) row.erase(row.begin() + static_cast<std::ptrdiff_t>(c));
  }
}

// Which allocator holds the memory: a framework's own calls versus libraries' direct ones.
void PrintOrigins(std::ostream& out, const char* title,
                  const std::map<std::string, OriginStats>& groups) {
  if (groups.size() < 2) return;
  std::vector<std::pair<std::string, OriginStats>> sorted(groups.begin(), groups.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return x.second.live_at_peak_bytes > y.second.live_at_peak_bytes;
  });
  Section(out, "    ", title, {"", "at peak", "own peak", "allocations"}, "lrrr", sorted,
          [](const auto& origin) -> Row {
            const OriginStats& a = origin.second;
            return {origin.first, Bytes(a.live_at_peak_bytes), Bytes(a.peak_bytes),
                    Grouped(a.allocations)};
          });
}

// What the tensors are (report.h DeviceCategories): each category at the peaks and at its own,
// and what of its own peak the program's objects named.
void PrintCategories(std::ostream& out, const ProcessReport& p, const DeviceReport& d) {
  const DeviceCategories& c = d.categories;
  if (!c.given) return;
  const bool torch = c.tensor_layer == "torch_allocated";
  std::vector<Row> rows;
  if (torch) {
    rows.push_back(
        {"", "at tensor peak", "at device peak", "own peak", "at", "objects", "inferred"});
  } else {
    rows.push_back({"", "at peak", "own peak", "at", "objects", "inferred"});
  }
  for (const char* name : kCategoryOrder) {
    auto it = c.by_category.find(name);
    if (it == c.by_category.end()) continue;
    const CategoryFigures& f = it->second;
    Row row{name};
    if (torch) row.push_back(Bytes(f.at_tensor_peak.bytes));
    row.insert(row.end(), {Bytes(f.at_device_peak.bytes), Bytes(f.own_peak.bytes),
                           At(f.own_peak_time_ns), Bytes(f.own_peak.objects_bytes),
                           Bytes(f.own_peak.bytes - f.own_peak.objects_bytes)});
    rows.push_back(std::move(row));
  }
  auto beside = [&](const std::string& label, uint64_t at_tensor, uint64_t at_device) {
    Row row{label};
    if (torch) row.push_back(Bytes(at_tensor));
    row.push_back(Bytes(at_device));
    rows.push_back(std::move(row));
  };
  if (torch) {
    beside("PyTorch's cache", c.cache_at_tensor_peak_bytes, c.cache_at_device_peak_bytes);
  }
  std::set<std::string> libraries;
  for (const auto& [library, bytes] : c.not_torch_at_tensor_peak_by_library) {
    libraries.insert(library);
  }
  for (const auto& [library, bytes] : c.not_torch_at_device_peak_by_library) {
    libraries.insert(library);
  }
  for (const std::string& library : libraries) {
    auto bytes = [&library](const std::map<std::string, uint64_t>& m) {
      auto it = m.find(library);
      return it == m.end() ? uint64_t{0} : it->second;
    };
    beside("not PyTorch's: " + library, bytes(c.not_torch_at_tensor_peak_by_library),
           bytes(c.not_torch_at_device_peak_by_library));
  }
  out << "    by category:\n";
  PrintTable(out, "      ", rows, "l");
  if (torch) {
    out << "      (tensor peak " << Bytes(c.tensor_peak_bytes) << " at "
        << At(c.tensor_peak_time_ns)
        << "; objects: named by the program's parameters, buffers, .grad and optimizer state)\n";
  } else {
    out << "      (objects: named by the program's parameters, buffers, .grad and optimizer"
           " state)\n";
  }
  if (c.tensor_layer == "device" && p.allocator_mode == "native") {
    out << "      (of the segments PyTorch's caching allocator keeps, not of tensors: the"
           " allocator bridge sees tensors)\n";
  }
  if (p.category_tags_unmatched > 0) {
    out << "      (" << Plural(p.category_tags_unmatched, "tag")
        << " named no live allocation: ignored)\n";
  }
  if (p.category_tags == 0) {
    out << "      (no tags from the program's objects: every category is inferred, as for a"
           " LibTorch program)\n";
  }
}

constexpr size_t kTopRows = 10;

// `run --modules` / `--ops`: tensors at the tensor peak by module (the paths holding the most
// bytes of their own, with their subtree's) and by operator, the backward link, and where the
// largest allocations were born.
void PrintAttribution(std::ostream& out, const DeviceReport& d) {
  const DeviceAttribution& a = d.attribution;
  if (!a.given) return;
  std::vector<const ModuleBytes*> modules;
  bool named = false;
  for (const ModuleBytes& m : a.modules) {
    named = named || !m.module.empty();
    if (m.self_bytes > 0) modules.push_back(&m);
  }
  std::stable_sort(modules.begin(), modules.end(), [](const ModuleBytes* x, const ModuleBytes* y) {
    return x->self_bytes > y->self_bytes;
  });
  if (modules.size() > kTopRows) modules.resize(kTopRows);
  if (named && !modules.empty()) {
    out << "    tensors by module at the tensor peak (" << Bytes(a.tensor_peak_bytes) << " at "
        << At(a.tensor_peak_time_ns) << "):\n";
    std::vector<Row> rows{{"module", "own", "with submodules", "own peak"}};
    for (const ModuleBytes* m : modules) {
      rows.push_back({m->module.empty() ? "(no module)" : OneLine(m->module, 60),
                      Bytes(m->self_bytes), Bytes(m->bytes), Bytes(m->own_peak_bytes)});
    }
    PrintTable(out, "      ", rows, "lrrr");
    out << "      (own: born in the module itself; own peak: the module with its submodules at"
           " its highest)\n";
  }
  std::vector<OperatorBytes> ops = a.operators;
  const bool any_op =
      std::any_of(ops.begin(), ops.end(), [](const OperatorBytes& o) { return !o.op.empty(); });
  if (ops.size() > kTopRows) ops.resize(kTopRows);
  if (any_op) {
    Section(out, "    ", "tensors by operator at the tensor peak", {"operator", "count", "bytes"},
            "lrr", ops, [](const OperatorBytes& o) -> Row {
              return {o.op.empty() ? "(no operator)" : OneLine(o.op, 60), Grouped(o.count),
                      Bytes(o.bytes)};
            });
  }
  if (a.backward_allocations > 0) {
    out << "    backward tensors    " << Bytes(a.backward_bytes) << " in "
        << Plural(a.backward_allocations, "allocation") << " over the run";
    if (a.unlinked_backward_allocations > 0) {
      out << "; " << Bytes(a.unlinked_backward_bytes) << " ("
          << Plural(a.unlinked_backward_allocations, "allocation")
          << ") not linked to a forward operation";
    }
    out << '\n';
  }
  std::vector<const LiveAllocation*> born;
  for (const LiveAllocation& l : d.peak.largest) {
    if (l.attributed) born.push_back(&l);
  }
  Section(out, "    ", "largest at peak, where born", {"bytes", "where"}, "rl", born,
          [](const LiveAllocation* l) -> Row {
            return {Bytes(l->bytes), OneLine(BornText(*l), 120)};
          });
}

void PrintDevice(std::ostream& out, const ProcessReport& p, const DeviceReport& d) {
  out << "  GPU " << d.index;
  if (d.has_info) out << ": " << d.name << " (" << Bytes(d.total_memory_bytes) << ")";
  out << '\n';
  if (d.peak.seen) {
    out << "    peak device memory  " << Bytes(d.peak.bytes) << " (" << Grouped(d.peak.bytes)
        << " B) at " << At(d.peak.time_ns) << ", " << Plural(d.peak.live_count, "live allocation")
        << '\n';
  } else {
    out << "    peak device memory  none allocated\n";
  }
  Section(out, "    ", "live at peak", {"phase", "kind", "count", "bytes"}, "ll",
          d.peak.live_by_phase_and_kind, [](const LiveGroup& g) -> Row {
            return {PhaseName(g.phase), g.kind, Grouped(g.count), Bytes(g.bytes)};
          });
  Section(out, "    ", "largest at peak", {"bytes", "kind", "phase", "api", "born"}, "rlll",
          d.peak.largest, [](const LiveAllocation& a) -> Row {
            return {Bytes(a.bytes), a.kind, PhaseName(a.phase), a.api.empty() ? "-" : a.api,
                    At(a.birth_ns)};
          });
  Section(out, "    ", "top stacks at peak", {"bytes", "count", "where"}, "rrl", d.peak.top_stacks,
          [](const StackAtPeak& st) -> Row {
            return {Bytes(st.bytes), Grouped(st.count), st.frame};
          });
  if (d.torch.present) {
    const TorchLayers& t = d.torch;
    out << "    PyTorch tensors     peak " << Bytes(t.allocated_peak_bytes) << " ("
        << Grouped(t.allocated_peak_bytes) << " B, max_memory_allocated)\n";
    out << "    PyTorch reserved    peak " << Bytes(t.reserved_peak_bytes) << " ("
        << Grouped(t.reserved_peak_bytes) << " B, max_memory_reserved); at the tensor peak "
        << Bytes(t.reserved_at_allocated_peak_bytes) << ", " << Bytes(t.fragmentation_at_peak_bytes)
        << " of it not in tensors\n";
    out << "    not PyTorch's       peak " << Bytes(t.other_device_peak_bytes)
        << " (device memory its allocator never sees)\n";
  }
  PrintAttribution(out, d);
  PrintOrigins(out, "by API", d.by_api);
  PrintOrigins(out, "by library", d.by_library);
  // Only with training phases (report.h).
  if (d.lifetime_at_peak.given && !d.lifetime_at_peak.bytes_by_class.empty()) {
    std::vector<std::string> classes;
    for (const char* c : kLifetimeClassOrder) {
      auto it = d.lifetime_at_peak.bytes_by_class.find(c);
      if (it != d.lifetime_at_peak.bytes_by_class.end())
        classes.push_back(LifetimeClassLabel(c) + " " + Bytes(it->second));
    }
    out << "    at peak by lifetime " << Join(classes, ", ") << '\n';
    out << "    activation memory   " << Bytes(d.lifetime_at_peak.activation_memory_bytes)
        << " (peak - persistent)\n";
    // Native mode without the allocator bridge: the trace sees the caching allocator's
    // segments, which it keeps, so activations inside them are classed with the segment.
    if (p.allocator_mode == "native" && !d.torch.present) {
      out << "                        (of the segments PyTorch's caching allocator keeps, not of"
             " tensors: reads low)\n";
    }
  }
  PrintCategories(out, p, d);
  static const std::set<std::string> kShownAbove = {
      "DEVICE", "ARRAY", "DEVICE_STATIC", "MANAGED_STATIC", "TORCH_ALLOCATED", "TORCH_RESERVED"};
  std::vector<std::string> other;
  for (const auto& [kind, k] : d.by_kind) {
    if (kShownAbove.count(kind) > 0) continue;
    other.push_back(kind + " peak " + Bytes(k.peak_bytes) + " (" +
                    Plural(k.allocations, "allocation") + ")");
  }
  if (!other.empty())
    out << "    other memory        " << Join(other, ", ") << " (not in the peak)\n";
  const NotProgramMemory& n = d.not_program;
  std::vector<std::string> foreign;
  if (n.static_allocations > 0) {
    foreign.push_back("module statics " + Bytes(n.static_peak_bytes) + " (" +
                      Grouped(n.static_allocations) + ")");
  }
  if (n.tracer_bytes > 0) foreign.push_back("tracer " + Bytes(n.tracer_bytes));
  if (n.released_unknown_count > 0) {
    foreign.push_back("freed but allocated before tracing " + Bytes(n.released_unknown_bytes) +
                      " (" + Grouped(n.released_unknown_count) + ")");
  }
  if (!foreign.empty()) out << "    not the program's   " << Join(foreign, ", ") << '\n';
  if (d.live_at_exit_count > 0) {
    out << "    live at exit        " << Plural(d.live_at_exit_count, "allocation") << ", "
        << Bytes(d.live_at_exit_bytes) << '\n';
  }
  if (d.kernel_count > 0) {
    out << "    kernels             " << Grouped(d.kernel_count)
        << (d.kernel_busy_ns == 0 ? " launched" : ", busy " + Duration(d.kernel_busy_ns)) << '\n';
  }
  if (d.reallocated_live_address > 0) {
    out << "    warning: " << d.reallocated_live_address
        << " allocations reused a live address (a release was lost)\n";
  }
}

void PrintPhases(std::ostream& out, const ProcessReport& p) {
  if (p.phases.empty()) return;
  out << "  phases:\n";
  std::vector<Row> rows{{"phase", "n", "time", "gpu", "highest: at entry", "peak", "+above entry",
                         "first: +above", "steady: +above", "allocated", "freed", "failed"}};
  for (const PhaseReport& ph : p.phases) {
    // A phase without devices keeps this row of three.
    rows.push_back({OneLine(ph.name, internal::kMaxNameChars) + (ph.inferred ? " (inferred)" : "") +
                        (ph.still_open > 0 ? " (open at end)" : ""),
                    Grouped(ph.occurrences), Duration(ph.total_ns)});
    bool first = true;
    for (const PhaseDeviceStats& d : ph.devices) {
      // Devices a phase never touched would only add zero rows.
      if (!first && d.peak_bytes == 0 && d.allocations == 0 && d.frees == 0 &&
          d.failed_allocations == 0) {
        continue;
      }
      if (!first) rows.push_back({"", "", ""});
      first = false;
      rows.back().insert(
          rows.back().end(),
          {std::to_string(d.index), Bytes(d.bytes_at_entry), Bytes(d.peak_bytes),
           "+" + Bytes(d.peak_above_entry_bytes),
           ph.occurrences > 1 ? "+" + Bytes(d.first.peak_above_entry_bytes) : "-",
           d.steady_of > 0 ? "+" + Bytes(d.steady.peak_above_entry_bytes) : "-",
           Bytes(d.allocated_bytes), Bytes(d.freed_bytes), Grouped(d.failed_allocations)});
    }
  }
  if (p.devices.size() < 2) EraseColumn(rows, 3);
  PrintTable(out, "    ", rows, "l");
  out << "    (highest: the occurrence with the highest peak, so peak - at entry = +above entry;"
         " first: the first occurrence; steady: the median occurrence of the others)\n";
  if (p.rolled_up_ranges > 0) {
    out << "    (" << Grouped(p.rolled_up_ranges)
        << " per-op ranges, such as emit_nvtx's, are folded into their phases)\n";
  }
  if (p.phase_inference.applied) {
    out << "    (no NVTX phases: forward/backward";
    if (p.phase_inference.optimizers_inferred > 0) out << "/optimizer";
    out << " inferred from the autograd thread's " << p.phase_inference.signal << ")\n";
  }
}

std::string SignedBytes(int64_t bytes) {
  return (bytes < 0 ? "-" : "+") + Bytes(static_cast<uint64_t>(bytes < 0 ? -bytes : bytes));
}

// Appends a spread's median, min and max to `row`; "-" for each where it has no values.
template <typename F>
void AddSpread(Row& row, const Spread& s, F format) {
  for (int64_t v : {s.median, s.min, s.max}) row.push_back(s.count > 0 ? format(v) : "-");
}


std::string ExactBytes(uint64_t bytes) {
  return bytes < 1024 ? Bytes(bytes) : Bytes(bytes) + " (" + Grouped(bytes) + " B)";
}

std::string Verdict(const WouldFit& w) {
  return w.fits ? "yes (" + Bytes(w.available_bytes) + " available, " + Bytes(w.needed_bytes) +
                      " needed)"
                : "no, short by " + ExactBytes(w.short_by_bytes) + " (" +
                      Bytes(w.available_bytes) + " available, " + Bytes(w.needed_bytes) +
                      " needed)";
}

std::string Held(const std::vector<HeldGroup>& groups, const char* unnamed) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < groups.size() && i < 4; ++i) {
    parts.push_back((groups[i].name.empty() ? std::string(unnamed) : groups[i].name) + " " +
                    Bytes(groups[i].bytes));
  }
  if (groups.size() > 4) parts.push_back("...");
  return Join(parts, ", ");
}

// The largest allocations live at an out-of-memory that the text lists (the JSON has 10).
constexpr size_t kLargestHeldShown = 5;

// Whether the text shows a failure's post-mortem: PyTorch's own requests for a segment (its
// driver calls) are followed by its OOM, which says it all.
bool HasPostMortemText(const ProcessReport& p, const FailedAllocationReport& f) {
  const OomPostMortem& pm = f.post_mortem;
  if (pm.reason.empty()) return false;
  return !(p.torch.attached && pm.pool.empty() && p.torch.out_of_memory > 0 &&
           BaseName(f.caller).rfind("libc10_cuda", 0) == 0);
}

// Why a failed allocation did not fit and what would have let it (docs/oom.md).
void PrintPostMortem(std::ostream& out, const FailedAllocationReport& f) {
  const OomPostMortem& pm = f.post_mortem;
  out << "  out of memory at " << At(f.time_ns) << " on GPU " << f.device << " (" << f.api
      << (f.phase.empty() ? std::string() : ", in " + f.phase) << "): "
      << ExactBytes(pm.request_bytes) << " requested"
      << (pm.pool.empty() ? std::string()
                          : ", " + pm.pool + " pool, stream " + std::to_string(pm.stream))
      << "\n";
  out << "    why: " << pm.explanation << "\n";
  if (pm.cache_known) {
    out << "    device free " << ExactBytes(pm.device_free_bytes) << "; free in PyTorch's cache "
        << ExactBytes(pm.cache_free_bytes);
    if (!pm.pool.empty()) {
      out << "; largest free block of its pool " << ExactBytes(pm.largest_free_block_bytes);
    }
    out << "\n";
    if (pm.released_before_bytes > 0) {
      out << "    the allocator gave " << ExactBytes(pm.released_before_bytes)
          << " of cached segments back to the driver before it raised\n";
    }
    out << "    would have fit:\n";
    if (pm.expandable_segments_on) {
      out << "      expandable_segments:True  (already on)\n";
    } else {
      out << "      expandable_segments:True  " << Verdict(pm.expandable_segments) << "\n";
    }
    out << "      empty_cache() before      " << Verdict(pm.empty_cache) << "\n";
  } else {
    out << "    would have fit:\n";
  }
  out << "      a smaller request         up to " << ExactBytes(pm.largest_request_that_fits_bytes)
      << " would have fit\n";
  if (pm.cache_known && !pm.pools.empty()) {
    std::vector<Row> rows{{"pool", "stream", "segments", "allocated", "free", "free blocks",
                           "largest free"}};
    for (const CachePoolState& c : pm.pools) {
      const bool private_pool = c.pool_id_first != 0 || c.pool_id_second != 0;
      rows.push_back({c.pool + (c.expandable ? " (expandable)" : "") +
                          (private_pool ? " (private)" : ""),
                      std::to_string(c.stream), Grouped(c.segments), Bytes(c.allocated_bytes),
                      Bytes(c.free_bytes), Grouped(c.free_blocks),
                      ExactBytes(c.largest_free_block_bytes)});
    }
    out << "    PyTorch's cache then:\n";
    PrintTable(out, "      ", rows, "lrrrrrr");
  }
  out << "    held then " << Bytes(pm.held_bytes) << ": by phase "
      << Held(pm.held_by_phase, "(no phase)") << "; by library "
      << Held(pm.held_by_library, "(not unwound)") << "\n";
  if (!pm.held_by_stack.empty()) {
    out << "    by stack: " << Held(pm.held_by_stack, "?") << "\n";
  }
  if (pm.categories_given) {
    // Every category, as the figures add up to the tensors live then.
    std::vector<std::string> parts;
    for (const HeldGroup& g : pm.held_by_category) parts.push_back(g.name + " " + Bytes(g.bytes));
    out << "    by category: " << (parts.empty() ? std::string("none") : Join(parts, ", "))
        << "; tensors " << ExactBytes(pm.held_tensor_bytes) << ", not tensors "
        << Bytes(pm.held_bytes - std::min(pm.held_bytes, pm.held_tensor_bytes)) << "\n";
  }
  if (!pm.largest_held.empty()) {
    const bool categories = pm.categories_given;
    bool stacks = false;
    for (const HeldBlock& b : pm.largest_held) stacks |= !b.stack.empty();
    std::vector<Row> rows{{"bytes", "kind", "phase", "born", "library"}};
    if (categories) rows[0].push_back("category");
    if (stacks) rows[0].push_back("stack");
    for (size_t i = 0; i < pm.largest_held.size() && i < kLargestHeldShown; ++i) {
      const HeldBlock& b = pm.largest_held[i];
      Row row{Bytes(b.bytes), b.kind, b.phase.empty() ? "(no phase)" : b.phase, At(b.time_ns),
              b.library.empty() ? "(not unwound)" : b.library};
      if (categories) {
        row.push_back(b.category.empty()        ? "-"
                      : b.category_from_objects ? b.category
                                                : b.category + " (inferred)");
      }
      if (stacks) row.push_back(b.stack.empty() ? "?" : b.stack);
      rows.push_back(std::move(row));
    }
    out << "    largest held then:\n";
    PrintTable(out, "      ", rows,
               std::string("rllrl") + (categories ? "l" : "") + (stacks ? "l" : ""));
  }
}

// Per-phase figures over iterations 2..N, the first (warm-up) apart.
void PrintIterations(std::ostream& out, const ProcessReport& p) {
  const IterationReport& r = p.iterations;
  if (r.count == 0) return;
  auto time = [](int64_t ns) { return Duration(static_cast<uint64_t>(ns)); };
  out << "  iterations: " << r.count << (r.source == "range" ? " (range " : " (repeating ")
      << OneLine(r.range, internal::kMaxNameChars) << "); first " << time(r.warmup_ns);
  if (r.duration_ns.count > 0) {
    out << ", then median " << time(r.duration_ns.median) << " [" << time(r.duration_ns.min)
        << " .. " << time(r.duration_ns.max) << "]";
  }
  out << '\n';
  std::vector<Row> rows;
  if (p.devices.empty()) {  // no GPU memory: time is all there is
    rows.push_back({"phase", "time (median)", "min", "max", "first"});
    for (const IterationPhaseStats& s : r.phases) {
      rows.push_back({s.phase});
      AddSpread(rows.back(), s.time_ns, time);
      rows.back().push_back(s.in_warmup ? time(s.warmup_ns) : "-");
    }
    PrintTable(out, "    ", rows, "l");
    return;
  }
  rows.push_back({"phase", "gpu", "time (median)", "+above entry: median", "min", "max",
                  "net change", "first: +above", "first: net"});
  for (const IterationPhaseStats& s : r.phases) {
    bool first = true;
    for (const IterationPhaseDevice& d : s.devices) {
      rows.push_back({first ? s.phase : "", std::to_string(d.index),
                      first && s.time_ns.count > 0 ? time(s.time_ns.median) : ""});
      AddSpread(rows.back(), d.peak_above_entry_bytes, SignedBytes);
      const bool steady = d.peak_above_entry_bytes.count > 0;
      rows.back().insert(rows.back().end(),
                         {steady ? SignedBytes(d.net_change_bytes.median) : "-",
                          s.in_warmup ? SignedBytes(d.warmup_peak_above_entry_bytes) : "-",
                          s.in_warmup ? SignedBytes(d.warmup_net_change_bytes) : "-"});
      first = false;
    }
  }
  if (p.devices.size() < 2) EraseColumn(rows, 1);
  PrintTable(out, "    ", rows, "l");
}

void PrintProcess(std::ostream& out, const ProcessReport& p) {
  out << "process " << p.pid;
  if (!p.command_line.empty()) out << ": " << OneLine(Join(p.command_line, " "), 160);
  out << '\n';
  std::vector<std::string> facts{ExitText(p.exit)};
  facts.push_back("allocator " +
                  (p.allocator_mode.empty() ? std::string("not chosen by run") : p.allocator_mode));
  if (!p.pytorch_alloc_conf.empty()) facts.back() += " (" + p.pytorch_alloc_conf + ")";
  facts.push_back("traced for " + Duration(p.duration_ns));
  if (!p.hostname.empty()) facts.push_back("on " + p.hostname);
  out << "  " << Join(facts, ", ") << '\n';

  if (p.torch.attached) {
    out << "  tensors from PyTorch's allocator (torch " << p.torch.torch_version
        << "): " << Grouped(p.torch.blocks) << " blocks";
    if (p.torch.estimated_block_sizes > 0) {
      out << ", " << Grouped(p.torch.estimated_block_sizes) << " sizes estimated";
    }
    out << '\n';
    if (p.torch.counter_mismatches > 0 || p.torch.lost_events > 0) {
      out << "  warning: PyTorch's allocator counters disagree with its events at "
          << Plural(p.torch.counter_mismatches, "event") << " (" << Grouped(p.torch.lost_events)
          << " events lost): tensor figures are not exact\n";
    }
  } else if (p.torch.seen && !p.torch.reason.empty()) {
    out << "  PyTorch's tensors not seen, only its segments: " << p.torch.reason << '\n';
  }
  for (const std::string& reason : p.incomplete_reasons)
    out << "  warning: incomplete: " << reason << '\n';
  for (const std::string& damage : p.damage) out << "  warning: damaged stream: " << damage << '\n';
  for (const DropSummary& d : p.dropped) {
    out << "  warning: " << Grouped(d.total) << " records dropped (" << d.source << ")";
    std::vector<const DropWindow*> gaps;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const DropWindow& w : d.windows) {
      if (!w.has_window) continue;
      gaps.push_back(&w);
      lo = std::min(lo, w.first_ns);
      hi = std::max(hi, w.last_ns);
    }
    if (lo != UINT64_MAX) out << " between " << At(lo) << " and " << At(hi);
    out << "; figures around then are incomplete\n";
    // Each gap, so a reader knows which stretches of the timeline to distrust.
    for (size_t i = 0; i < gaps.size() && i < 5; ++i) {
      out << "    gap: " << Grouped(gaps[i]->count) << " records from " << At(gaps[i]->first_ns)
          << " to " << At(gaps[i]->last_ns) << '\n';
    }
    if (gaps.size() > 5) {
      out << "    ... and " << gaps.size() - 5 << " more gaps (summary.json lists them all)\n";
    }
  }
  if (p.lost_batches > 0 || !p.sequence_gaps.empty()) {
    out << "  warning: " << Plural(p.lost_batches, "event batch", "event batches") << " lost ("
        << Plural(p.sequence_gaps.size(), "sequence gap") << ")\n";
  }
  if (p.late_events > 0) {
    out << "  warning: " << Plural(p.late_events, "event")
        << " arrived later than the reorder window and were applied where they arrived,"
           " out of time order\n";
  }
  for (const Notice& n : p.notices) {
    out << "  " << (n.from_launcher ? "" : "tracer ") << (n.level.empty() ? "notice" : n.level)
        << ": " << n.text << '\n';
  }
  if (p.kernel_launches_enabled) {
    out << "  (kernels seen at their launch: counts, threads and phases, no GPU times; "
           "`run --kernels` records those)\n";
  } else if (!p.kernels_enabled && p.has_handshake) {
    out << "  (kernels not recorded: `run --kernels=launches` counts them at their launch, "
           "`run --kernels` records their GPU times)\n";
  }

  for (const DeviceReport& d : p.devices) PrintDevice(out, p, d);
  PrintPhases(out, p);
  PrintIterations(out, p);

  Section(out, "  ", "failed allocations",
          {"when", "api", "requested", "error", "gpu", "in use", "free/total", "phase"}, "rlrlrrrl",
          p.failed_allocations, [](const FailedAllocationReport& f) -> Row {
            return {At(f.time_ns),
                    f.api,
                    Bytes(f.requested_bytes) + " (" + Grouped(f.requested_bytes) + " B)",
                    f.error_name + " (" + std::to_string(f.error_code) + ")",
                    std::to_string(f.device),
                    Bytes(f.device_in_use_bytes),
                    Bytes(f.device_free_bytes) + " / " + Bytes(f.device_total_bytes),
                    PhaseName(f.phase)};
          });
  // A program that retries (a batch-size search) fails many times: the first three say it.
  constexpr size_t kPostMortems = 3;
  size_t shown = 0, more = 0;
  for (const FailedAllocationReport& f : p.failed_allocations) {
    if (!HasPostMortemText(p, f)) continue;
    if (shown < kPostMortems) {
      PrintPostMortem(out, f);
      ++shown;
    } else {
      ++more;
    }
  }
  if (more > 0) {
    out << "  (" << Plural(more, "more out-of-memory post-mortem") << " in summary.json)\n";
  }
  if (!p.driver_retries.empty()) {
    // One line per API and error: a PyTorch run has one per autograd thread.
    std::map<std::string, std::pair<uint64_t, const FailedAllocationReport*>> by_error;
    for (const FailedAllocationReport& f : p.driver_retries) {
      auto& entry = by_error[f.api + " " + f.error_name];
      if (entry.first++ == 0) entry.second = &f;
    }
    out << "  driver retries (failed driver calls retried at once, successfully; not failures"
           " the program saw):\n";
    for (const auto& [what, entry] : by_error) {
      out << "    " << what << " x" << entry.first << ", first " << At(entry.second->time_ns)
          << ", " << Bytes(entry.second->requested_bytes) << " requested\n";
    }
  }
}

// Distributed jobs: one line per rank, the highest, the spread, and per-phase peaks.
void PrintJob(std::ostream& out, const JobReport& job) {
  if (job.ranks.empty()) return;
  out << "\njob: " << job.ranks.size() << " ranks"
      << (job.world_size > 0 ? " of " + std::to_string(job.world_size) : std::string()) << " on "
      << Plural(job.hosts.size(), "host") << "; highest peak: rank " << job.highest_rank << ", "
      << Bytes(job.highest_peak_bytes) << "; imbalance "
      << std::to_string(static_cast<int>(job.imbalance * 1000 + 0.5) / 10.0).substr(0, 4)
      << "% (highest - lowest, over highest)\n";
  std::vector<std::string> phases;
  for (const RankFigures& r : job.ranks) {
    for (const auto& [name, bytes] : r.phase_peak_bytes) internal::AddOnce(phases, name);
  }
  std::vector<Row> rows{{"rank", "host", "pid", "gpu", "peak", "NCCL at peak"}};
  for (const std::string& phase : phases) rows[0].push_back(phase + " peak");
  for (const RankFigures& r : job.ranks) {
    Row row{std::to_string(r.rank),   r.hostname,          std::to_string(r.pid),
            std::to_string(r.device), Bytes(r.peak_bytes), Bytes(r.nccl_bytes_at_peak)};
    for (const std::string& phase : phases) {
      auto it = r.phase_peak_bytes.find(phase);
      row.push_back(it == r.phase_peak_bytes.end() ? "-" : Bytes(it->second));
    }
    rows.push_back(row);
  }
  PrintTable(out, "  ", rows, "llrr");
}

}  // namespace

std::string BornText(const LiveAllocation& a) {
  if (!a.attributed) return std::string();
  const std::string module = a.module.empty() ? std::string() : "module " + a.module;
  if (a.backward) {
    std::string text;
    if (a.linked) {
      text = "backward of " + (a.forward_op.empty() ? std::string("an operation") : a.forward_op);
      if (!a.forward_line.empty()) text += " at " + a.forward_line;
    } else {
      text = "backward" + (a.op.empty() ? std::string() : " (" + a.op + ")") +
             ", forward operation not found";
    }
    if (a.module_from_earlier && !module.empty()) {
      return text + " (" + module + ", from the forward operation before it)";
    }
    return module.empty() ? text : text + " (" + module + ")";
  }
  std::string op = a.inner_op.empty() ? a.op : a.inner_op + " (" + a.op + ")";
  if (op.empty() && module.empty()) return "born outside every operator and module";
  std::string text = "born";
  if (!op.empty()) text += " in " + op;
  if (!module.empty()) text += " in " + module;
  return text;
}

void PrintSummaryText(const Report& report, std::ostream& terminal) {
  // Names and notices come from the traced program: nothing in them may reach the terminal
  // as a control character, whichever line carries them.
  std::ostringstream out;
  if (!report.trace_file.empty()) out << "cumemtrace summary of " << report.trace_file << '\n';
  if (report.truncated) {
    out << "warning: the trace is truncated (" << report.truncation_reason
        << "); everything before the damage is shown\n";
  }
  if (report.processes.empty()) out << "no traced processes\n";
  PrintJob(out, report.job);
  // Launchers and shell helpers (a pyenv shim runs a dozen) are traced too; when they did
  // nothing worth showing, they get one line together instead of a section each.
  std::map<std::string, uint64_t> quiet;
  uint64_t quiet_count = 0;
  for (const ProcessReport& p : report.processes) {
    const bool nothing_to_show = p.devices.empty() && p.phases.empty() &&
                                 p.failed_allocations.empty() && p.notices.empty() &&
                                 p.damage.empty() && p.dropped.empty();
    if (nothing_to_show && report.processes.size() > 1) {
      ++quiet[p.command_line.empty() ? std::string("?") : BaseName(p.command_line[0])];
      ++quiet_count;
      continue;
    }
    out << '\n';
    PrintProcess(out, p);
  }
  if (quiet_count > 0) {
    std::vector<std::string> names;
    for (const auto& [name, n] : quiet)
      names.push_back(OneLine(name, internal::kMaxNameChars) +
                      (n > 1 ? " x" + std::to_string(n) : ""));
    out << '\n'
        << Plural(quiet_count, "more process", "more processes")
        << " with no GPU memory, phases or warnings: " << Join(names, ", ") << '\n';
  }
  terminal << internal::TerminalText(out.str(), SIZE_MAX, /*keep_newlines=*/true);
}

}  // namespace cumemtrace
