#include "collector/output/budgets.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::Bytes;
using internal::LifetimeClassLabel;
using internal::Row;

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// "gpu3" -> (kDevice, 3); false for anything else.
bool ParseScope(std::string_view text, Budget::Scope* scope, int64_t* value) {
  static const std::pair<const char*, Budget::Scope> kScopes[] = {{"gpu", Budget::Scope::kDevice},
                                                                  {"rank", Budget::Scope::kRank},
                                                                  {"pid", Budget::Scope::kPid}};
  for (const auto& [name, kind] : kScopes) {
    const std::string_view prefix(name);
    if (text.substr(0, prefix.size()) != prefix) continue;
    const std::string_view digits = text.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    *scope = kind;
    *value = std::strtoll(std::string(digits).c_str(), nullptr, 10);
    return true;
  }
  return false;
}

std::string Where(const BudgetInstance& i) {
  std::string where =
      i.device == kNoDevice ? "no GPU memory, " : "GPU " + std::to_string(i.device) + " of ";
  where += i.rank >= 0 ? "rank " + std::to_string(i.rank) + " (pid " + std::to_string(i.pid) + ")"
                       : "pid " + std::to_string(i.pid);
  if (i.has_time)
    where += " at +" + internal::Format("%.3f s", static_cast<double>(i.time_ns) / 1e9);
  return where;
}

// "836 MiB > 800 MiB"; in bytes when the two would read the same ("256 MiB > 256 MiB").
std::string Versus(uint64_t bytes, uint64_t limit, const char* relation) {
  if (Bytes(bytes) != Bytes(limit)) return Bytes(bytes) + relation + Bytes(limit);
  auto grouped = [](uint64_t value) {
    std::string out = std::to_string(value);
    for (int i = static_cast<int>(out.size()) - 3; i > 0; i -= 3) out.insert(i, ",");
    return out + " B";
  };
  return grouped(bytes) + relation + grouped(limit);
}

std::string Percent(uint64_t over, uint64_t limit) {
  if (limit == 0) return "";
  return " (+" + internal::Format("%.1f", 100.0 * static_cast<double>(over) / limit) + "%)";
}

bool InScope(const Budget& b, const BudgetFigureSet& set) {
  switch (b.scope) {
    case Budget::Scope::kEvery:
      return true;
    case Budget::Scope::kDevice:
      return static_cast<int64_t>(set.device) == b.scope_value;
    case Budget::Scope::kRank:
      return set.rank == b.scope_value;
    case Budget::Scope::kPid:
      return set.pid == b.scope_value;
  }
  return false;
}

std::string ScopeText(const Budget& b) {
  switch (b.scope) {
    case Budget::Scope::kEvery:
      return "";
    case Budget::Scope::kDevice:
      return "GPU " + std::to_string(b.scope_value);
    case Budget::Scope::kRank:
      return "rank " + std::to_string(b.scope_value);
    case Budget::Scope::kPid:
      return "pid " + std::to_string(b.scope_value);
  }
  return "";
}

std::string Label(const Budget& b) {
  const std::string name = b.label.empty() ? b.key : b.label;
  return name + (b.scope == Budget::Scope::kEvery ? "" : " (" + ScopeText(b) + ")");
}

// The short keys of every figure of the report, for the message of an unknown key; long
// lists (a test suite's phases) are cut.
std::string ValidKeys(const std::vector<BudgetFigureSet>& sets) {
  std::vector<std::string> keys;
  for (const BudgetFigureSet& set : sets) {
    for (const BudgetFigure& f : set.figures) {
      if (f.keys.back().rfind("rise:", 0) != 0) internal::AddOnce(keys, f.keys.back());
    }
  }
  if (keys.empty()) return "this trace has no device memory, so no figure a budget can name";
  constexpr size_t kShown = 24;
  std::string text = "valid keys here: ";
  for (size_t k = 0; k < keys.size() && k < kShown; ++k) text += (k ? ", " : "") + keys[k];
  if (keys.size() > kShown) text += ", and " + std::to_string(keys.size() - kShown) + " more";
  text += " (each phase also as phase:NAME and rise:NAME; a scope as KEY@gpuN, @rankN, @pidN)";
  return text;
}

}  // namespace

