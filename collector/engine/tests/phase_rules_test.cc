// Phase rules under hostile names and patterns: the matcher must neither recurse nor take
// time that grows faster than the name.
#include <gtest/gtest.h>

#include <string>

#include "collector/engine/phase_rules.h"

namespace cumemtrace {
namespace {

// std::regex recursed once per character: a 40,000-character name under /.*/ overflowed the
// stack in `run`, `report`, `export` and `compare`.
TEST(PhaseRules, LongNamesUnderCatchAllRulesDoNotOverflowTheStack) {
  PhaseRules rules = PhaseRules::Defaults();
  std::string error;
  ASSERT_TRUE(rules.AddFromText("/.*/ = y\n/(a|b)*c/ = z\n", "rules.txt", &error)) << error;
  const std::string at_bound(PhaseRules::kMaxRegexNameBytes, 'a');
  EXPECT_EQ(rules.Map(at_bound).phase, "y");
  for (const size_t length : {size_t{40000}, size_t{1} << 20}) {
    const std::string name(length, 'a');
    const PhaseRules::Mapping m = rules.Map(name);
    EXPECT_FALSE(m.matched) << length << ": too long for regular expressions";
    EXPECT_EQ(m.phase, name);
  }
  // An exact rule still matches a long name.
  const std::string long_name(100000, 'x');
  ASSERT_TRUE(rules.AddFromText(long_name + " = forward\n", "exact.txt", &error)) << error;
  EXPECT_EQ(rules.Map(long_name).phase, "forward");
}

TEST(PhaseRules, BadOrUnsupportedPatternsNameTheLine) {
  PhaseRules rules = PhaseRules::Defaults();
  std::string error;
  EXPECT_FALSE(rules.AddFromText("ok = forward\n/(a)\\1/ = x\n", "rules.txt", &error));
  EXPECT_EQ(error.rfind("rules.txt:2: bad regular expression", 0), 0u) << error;
  EXPECT_FALSE(rules.AddFromText("/a(?=b)/ = x\n", "r", &error));
  EXPECT_EQ(error.rfind("r:1: bad regular expression", 0), 0u) << error;
  // Case-insensitive, searched anywhere in the name, with \d and anchors.
  ASSERT_TRUE(rules.AddFromText("/^EP\\.relax_\\d+$/ = settling\n/nudge/ = contrast\n", "r", &error))
      << error;
  EXPECT_EQ(rules.Map("ep.RELAX_12").phase, "settling");
  EXPECT_EQ(rules.Map("ep.relax_12x").phase, "ep.relax_12x");
  EXPECT_EQ(rules.Map("my nudged step").phase, "contrast");
}

}  // namespace
}  // namespace cumemtrace
