// Budgets (budgets.h): sizes and budgets as written on a command line, the figures a budget
// can name, the verdict over a report, and compare's --fail-above.
#include <gtest/gtest.h>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/budgets.h"

namespace cumemtrace {
namespace {

using testing::StreamBuilder;
constexpr uint64_t kMiB = 1 << 20;

TEST(ParseByteSize, BinaryAndDecimalUnits) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"20GiB", 20ull << 30},  {"2 GiB", 2ull << 30},
      {"1.5G", 3ull << 29},    {"8GB", 8000000000ull},
      {"4096", 4096},          {"512 mib", 512 * kMiB},
      {"3KB", 3000},           {"7B", 7},
      {" 1TiB ", 1ull << 40},  {"0.5k", 512},
      {"100MB", 100000000ull}, {"1T", 1ull << 40}};
  for (const auto& [text, bytes] : cases) {
    uint64_t got = 0;
    std::string error;
    ASSERT_TRUE(ParseByteSize(text, &got, &error)) << text << ": " << error;
    EXPECT_EQ(got, bytes) << text;
  }
  for (const char* bad : {"", "GiB", "20XB", "-1GiB", "1.2.3G", "1 2G", ".", "99999999999TiB"}) {
    uint64_t got = 0;
    std::string error;
    EXPECT_FALSE(ParseByteSize(bad, &got, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(ParseBudget, KeyScopeAndSize) {
  Budget b;
  std::string error;
  ASSERT_TRUE(ParseBudget("peak=20GiB", &b, &error)) << error;
  EXPECT_EQ(b.key, "peak");
  EXPECT_EQ(b.scope, Budget::Scope::kEvery);
  EXPECT_EQ(b.limit_bytes, 20ull << 30);
  ASSERT_TRUE(ParseBudget("forward@gpu1=8GiB", &b, &error)) << error;
  EXPECT_EQ(b.key, "forward");
  EXPECT_EQ(b.scope, Budget::Scope::kDevice);
  EXPECT_EQ(b.scope_value, 1);
  ASSERT_TRUE(ParseBudget("peak@rank12=1G", &b, &error)) << error;
  EXPECT_EQ(b.scope, Budget::Scope::kRank);
  EXPECT_EQ(b.scope_value, 12);
  ASSERT_TRUE(ParseBudget("rise:train@pid4242=1G", &b, &error)) << error;
  EXPECT_EQ(b.key, "rise:train");
  EXPECT_EQ(b.scope, Budget::Scope::kPid);
  EXPECT_EQ(b.scope_value, 4242);
  // A phase name may hold '=' and '@': the size follows the last '=', a scope is only gpuN,
  // rankN or pidN.
  ASSERT_TRUE(ParseBudget("rise:pytest: t.py::test[a=1]=2 GiB", &b, &error)) << error;
  EXPECT_EQ(b.key, "rise:pytest: t.py::test[a=1]");
  EXPECT_EQ(b.limit_bytes, 2ull << 30);
  ASSERT_TRUE(ParseBudget("load@host=1G", &b, &error)) << error;
  EXPECT_EQ(b.key, "load@host");
  EXPECT_EQ(b.scope, Budget::Scope::kEvery);
  for (const char* bad : {"peak", "=1G", "peak=lots", "@gpu0=1G", "peak="}) {
    EXPECT_FALSE(ParseBudget(bad, &b, &error)) << bad;
  }
}

// pid 77, one GPU: forward allocates 10 MiB, backward 1 MiB and frees both. Peak 11 MiB in
// backward (entry 10 MiB), forward's own peak 10 MiB.
std::unique_ptr<Report> TwoPhaseReport(const std::string& first, const std::string& second,
                                       uint32_t stream = 1, uint32_t pid = 77, int rank = -1) {
  StreamBuilder s(stream, pid);
  if (rank >= 0) s.handshake().set_rank(rank);
  s.String(1, first).String(2, second).String(3, "cudaMalloc");
  s.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
  s.Push(1000, 1, 1).Alloc(1100, 0, 0x10000000, 10 * kMiB, testing::kDevice, 1, 3).Pop(1200, 1);
  s.Push(1300, 1, 2).Alloc(1400, 0, 0x20000000, kMiB, testing::kDevice, 2, 3);
  s.Free(1500, 0, 0x10000000, 10 * kMiB, testing::kDevice, 2);
  s.Free(1600, 0, 0x20000000, kMiB, testing::kDevice, 2).Pop(1700, 1);
  s.Exit(1800, 0).LauncherExit(0, 0);
  return testing::Analyze(s.Chunks());
}

std::vector<Budget> Budgets(std::initializer_list<const char*> texts) {
  std::vector<Budget> budgets;
  for (const char* text : texts) {
    Budget b;
    std::string error;
    EXPECT_TRUE(ParseBudget(text, &b, &error)) << text << ": " << error;
    budgets.push_back(b);
  }
  return budgets;
}

using Outcome = BudgetResult::Outcome;

TEST(EvaluateBudgets, EachKindOfFigureMetOrExceededToTheByte) {
  auto report = TwoPhaseReport("forward", "backward");
  const BudgetEvaluation e = EvaluateBudgets(
      *report, Budgets({"peak=11MiB", "peak=11534335", "forward=10MiB", "backward=10MiB",
                        "rise:backward=1MiB", "rise:backward=1048575", "activation=10MiB",
                        "forward-to-backward=10MiB", "lifetime:activation=9MiB", "temporary=1MiB",
                        "persistent=0", "phase:forward=9MiB"}));
  ASSERT_EQ(e.results.size(), 12u);
  const Outcome expected[] = {Outcome::kMet,      Outcome::kExceeded, Outcome::kMet,
                              Outcome::kExceeded, Outcome::kMet,      Outcome::kExceeded,
                              Outcome::kExceeded, Outcome::kMet,      Outcome::kExceeded,
                              Outcome::kMet,      Outcome::kMet,      Outcome::kExceeded};
  for (size_t i = 0; i < e.results.size(); ++i) {
    EXPECT_EQ(e.results[i].outcome, expected[i])
        << e.results[i].budget.text << " " << e.results[i].error;
  }
  EXPECT_EQ(e.results[1].highest.bytes, 11 * kMiB);
  EXPECT_EQ(e.results[1].over.front().bytes - e.results[1].budget.limit_bytes, 1u);
  EXPECT_TRUE(e.results[1].over.front().has_time);
  EXPECT_EQ(e.results[3].figure, "phase:backward");
  EXPECT_EQ(e.results[3].highest.bytes, 11 * kMiB);
  EXPECT_FALSE(e.results[3].highest.has_time);
  EXPECT_EQ(e.results[6].highest.bytes, 11 * kMiB);  // activation memory: peak - persistent 0
  EXPECT_EQ(e.results[8].figure, "lifetime:forward-to-backward");
  EXPECT_TRUE(e.Exceeded());
  EXPECT_FALSE(e.Unknown());

  const std::string table = BudgetTable(e);
  EXPECT_NE(table.find("EXCEEDED by 1.00 MiB (+10.0%)"), std::string::npos) << table;
  EXPECT_NE(table.find("GPU 0 of pid 77"), std::string::npos) << table;
  const std::string verdict = BudgetVerdict(e);
  EXPECT_EQ(
      verdict.rfind(
          "budget exceeded: peak by 1 B (11,534,336 B > 11,534,335 B, GPU 0 of pid 77 at ", 0),
      0u)
      << verdict;
  EXPECT_NE(verdict.find("; backward by 1.00 MiB (11.0 MiB > 10.0 MiB, GPU 0 of pid 77)"),
            std::string::npos)
      << verdict;
  EXPECT_EQ(verdict.find("forward-to-backward"), std::string::npos) << verdict;  // met

  const BudgetEvaluation met = EvaluateBudgets(*report, Budgets({"peak=1GiB", "forward=1GiB"}));
  EXPECT_FALSE(met.Exceeded());
  EXPECT_EQ(BudgetVerdict(met), "budgets met: peak=1GiB; forward=1GiB");
}

TEST(EvaluateBudgets, UnknownFiguresAreUsageErrorsThatListTheValidKeys) {
  auto report = TwoPhaseReport("forward", "backward");
  const BudgetEvaluation e =
      EvaluateBudgets(*report, Budgets({"forwrd=1GiB", "peak@gpu1=1GiB", "peak@rank0=1GiB"}));
  for (const BudgetResult& r : e.results) EXPECT_EQ(r.outcome, Outcome::kUnknown) << r.budget.text;
  EXPECT_TRUE(e.Unknown());
  EXPECT_NE(e.results[0].error.find("no figure 'forwrd'"), std::string::npos) << e.results[0].error;
  EXPECT_NE(e.results[0].error.find("peak, activation, persistent"), std::string::npos)
      << e.results[0].error;
  EXPECT_NE(e.results[0].error.find("other, forward, backward"), std::string::npos)
      << e.results[0].error;
  EXPECT_NE(e.results[1].error.find("GPU 1 has no figure 'peak'"), std::string::npos);
  // Without forward and backward there are no lifetime classes and no activation memory.
  auto plain = TwoPhaseReport("setup", "compute");
  const BudgetEvaluation p = EvaluateBudgets(*plain, Budgets({"activation=1GiB", "setup=1GiB"}));
  EXPECT_EQ(p.results[0].outcome, Outcome::kUnknown);
  EXPECT_EQ(p.results[0].error.find("activation,"), std::string::npos) << p.results[0].error;
  EXPECT_EQ(p.results[1].outcome, Outcome::kMet);
}

// Categories (inferred here: no tags): forward's 10 MiB is an activation (freed in backward),
// backward's 1 MiB a temporary; each budget names the category's own peak.
TEST(EvaluateBudgets, CategoriesByTheirOwnPeak) {
  auto report = TwoPhaseReport("forward", "backward");
  const BudgetEvaluation e = EvaluateBudgets(
      *report, Budgets({"category:activation=10MiB", "category:activation=10485759",
                        "category:temporary=1MiB", "parameter=0", "temporary=1MiB"}));
  ASSERT_EQ(e.results.size(), 5u);
  EXPECT_EQ(e.results[0].outcome, Outcome::kMet) << e.results[0].error;
  EXPECT_EQ(e.results[1].outcome, Outcome::kExceeded) << e.results[1].error;
  EXPECT_EQ(e.results[1].highest.bytes, 10 * kMiB);
  EXPECT_EQ(e.results[2].outcome, Outcome::kMet) << e.results[2].error;
  EXPECT_EQ(e.results[3].outcome, Outcome::kMet) << e.results[3].error;
  // The short name of a lifetime class still names the class.
  EXPECT_EQ(e.results[4].figure, "lifetime:temporary");
}

TEST(EvaluateBudgets, AShortKeyNamingTwoFiguresIsAmbiguous) {
  auto report = TwoPhaseReport("peak", "compute");
  const BudgetEvaluation e = EvaluateBudgets(*report, Budgets({"peak=1GiB", "phase:peak=1GiB"}));
  EXPECT_EQ(e.results[0].outcome, Outcome::kUnknown);
  EXPECT_NE(e.results[0].error.find("names several figures (peak, phase:peak)"), std::string::npos)
      << e.results[0].error;
  EXPECT_EQ(e.results[1].outcome, Outcome::kMet);
  EXPECT_EQ(e.results[1].highest.bytes, 10 * kMiB);
}

TEST(EvaluateBudgets, ScopesPickRanksAndTheWorstIsNamed) {
  auto job = TwoPhaseReport("forward", "backward", 1, 100, 0);
  auto second = TwoPhaseReport("forward", "backward", 2, 101, 1);
  job->processes.push_back(second->processes[0]);
  // Rank 1 allocated more: make its peak 12 MiB.
  job->processes[1].devices[0].peak.bytes = 12 * kMiB;
  const BudgetEvaluation e = EvaluateBudgets(
      *job, Budgets({"peak=10MiB", "peak@rank0=11MiB", "peak@rank1=11MiB", "peak@pid100=10MiB"}));
  ASSERT_EQ(e.results[0].outcome, Outcome::kExceeded);
  EXPECT_EQ(e.results[0].measured, 2u);
  ASSERT_EQ(e.results[0].over.size(), 2u);
  EXPECT_EQ(e.results[0].over[0].rank, 1);  // the most over first
  EXPECT_EQ(e.results[1].outcome, Outcome::kMet);
  EXPECT_EQ(e.results[2].outcome, Outcome::kExceeded);
  EXPECT_EQ(e.results[2].measured, 1u);
  EXPECT_EQ(e.results[3].outcome, Outcome::kExceeded);
  EXPECT_EQ(e.results[3].highest.pid, 100u);
  const std::string verdict = BudgetVerdict(e);
  EXPECT_NE(verdict.find("peak by 2.00 MiB (12.0 MiB > 10.0 MiB, GPU 0 of rank 1 (pid 101) at "),
            std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find(", and 1 more)"), std::string::npos) << verdict;
  EXPECT_NE(BudgetTable(e).find("on 2 of 2 devices"), std::string::npos) << BudgetTable(e);
}

RunFigures Figures(const std::string& label, uint64_t peak, uint64_t forward_peak) {
  RunFigures f;
  f.label = label;
  f.found = true;
  f.peak_bytes = peak;
  f.lifetimes = true;
  f.lifetime_bytes = {{"persistent", peak / 2}, {"temporary", 0}};
  f.activation_memory_bytes = peak - peak / 2;
  f.phases["forward"].peak_bytes = forward_peak;
  f.phase_order = {"forward"};
  return f;
}

TEST(GrowthBeyond, RelativeAndAbsoluteLimitsAgainstTheFirstRun) {
  GrowthLimit five;
  std::string error;
  ASSERT_TRUE(ParseGrowthLimit("5%", &five, &error)) << error;
  EXPECT_TRUE(five.relative);
  EXPECT_DOUBLE_EQ(five.fraction, 0.05);
  std::vector<RunFigures> runs = {Figures("base", 1000, 800), Figures("same", 1050, 840),
                                  Figures("more", 1051, 841), Figures("less", 900, 100)};
  std::vector<Growth> grown = GrowthBeyond(runs, five);
  // 5% exactly is allowed; one byte more is not. Activation (half the peak) grew 5.2%.
  ASSERT_EQ(grown.size(), 3u);
  EXPECT_EQ(grown[0].run, "more");
  EXPECT_EQ(grown[0].figure, "peak");
  EXPECT_EQ(grown[1].figure, "activation");
  EXPECT_EQ(grown[1].baseline_bytes, 500u);
  EXPECT_EQ(grown[1].bytes, 526u);
  EXPECT_EQ(grown[2].figure, "phase:forward");
  EXPECT_EQ(GrowthVerdict(runs, five, {grown[0]}),
            "grew more than 5% against base: more: peak +51 B (+5.1%), 1000 B -> 1.03 KiB");

  // From nothing to something is growth beyond any percentage.
  runs[2].lifetime_bytes["temporary"] = 1;
  EXPECT_EQ(GrowthBeyond(runs, five).size(), 4u);

  // A category's own peak, where both runs have categories.
  runs[0].categories = runs[1].categories = true;
  runs[0].category_own_peak["gradient"] = 400;
  runs[1].category_own_peak["gradient"] = 421;
  grown = GrowthBeyond(runs, five);
  ASSERT_EQ(grown.size(), 5u);
  EXPECT_EQ(grown[0].run, "same");
  EXPECT_EQ(grown[0].figure, "category:gradient");
  EXPECT_EQ(grown[0].bytes, 421u);

  GrowthLimit bytes;
  ASSERT_TRUE(ParseGrowthLimit("50B", &bytes, &error)) << error;
  EXPECT_FALSE(bytes.relative);
  grown = GrowthBeyond({Figures("base", 1000, 800), Figures("b", 1051, 850)}, bytes);
  ASSERT_EQ(grown.size(), 1u);
  EXPECT_EQ(grown[0].figure, "peak");
  EXPECT_TRUE(GrowthBeyond({Figures("base", 1000, 800), Figures("b", 1050, 850)}, bytes).empty());
  for (const char* bad : {"", "%", "five%", "-5%", "5 parsecs"}) {
    EXPECT_FALSE(ParseGrowthLimit(bad, &bytes, &error)) << bad;
  }
}

}  // namespace
}  // namespace cumemtrace