bool ParseByteSize(std::string_view text, uint64_t* bytes, std::string* error) {
  const std::string_view trimmed = Trim(text);
  size_t digits = 0;
  bool dot = false;
  while (digits < trimmed.size() && (std::isdigit(static_cast<unsigned char>(trimmed[digits])) ||
                                     (trimmed[digits] == '.' && !dot))) {
    dot = dot || trimmed[digits] == '.';
    ++digits;
  }
  const std::string number(trimmed.substr(0, digits));
  const std::string unit = Lower(Trim(trimmed.substr(digits)));
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"b", 1},
                                                          {"k", 1024.0},
                                                          {"kib", 1024.0},
                                                          {"m", 1048576.0},
                                                          {"mib", 1048576.0},
                                                          {"g", 1073741824.0},
                                                          {"gib", 1073741824.0},
                                                          {"t", 1099511627776.0},
                                                          {"tib", 1099511627776.0},
                                                          {"kb", 1e3},
                                                          {"mb", 1e6},
                                                          {"gb", 1e9},
                                                          {"tb", 1e12}};
  const double* scale = nullptr;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = &factor;
  }
  if (number.empty() || number == "." || scale == nullptr) {
    *error = "'" + std::string(text) +
             "' is not a size (a number and a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)";
    return false;
  }
  const double value = std::strtod(number.c_str(), nullptr) * *scale;
  if (!(value < 1.8e19)) {
    *error = "'" + std::string(text) + "' is too large";
    return false;
  }
  *bytes = static_cast<uint64_t>(std::llround(value));
  return true;
}

bool ParseBudget(std::string_view text, Budget* budget, std::string* error) {
  // The size never holds '=', a phase name might: split at the last one.
  const size_t eq = text.rfind('=');
  if (eq == std::string_view::npos || eq == 0) {
    *error = "a budget is KEY=SIZE or KEY@SCOPE=SIZE (e.g. peak=20GiB, forward@gpu1=8GiB), not '" +
             std::string(text) + "'";
    return false;
  }
  Budget b;
  b.text = std::string(text);
  b.key = std::string(text.substr(0, eq));
  if (!ParseByteSize(text.substr(eq + 1), &b.limit_bytes, error)) {
    *error = "budget '" + b.text + "': " + *error;
    return false;
  }
  const size_t at = b.key.rfind('@');
  if (at != std::string::npos && ParseScope(b.key.substr(at + 1), &b.scope, &b.scope_value)) {
    b.key.resize(at);
  }
  if (b.key.empty()) {
    *error = "budget '" + b.text + "' names no figure";
    return false;
  }
  *budget = std::move(b);
  return true;
}

std::vector<BudgetFigureSet> BudgetFigures(const Report& report) {
  std::vector<BudgetFigureSet> sets;
  for (const ProcessReport& p : report.processes) {
    const bool any_device = std::any_of(p.devices.begin(), p.devices.end(),
                                        [](const DeviceReport& d) { return d.peak.seen; });
    if (!any_device && !p.phases.empty()) {
      // A process that used no GPU memory met every limit on it: a CPU-only test in a traced
      // test session, a launcher such as torchrun. Its phases are known, with 0 bytes.
      BudgetFigureSet set{p.pid, p.rank, kNoDevice, {}};
      set.figures.push_back({{"peak"}, 0, false, 0});
      for (const PhaseReport& phase : p.phases) {
        set.figures.push_back({{"phase:" + phase.name, phase.name}, 0, false, 0});
        set.figures.push_back({{"rise:" + phase.name}, 0, false, 0});
      }
      sets.push_back(std::move(set));
    }
    for (const DeviceReport& d : p.devices) {
      if (!d.peak.seen) continue;
      BudgetFigureSet set{p.pid, p.rank, d.index, {}};
      set.figures.push_back({{"peak"}, d.peak.bytes, true, d.peak.time_ns});
      const LifetimeAtPeak& l = d.lifetime_at_peak;
      if (l.given) {
        set.figures.push_back({{"activation"}, l.activation_memory_bytes, true, d.peak.time_ns});
        for (const char* c : kLifetimeClassOrder) {
          const auto it = l.bytes_by_class.find(c);
          const std::string label = LifetimeClassLabel(c);
          std::vector<std::string> keys = {"lifetime:" + label, label};
          if (label != c) keys.insert(keys.begin() + 1, std::string("lifetime:") + c);
          set.figures.push_back(
              {keys, it == l.bytes_by_class.end() ? 0 : it->second, true, d.peak.time_ns});
        }
      }
      // Each category's own peak (docs/phases.md "Categories"): what it needed at most. The
      // short key only where no lifetime class has the name (activation, gradient and
      // temporary keep naming the classes, as before categories).
      if (d.categories.given) {
        for (const char* name : kCategoryOrder) {
          const auto it = d.categories.by_category.find(name);
          const bool any = it != d.categories.by_category.end();
          std::vector<std::string> keys = {std::string("category:") + name};
          const bool lifetime_name = std::any_of(
              std::begin(kLifetimeClassOrder), std::end(kLifetimeClassOrder),
              [name](const char* c) { return LifetimeClassLabel(c) == name || c == std::string(name); });
          if (!lifetime_name) keys.push_back(name);
          set.figures.push_back({keys, any ? it->second.own_peak.bytes : 0, any,
                                 any ? it->second.own_peak_time_ns : 0});
        }
      }
      for (const PhaseReport& phase : p.phases) {
        for (const PhaseDeviceStats& s : phase.devices) {
          if (s.index != d.index) continue;
          set.figures.push_back({{"phase:" + phase.name, phase.name}, s.peak_bytes, false, 0});
          set.figures.push_back({{"rise:" + phase.name}, s.peak_above_entry_bytes, false, 0});
        }
      }
      sets.push_back(std::move(set));
    }
  }
  return sets;
}

