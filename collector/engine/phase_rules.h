// Maps NVTX range names to canonical phases (settling, settling/free, settling/nudged,
// energy, contrast, update, forward, backward, optimizer) through rules: an exact name or a
// regular expression, and a target. User rules (a small file) come before the built-in ones;
// a name that matches no rule keeps its own name.
//
// Regular expressions are RE2's (linear time, no recursion: std::regex overflowed the stack
// on a 40,000-character name under /.*/), and only names of at most kMaxRegexNameBytes are
// given to them; a longer name can still match an exact rule.
//
// Targets: a phase name; "@rollup" (per-op ranges such as emit_nvtx's "aten::mm, seq = 3":
// their memory goes to the enclosing phase and they never appear in the table); or
// "@iteration" (the range marks one training iteration and keeps its name).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace re2 {
class RE2;
}

namespace cumemtrace {

class PhaseRules {
 public:
  // Longer names are matched by exact rules only.
  static constexpr size_t kMaxRegexNameBytes = 4096;

  struct Mapping {
    std::string phase;       // canonical phase, or the range's own name when unmatched
    bool rollup = false;     // per-op range: attribute to the enclosing phase
    bool iteration = false;  // marks an iteration
    bool matched = false;    // some rule matched
  };

  // The built-in rules only.
  static PhaseRules Defaults();
  // Parses rule lines ("NAME = TARGET" or "/REGEX/ = TARGET", '#' comments) and puts them
  // before the built-in ones. False with *error naming the file and line.
  bool AddFromText(const std::string& text, const std::string& origin, std::string* error);
  bool AddFromFile(const std::string& path, std::string* error);

  Mapping Map(const std::string& range_name) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Rule {
    std::string pattern;
    std::shared_ptr<const re2::RE2> regex;  // null: an exact name
    std::string target;
  };
  size_t user_rules_ = 0;
  std::vector<Rule> rules_;  // user rules first, then the built-in ones
};

// Canonical phases grouped by role, for lifetime classes and inference.
bool IsForwardLikePhase(const std::string& phase);    // forward, settling*, energy
bool IsBackwardLikePhase(const std::string& phase);   // backward, contrast
bool IsOptimizerLikePhase(const std::string& phase);  // optimizer, update

}  // namespace cumemtrace
