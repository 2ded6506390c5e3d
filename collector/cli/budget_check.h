// Budgets on the command line (`--budget KEY=SIZE`, run and check) and the file of budgets a
// traced pytest session asks for (its gpu_memory_limit markers), evaluated over a Report and
// turned into an exit status.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/output/budgets.h"

namespace cumemtrace {

// The file `run` names in CUMEMTRACE_BUDGET_FILE for the pytest plugin, in the output folder.
inline constexpr char kPytestBudgetFile[] = "pytest-budgets.jsonl";

// Reads budgets, one JSON object a line: {"key": "rise:pytest: t.py::test_a", "limit": "2 GiB",
// "test": "t.py::test_a"}. A missing file is no budgets. False with *error for a line that is
// not one.
bool ReadBudgetFile(const std::string& path, std::vector<Budget>* budgets, std::string* error);

// Evaluates `budgets` and prints the table (unless `quiet` and every budget was met) and the
// verdict line to `out`; an unknown figure goes to stderr as a usage error of `command`.
// Returns 0 (all met), kExitBudgetExceeded, or kExitUsage (a budget names no figure).
// With `json`, prints BudgetJson instead of the table and the line.
int CheckBudgets(const std::string& command, const Report& report,
                 const std::vector<Budget>& budgets, FILE* out, bool quiet, bool json = false);

}  // namespace cumemtrace