bool BudgetEvaluation::Exceeded() const {
  return std::any_of(results.begin(), results.end(), [](const BudgetResult& r) {
    return r.outcome == BudgetResult::Outcome::kExceeded;
  });
}

bool BudgetEvaluation::Unknown() const {
  return std::any_of(results.begin(), results.end(), [](const BudgetResult& r) {
    return r.outcome == BudgetResult::Outcome::kUnknown;
  });
}

BudgetEvaluation EvaluateBudgets(const Report& report, const std::vector<Budget>& budgets) {
  const std::vector<BudgetFigureSet> sets = BudgetFigures(report);
  BudgetEvaluation evaluation;
  for (const Budget& budget : budgets) {
    BudgetResult r;
    r.budget = budget;
    // Which figures the key names, anywhere in the report: more than one is ambiguous (a
    // phase named like a lifetime class), whatever the scope.
    std::set<std::string> matched;
    for (const BudgetFigureSet& set : sets) {
      for (const BudgetFigure& f : set.figures) {
        if (std::find(f.keys.begin(), f.keys.end(), budget.key) != f.keys.end()) {
          matched.insert(f.keys.front());
        }
      }
    }
    if (matched.size() > 1) {
      r.error = "budget '" + budget.text + "': '" + budget.key + "' names several figures (";
      for (const std::string& key : matched) r.error += (key == *matched.begin() ? "" : ", ") + key;
      r.error += "); use the qualified key";
      evaluation.results.push_back(std::move(r));
      continue;
    }
    if (matched.empty()) {
      r.error = "budget '" + budget.text + "': no figure '" + budget.key + "' in this trace; " +
                ValidKeys(sets);
      evaluation.results.push_back(std::move(r));
      continue;
    }
    r.figure = *matched.begin();
    for (const BudgetFigureSet& set : sets) {
      if (!InScope(budget, set)) continue;
      for (const BudgetFigure& f : set.figures) {
        if (f.keys.front() != r.figure) continue;
        const BudgetInstance instance{set.pid, set.rank,   set.device,
                                      f.bytes, f.has_time, f.time_ns};
        if (r.measured++ == 0 || instance.bytes > r.highest.bytes) r.highest = instance;
        if (instance.bytes > budget.limit_bytes) r.over.push_back(instance);
      }
    }
    if (r.measured == 0) {
      r.error = "budget '" + budget.text + "': " + ScopeText(budget) + " has no figure '" +
                budget.key + "'";
    } else {
      r.outcome = r.over.empty() ? BudgetResult::Outcome::kMet : BudgetResult::Outcome::kExceeded;
      std::stable_sort(
          r.over.begin(), r.over.end(),
          [](const BudgetInstance& a, const BudgetInstance& b) { return a.bytes > b.bytes; });
    }
    evaluation.results.push_back(std::move(r));
  }
  return evaluation;
}

