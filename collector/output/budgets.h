// Memory budgets: upper limits on figures of the summary (the device peak, a phase's peak, a
// lifetime class at the peak, activation memory), checked per process and device, that
// `cumemtrace run --budget` and `cumemtrace check` turn into an exit status CI can act on.
// A budget names a figure by a key of the summary; the keys a report has come from one
// lookup (BudgetFigures), so that a new kind of figure becomes budgetable by adding it there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {

// Exit status of `run` (when the program itself succeeded), `check` and `compare
// --fail-above` when a budget is exceeded or a figure grew beyond the allowed growth. Chosen
// away from what programs exit with in practice: 0-5 (pytest, Python), 64-78 (sysexits.h),
// 101 (Rust's panic), 124-127 (timeout, the shell), 128+N (signals), 255 (exit(-1)).
constexpr int kExitBudgetExceeded = 86;

// "20GiB", "2 GiB", "1.5G", "512MiB", "8GB", "4096": K/M/G/T and KiB/MiB/GiB/TiB are
// powers of 1024, KB/MB/GB/TB powers of 1000, no unit (or B) is bytes. Case-insensitive.
bool ParseByteSize(std::string_view text, uint64_t* bytes, std::string* error);

// "KEY=SIZE" or "KEY@SCOPE=SIZE"; SCOPE is gpuN (device N of every process), rankN (every
// device of the process with rank N) or pidN.
struct Budget {
  enum class Scope { kEvery, kDevice, kRank, kPid };
  std::string text;   // as given, for messages
  std::string label;  // how the table and the verdict name it; the key when empty
  std::string key;
  Scope scope = Scope::kEvery;
  int64_t scope_value = 0;
  uint64_t limit_bytes = 0;
};
bool ParseBudget(std::string_view text, Budget* budget, std::string* error);

// One figure of one process on one device. `keys` are the names a budget may use for it;
// the first is the qualified one ("phase:forward"), the others its short forms ("forward").
struct BudgetFigure {
  std::vector<std::string> keys;
  uint64_t bytes = 0;
  bool has_time = false;  // figures taken at the device peak
  uint64_t time_ns = 0;
};
// The device of a process that used no GPU memory: its figures are 0.
inline constexpr uint32_t kNoDevice = 0xffffffffu;
struct BudgetFigureSet {
  uint32_t pid = 0;
  int32_t rank = -1;
  uint32_t device = 0;
  std::vector<BudgetFigure> figures;
};
// Every figure a budget can name, by process and device:
//   peak                  the device peak (device memory in use, highest)
//   phase:NAME, NAME      the highest device memory in use inside the phase
//   rise:NAME             that occurrence's rise above its entry (peak - at entry)
//   activation            activation memory (peak - persistent), with training phases
//   lifetime:CLASS, CLASS each lifetime class at the peak (persistent, forward-to-backward
//                         (also lifetime:activation), gradient, temporary, other), with
//                         training phases
// A process with phases that used no GPU memory has one set, on kNoDevice, of zeros.
std::vector<BudgetFigureSet> BudgetFigures(const Report& report);

// One budget's outcome over the processes and devices in its scope.
struct BudgetInstance {
  uint32_t pid = 0;
  int32_t rank = -1;
  uint32_t device = 0;
  uint64_t bytes = 0;
  bool has_time = false;
  uint64_t time_ns = 0;
};
struct BudgetResult {
  enum class Outcome { kMet, kExceeded, kUnknown };
  Budget budget;
  Outcome outcome = Outcome::kUnknown;
  std::string figure;                // the qualified key the budget matched
  std::string error;                 // kUnknown: why (unknown key, ambiguous key, nothing in scope)
  size_t measured = 0;               // processes x devices that have the figure in scope
  BudgetInstance highest;            // the highest measured
  std::vector<BudgetInstance> over;  // those over the limit, the most over first
};
struct BudgetEvaluation {
  std::vector<BudgetResult> results;  // in the order of the budgets
  bool Exceeded() const;
  bool Unknown() const;  // a budget named no figure of the report: a usage error
};
// Pure: the same report and budgets give the same evaluation.
BudgetEvaluation EvaluateBudgets(const Report& report, const std::vector<Budget>& budgets);

// A table of every budget (limit, highest figure, where, verdict), for the terminal.
std::string BudgetTable(const BudgetEvaluation& evaluation);
// The evaluation as JSON (schema "cumemtrace.budgets/1", docs/cli.md), for `check --json`.
std::string BudgetJson(const BudgetEvaluation& evaluation);
// The closing line: each budget exceeded, by how much and where; or that all were met; or
// the usage errors. Without the "cumemtrace: " prefix and line end.
std::string BudgetVerdict(const BudgetEvaluation& evaluation);

// `compare --fail-above`: how much a figure may grow against the baseline run, as a
// fraction of the baseline's figure ("5%") or in bytes ("64MiB").
struct GrowthLimit {
  bool relative = true;
  double fraction = 0;  // 0.05 for "5%"
  uint64_t bytes = 0;
  std::string text;
};
bool ParseGrowthLimit(std::string_view text, GrowthLimit* limit, std::string* error);

// A figure of a run that grew beyond the limit against the first run: the peak, activation
// memory, a lifetime class at the peak (lifetime:CLASS) or a phase's peak (phase:NAME), with
// the keys budgets use. Figures one of the two runs lacks are not compared.
struct Growth {
  std::string run;  // the label
  std::string figure;
  uint64_t baseline_bytes = 0;
  uint64_t bytes = 0;
};
std::vector<Growth> GrowthBeyond(const std::vector<RunFigures>& runs, const GrowthLimit& limit);
// "grew more than 5% against BASE: B: peak +12.0% (836 MiB -> 937 MiB); ..." or, with none,
// "no figure grew more than 5% against BASE". Without prefix and line end.
std::string GrowthVerdict(const std::vector<RunFigures>& runs, const GrowthLimit& limit,
                          const std::vector<Growth>& grown);

}  // namespace cumemtrace
