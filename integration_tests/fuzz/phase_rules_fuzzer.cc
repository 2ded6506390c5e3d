// Fuzzes the phase-rules parser and matcher: the rules file is user input, range names come
// from the traced program. Input: a rules file, a NUL, then range names one per line. Checks
// that nothing crashes or recurses (std::regex once overflowed the stack on a long name),
// that a refused file says where, and what Map promises: an unmatched name keeps its own
// name, and names longer than kMaxRegexNameBytes match no regular expression.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "collector/engine/phase_rules.h"

using cumemtrace::PhaseRules;

namespace {

void Check(const PhaseRules& rules, const std::string& name) {
  const PhaseRules::Mapping m = rules.Map(name);
  if (!m.matched && m.phase != name) abort();
  if (m.rollup && m.iteration) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text(input.substr(0, nul));
  const std::string_view names = nul == std::string_view::npos ? std::string_view()
                                                               : input.substr(nul + 1);
  PhaseRules rules = PhaseRules::Defaults();
  const size_t built_in = rules.size();
  std::string error;
  if (rules.AddFromText(text, "rules.txt", &error)) {
    if (rules.size() < built_in) abort();
  } else {
    if (error.rfind("rules.txt:", 0) != 0) abort();  // a refusal names the file and line
    if (rules.size() != built_in) abort();           // and adds nothing
  }
  size_t start = 0;
  while (start <= names.size()) {
    const size_t end = std::min(names.find('\n', start), names.size());
    const std::string name(names.substr(start, end - start));
    Check(rules, name);
    start = end + 1;
  }
  // The same bytes as one name past the bound: no regular expression may see it.
  std::string long_name(names);
  while (!long_name.empty() && long_name.size() <= PhaseRules::kMaxRegexNameBytes) {
    long_name += long_name;
  }
  if (!long_name.empty()) {
    PhaseRules regex_only = PhaseRules::Defaults();
    std::string ignored;
    if (regex_only.AddFromText("/.*/ = everything\n", "all", &ignored) &&
        regex_only.Map(long_name).matched) {
      abort();
    }
    Check(rules, long_name);
  }
  return 0;
}