std::string BudgetTable(const BudgetEvaluation& evaluation) {
  std::vector<Row> rows = {{"budget", "limit", "highest", "where", "verdict"}};
  for (const BudgetResult& r : evaluation.results) {
    const std::string name = Label(r.budget);
    switch (r.outcome) {
      case BudgetResult::Outcome::kUnknown:
        rows.push_back({name, Bytes(r.budget.limit_bytes), "-", "-", "unknown figure"});
        break;
      case BudgetResult::Outcome::kMet:
        rows.push_back(
            {name, Bytes(r.budget.limit_bytes), Bytes(r.highest.bytes), Where(r.highest), "met"});
        break;
      case BudgetResult::Outcome::kExceeded: {
        const BudgetInstance& worst = r.over.front();
        const uint64_t by = worst.bytes - r.budget.limit_bytes;
        std::string verdict = "EXCEEDED by " + Bytes(by) + Percent(by, r.budget.limit_bytes);
        if (r.measured > 1) {
          verdict += " on " + std::to_string(r.over.size()) + " of " + std::to_string(r.measured) +
                     " devices";
        }
        rows.push_back(
            {name, Bytes(r.budget.limit_bytes), Bytes(worst.bytes), Where(worst), verdict});
        break;
      }
    }
  }
  std::ostringstream out;
  out << "budgets:\n";
  internal::PrintTable(out, "  ", rows, "lrrll");
  return out.str();
}

std::string BudgetJson(const BudgetEvaluation& evaluation) {
  using nlohmann::ordered_json;
  auto instance = [](const BudgetInstance& i) {
    return ordered_json{{"bytes", i.bytes},
                        {"pid", i.pid},
                        {"rank", i.rank >= 0 ? ordered_json(i.rank) : ordered_json()},
                        {"device", i.device == kNoDevice ? ordered_json() : ordered_json(i.device)},
                        {"time_ns", i.has_time ? ordered_json(i.time_ns) : ordered_json()}};
  };
  static const char* const kScopes[] = {"every", "gpu", "rank", "pid"};
  ordered_json budgets = ordered_json::array();
  for (const BudgetResult& r : evaluation.results) {
    ordered_json over = ordered_json::array();
    for (const BudgetInstance& i : r.over) over.push_back(instance(i));
    const bool measured = r.outcome != BudgetResult::Outcome::kUnknown;
    budgets.push_back({{"budget", r.budget.text},
                       {"key", r.budget.key},
                       {"figure", measured ? ordered_json(r.figure) : ordered_json()},
                       {"scope", kScopes[static_cast<int>(r.budget.scope)]},
                       {"scope_value", r.budget.scope == Budget::Scope::kEvery
                                           ? ordered_json()
                                           : ordered_json(r.budget.scope_value)},
                       {"limit_bytes", r.budget.limit_bytes},
                       {"outcome", r.outcome == BudgetResult::Outcome::kMet        ? "met"
                                   : r.outcome == BudgetResult::Outcome::kExceeded ? "exceeded"
                                                                                   : "unknown"},
                       {"measured", r.measured},
                       {"highest", measured ? instance(r.highest) : ordered_json()},
                       {"over", over},
                       {"error", r.error.empty() ? ordered_json() : ordered_json(r.error)}});
  }
  const ordered_json j = {{"schema", "cumemtrace.budgets/1"},
                          {"exceeded", evaluation.Exceeded()},
                          {"budgets", budgets}};
  return j.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

std::string BudgetVerdict(const BudgetEvaluation& evaluation) {
  std::vector<std::string> exceeded, unknown, met;
  for (const BudgetResult& r : evaluation.results) {
    switch (r.outcome) {
      case BudgetResult::Outcome::kUnknown:
        unknown.push_back(r.error);
        break;
      case BudgetResult::Outcome::kMet:
        met.push_back(r.budget.text);
        break;
      case BudgetResult::Outcome::kExceeded: {
        const BudgetInstance& worst = r.over.front();
        std::string line = Label(r.budget) + " by " + Bytes(worst.bytes - r.budget.limit_bytes) +
                           " (" + Versus(worst.bytes, r.budget.limit_bytes, " > ") + ", " +
                           Where(worst);
        if (r.over.size() > 1) line += ", and " + std::to_string(r.over.size() - 1) + " more";
        exceeded.push_back(line + ")");
        break;
      }
    }
  }
  auto join = [](const std::vector<std::string>& parts) {
    std::string text;
    for (const std::string& part : parts) text += (text.empty() ? "" : "; ") + part;
    return text;
  };
  if (!unknown.empty()) return join(unknown);
  if (!exceeded.empty()) return "budget exceeded: " + join(exceeded);
  return "budgets met: " + join(met);
}

bool ParseGrowthLimit(std::string_view text, GrowthLimit* limit, std::string* error) {
  const std::string_view trimmed = Trim(text);
  GrowthLimit l;
  l.text = std::string(trimmed);
  if (!trimmed.empty() && trimmed.back() == '%') {
    const std::string number(Trim(trimmed.substr(0, trimmed.size() - 1)));
    char* end = nullptr;
    const double percent = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(percent >= 0) ||
        !(percent < 1e9)) {
      *error =
          "--fail-above wants a percentage (5%) or a size (64MiB), not '" + std::string(text) + "'";
      return false;
    }
    l.fraction = percent / 100;
  } else {
    l.relative = false;
    if (!ParseByteSize(trimmed, &l.bytes, error)) {
      *error = "--fail-above wants a percentage (5%) or a size (64MiB): " + *error;
      return false;
    }
  }
  *limit = std::move(l);
  return true;
}

