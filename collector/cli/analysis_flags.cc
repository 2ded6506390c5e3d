#include "collector/cli/analysis_flags.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "collector/cli/progress_printer.h"

namespace cumemtrace {
namespace {

constexpr int kPhaseRules = 0x1000;
constexpr int kIteration = 0x1001;
constexpr int kNoInfer = 0x1002;

}  // namespace

std::vector<option> AnalysisOptionEntries() {
  return {{"phase-rules", required_argument, nullptr, kPhaseRules},
          {"iteration", required_argument, nullptr, kIteration},
          {"no-infer", no_argument, nullptr, kNoInfer}};
}

std::vector<option> WithAnalysisOptions(std::initializer_list<option> own) {
  std::vector<option> all(own);
  for (const option& o : AnalysisOptionEntries()) all.push_back(o);
  all.push_back(option{nullptr, 0, nullptr, 0});
  return all;
}

bool TakeAnalysisOption(int opt, const char* arg, AnalysisFlags* flags) {
  switch (opt) {
    case kPhaseRules: flags->phase_rules_file = arg; return true;
    case kIteration: flags->iteration = arg; return true;
    case kNoInfer: flags->infer = false; return true;
    default: return false;
  }
}

const char* AnalysisOptionsHelp() {
  return R"(Analysis:
      --phase-rules=FILE  map NVTX range names to phases with the rules in FILE, one per
                          line: "NAME = PHASE" or "/REGEX/ = PHASE" ('#' starts a comment
                          line; PHASE may be @rollup or @iteration). They come before the
                          built-in rules (forward, backward, optimizer, settling/free,
                          settling/nudged, energy, contrast, update; per-op ranges such as
                          "aten::mm" roll up into their phase). See docs/phases.md.
      --iteration=NAME    the range (or phase) that marks one iteration; by default a
                          range named step/iteration/train_step, else the repetition of
                          the top-level phases
      --no-infer          do not infer forward/backward/optimizer for PyTorch or LibTorch
                          programs that have no NVTX phases
)";
}

void PrintHelpWithAnalysisOptions(const char* help) {
  std::string text = help;
  const size_t at = text.find("%s");
  if (at != std::string::npos) text.replace(at, 2, AnalysisOptionsHelp());
  fputs(text.c_str(), stdout);
}

bool ToAnalysisOptions(const AnalysisFlags& flags, AnalysisOptions* options, std::string* error) {
  options->iteration_range = flags.iteration;
  options->infer_phases = flags.infer;
  auto printer = std::make_shared<ProgressPrinter>(
      STDERR_FILENO, ProgressPrinter::kShowAfterSeconds, [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      });
  options->progress = [printer](int pass, uint64_t done, uint64_t total) {
    (*printer)(pass, done, total);
  };
  if (flags.phase_rules_file.has_value()) {
    if (flags.phase_rules_file->empty()) {
      *error = "--phase-rules needs a file, not an empty string";
      return false;
    }
    auto rules = std::make_shared<PhaseRules>(PhaseRules::Defaults());
    if (!rules->AddFromFile(*flags.phase_rules_file, error)) return false;
    options->phase_rules = std::move(rules);
  }
  return true;
}

}  // namespace cumemtrace
