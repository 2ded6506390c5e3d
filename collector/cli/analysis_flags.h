// Options that shape the analysis, shared by `run`, `report`, `compare` and `sweep`:
//   --phase-rules=FILE   range-name -> phase rules, before the built-in ones
//   --iteration=NAME     the range that marks one iteration
//   --no-infer           do not infer forward/backward for programs without NVTX phases
#pragma once

#include <getopt.h>

#include <optional>
#include <string>
#include <vector>

#include "collector/engine/engine.h"

namespace cumemtrace {

struct AnalysisFlags {
  std::optional<std::string> phase_rules_file;  // set when --phase-rules was given
  std::string iteration;
  bool infer = true;
};

// getopt_long entries for the flags above (long options only; codes from 0x1000 up).
std::vector<option> AnalysisOptionEntries();
// True when `opt` was one of them (and records it).
bool TakeAnalysisOption(int opt, const char* arg, AnalysisFlags* flags);
// The help text lines for them.
const char* AnalysisOptionsHelp();
// Loads the rules file. False with *error when it cannot be read or parsed.
bool ToAnalysisOptions(const AnalysisFlags& flags, AnalysisOptions* options, std::string* error);
// Prints `help` with its "%s" replaced by AnalysisOptionsHelp().
void PrintHelpWithAnalysisOptions(const char* help);
// getopt_long table: `own` entries, then the analysis entries, then the terminator.
std::vector<option> WithAnalysisOptions(std::initializer_list<option> own);

}  // namespace cumemtrace