std::vector<Growth> GrowthBeyond(const std::vector<RunFigures>& runs, const GrowthLimit& limit) {
  std::vector<Growth> grown;
  if (runs.empty() || !runs.front().found) return grown;
  const RunFigures& base = runs.front();
  auto check = [&](const RunFigures& run, const std::string& figure, uint64_t before,
                   uint64_t after) {
    if (after <= before) return;
    const uint64_t rise = after - before;
    const bool beyond =
        limit.relative ? static_cast<double>(rise) > limit.fraction * static_cast<double>(before)
                       : rise > limit.bytes;
    if (beyond) grown.push_back({run.label, figure, before, after});
  };
  for (size_t i = 1; i < runs.size(); ++i) {
    const RunFigures& run = runs[i];
    if (!run.found) continue;
    check(run, "peak", base.peak_bytes, run.peak_bytes);
    if (base.lifetimes && run.lifetimes) {
      check(run, "activation", base.activation_memory_bytes, run.activation_memory_bytes);
      for (const char* c : kLifetimeClassOrder) {
        auto bytes = [c](const RunFigures& r) -> uint64_t {
          const auto it = r.lifetime_bytes.find(c);
          return it == r.lifetime_bytes.end() ? 0 : it->second;
        };
        check(run, "lifetime:" + LifetimeClassLabel(c), bytes(base), bytes(run));
      }
    }
    if (base.categories && run.categories) {
      for (const char* c : kCategoryOrder) {
        auto own = [c](const RunFigures& r) -> uint64_t {
          const auto it = r.category_own_peak.find(c);
          return it == r.category_own_peak.end() ? 0 : it->second;
        };
        check(run, std::string("category:") + c, own(base), own(run));
      }
    }
    for (const std::string& phase : run.phase_order) {
      const auto before = base.phases.find(phase);
      const auto after = run.phases.find(phase);
      if (before == base.phases.end() || after == run.phases.end()) continue;
      check(run, "phase:" + phase, before->second.peak_bytes, after->second.peak_bytes);
    }
  }
  return grown;
}

std::string GrowthVerdict(const std::vector<RunFigures>& runs, const GrowthLimit& limit,
                          const std::vector<Growth>& grown) {
  const std::string base = runs.empty() ? "" : runs.front().label;
  if (grown.empty()) return "no figure grew more than " + limit.text + " against " + base;
  std::string text = "grew more than " + limit.text + " against " + base + ": ";
  for (size_t i = 0; i < grown.size(); ++i) {
    const Growth& g = grown[i];
    const uint64_t rise = g.bytes - g.baseline_bytes;
    text += (i ? "; " : "") + g.run + ": " + g.figure + " +" + Bytes(rise);
    if (g.baseline_bytes > 0) {
      text += " (+" +
              internal::Format("%.1f", 100.0 * static_cast<double>(rise) /
                                           static_cast<double>(g.baseline_bytes)) +
              "%)";
    }
    text += ", " + Versus(g.baseline_bytes, g.bytes, " -> ");
  }
  return text;
}

}  // namespace cumemtrace
