#include "collector/cli/budget_check.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "collector/cli/cli_support.h"
#include "collector/cli/log.h"

namespace cumemtrace {

bool ReadBudgetFile(const std::string& path, std::vector<Budget>* budgets, std::string* error) {
  std::ifstream in(path);
  if (!in) return true;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    const std::string where = path + ":" + std::to_string(number);
    if (!entry.is_object() || !entry.contains("key") || !entry["key"].is_string() ||
        !entry.contains("limit") || !entry["limit"].is_string()) {
      *error = where + ": not a budget ({\"key\": ..., \"limit\": ...})";
      return false;
    }
    Budget budget;
    const std::string key = entry["key"].get<std::string>();
    if (!ParseByteSize(entry["limit"].get<std::string>(), &budget.limit_bytes, error)) {
      *error = where + ": " + *error;
      return false;
    }
    budget.key = key;
    budget.text = key + "=" + entry["limit"].get<std::string>();
    if (entry.contains("test") && entry["test"].is_string()) {
      budget.text = "gpu_memory_limit(\"" + entry["limit"].get<std::string>() + "\") of " +
                    entry["test"].get<std::string>();
      budget.label = "test " + entry["test"].get<std::string>();
    }
    budgets->push_back(std::move(budget));
  }
  return true;
}

int CheckBudgets(const std::string& command, const Report& report,
                 const std::vector<Budget>& budgets, FILE* out, bool quiet, bool json) {
  if (budgets.empty()) return 0;
  const BudgetEvaluation evaluation = EvaluateBudgets(report, budgets);
  const std::string verdict = BudgetVerdict(evaluation);
  if (evaluation.Unknown()) {
    UsageError(command, verdict);
    return kExitUsage;
  }
  const bool exceeded = evaluation.Exceeded();
  if (json) {
    const std::string text = BudgetJson(evaluation);
    fwrite(text.data(), 1, text.size(), out);
    fflush(out);
  } else if (!quiet || exceeded) {
    // One write: the program's children may still be writing to the same terminal.
    const std::string text = BudgetTable(evaluation) + "cumemtrace: " + verdict + "\n";
    fwrite(text.data(), 1, text.size(), out);
    fflush(out);
  }
  return exceeded ? kExitBudgetExceeded : 0;
}

}  // namespace cumemtrace
