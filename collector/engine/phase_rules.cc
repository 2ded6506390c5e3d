#include "collector/engine/phase_rules.h"

#include <re2/re2.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cumemtrace {
namespace {

// Built-in rules, checked in order after the user's.
struct BuiltIn {
  const char* regex;
  const char* target;
};
const BuiltIn kBuiltIns[] = {
    // Per-op ranges (torch.autograd.profiler.emit_nvtx and friends) roll up.
    {R"(^(aten|autograd|c10d|cudnn|cublas|torch|prim|profiler)::)", "@rollup"},
    // Libraries that label their own calls in a domain of their own (NCCL: "NCCL:
    // ncclAllReduce"; CUB and Thrust: "CCCL: cub::DeviceRadixSort::SortPairs"): their
    // internals, not the program's phases. A user rule that names one comes first.
    {R"(^(CCCL|NCCL|NVSHMEM|cuDNN|cuBLAS|cuBLASLt|cuFFT|cuSPARSE|cuSPARSELt|cuSOLVER|cuRAND|)"
     R"(cuTENSOR|cuDSS|nvJPEG|NPP|nvCOMP|TensorRT|DALI): )",
     "@rollup"},
    {R"(^(step|iteration|iter|train[_ ]?step|training[_ ]?step)( ?[#:]? ?\d+)?$)", "@iteration"},
    {R"(^(forward|fwd|forward[_ ]pass|model[_ .]forward)$)", "forward"},
    {R"(^(backward|bwd|backward[_ ]pass|loss[_ .]backward)$)", "backward"},
    {R"(^(optimizer|optim|optimizer[_ .]step|opt[_ ]step)$)", "optimizer"},
    {R"(^(free[_ ]?settl(e|ing)|settl(e|ing)[_ /:.-]?free|free[_ ]phase)$)", "settling/free"},
    {R"(^(nudged[_ ]?settl(e|ing)|settl(e|ing)[_ /:.-]?nudged|nudged[_ ]phase)$)",
     "settling/nudged"},
    {R"(^settl(e|ing)$)", "settling"},
    {R"(^(energy|compute[_ ]energy|energy[_ ]fn)$)", "energy"},
    {R"(^(contrast|contrastive[_ ]step|contrast[_ ]step)$)", "contrast"},
    {R"(^(update|param(eter)?[_ ]update|weight[_ ]update)$)", "update"},
};

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return {};
  const size_t end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

// Case-insensitive; null with *error when the expression does not compile.
std::shared_ptr<const RE2> Compile(const std::string& pattern, std::string* error) {
  RE2::Options options;
  options.set_case_sensitive(false);
  options.set_log_errors(false);
  auto regex = std::make_shared<const RE2>(pattern, options);
  if (regex->ok()) return regex;
  *error = regex->error();
  return nullptr;
}

}  // namespace

PhaseRules PhaseRules::Defaults() {
  PhaseRules rules;
  for (const BuiltIn& b : kBuiltIns) {
    std::string error;
    std::shared_ptr<const RE2> regex = Compile(b.regex, &error);
    if (regex == nullptr) abort();  // a bug in kBuiltIns
    rules.rules_.push_back(Rule{b.regex, std::move(regex), b.target});
  }
  return rules;
}

bool PhaseRules::AddFromText(const std::string& text, const std::string& origin,
                             std::string* error) {
  std::vector<Rule> added;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = Trim(line);  // comments are whole lines: '#' may be part of a regex
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.rfind('=');
    const std::string where = origin + ":" + std::to_string(number);
    if (eq == std::string::npos) {
      *error = where + ": expected NAME = PHASE or /REGEX/ = PHASE";
      return false;
    }
    std::string pattern = Trim(line.substr(0, eq));
    const std::string target = Trim(line.substr(eq + 1));
    if (pattern.empty() || target.empty()) {
      *error = where + ": empty name or phase";
      return false;
    }
    if (target[0] == '@' && target != "@rollup" && target != "@iteration") {
      *error = where + ": unknown target " + target + " (phases are names; @rollup, @iteration)";
      return false;
    }
    const bool is_regex = pattern.size() >= 2 && pattern.front() == '/' && pattern.back() == '/';
    if (is_regex) pattern = pattern.substr(1, pattern.size() - 2);
    Rule rule{pattern, nullptr, target};
    std::string problem;
    if (is_regex && (rule.regex = Compile(pattern, &problem)) == nullptr) {
      *error = where + ": bad regular expression /" + pattern + "/: " + problem +
               " (RE2 syntax: no backreferences or lookaround)";
      return false;
    }
    added.push_back(std::move(rule));
  }
  rules_.insert(rules_.begin() + static_cast<std::ptrdiff_t>(user_rules_), added.begin(),
                added.end());
  user_rules_ += added.size();
  return true;
}

bool PhaseRules::AddFromFile(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read phase rules " + path;
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  return AddFromText(text.str(), path, error);
}

PhaseRules::Mapping PhaseRules::Map(const std::string& range_name) const {
  Mapping m{range_name};
  const bool regex_allowed = range_name.size() <= kMaxRegexNameBytes;
  for (const Rule& rule : rules_) {
    const bool hit = rule.regex ? regex_allowed && RE2::PartialMatch(range_name, *rule.regex)
                                : range_name == rule.pattern;
    if (!hit) continue;
    m.matched = true;
    m.rollup = rule.target == "@rollup";
    m.iteration = rule.target == "@iteration";
    if (!m.rollup && !m.iteration) m.phase = rule.target;
    return m;
  }
  return m;
}

bool IsForwardLikePhase(const std::string& phase) {
  return phase == "forward" || phase == "energy" || phase.rfind("settling", 0) == 0;
}
bool IsBackwardLikePhase(const std::string& phase) {
  return phase == "backward" || phase == "contrast";
}
bool IsOptimizerLikePhase(const std::string& phase) {
  return phase == "optimizer" || phase == "update";
}

}  // namespace cumemtrace
