// SummaryJson and PrintSummaryText: what a reader of either gets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <iostream>
#include <sstream>

#include "collector/engine/engine.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/output/summary.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using testing::StreamBuilder;

std::unique_ptr<Report> SampleReport() {
  StreamBuilder s(1, 4242);
  s.String(1, "forward").String(2, "backward").String(3, "cudaMalloc").String(4, "cudaErrorMemoryAllocation");
  s.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
  s.Push(1000, 1, 1).Alloc(1100, 0, 0x7f0000000000, 1234567000, testing::kDevice, 1, 3);
  s.Pop(1200, 1).Push(1300, 1, 2).Alloc(1400, 0, 0x7f1000000000, 890, testing::kDevice, 2, 3);
  s.Failed(1450, 0, 1, 80ull << 30, 2, 3, 4, 1 << 20, 85899345920ull);
  s.Free(1500, 0, 0x7f1000000000, 890, testing::kDevice, 2).Pop(1600, 1);
  s.Alloc(1700, 0, 0x1000, 4096, v1::MEMORY_KIND_PINNED, 1);
  s.Dropped(v1::DROP_SOURCE_CUPTI, 12, 1410, 1420).SkipBatches(2);
  s.Exit(1800, 0).LauncherExit(0, 0);
  auto report = testing::Analyze(s.Chunks());
  report->trace_file = "run.cmtrace";
  return report;
}

TEST(SummaryJson, ParsesBackWithTheExpectedValues) {
  auto report = SampleReport();
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(*report));
  EXPECT_EQ(j["schema"], "cumemtrace.summary/1");
  EXPECT_EQ(j["trace_file"], "run.cmtrace");
  EXPECT_EQ(j["truncated"], false);
  EXPECT_TRUE(j["truncation_reason"].is_null());
  ASSERT_EQ(j["processes"].size(), 1u);
  const auto& p = j["processes"][0];
  EXPECT_EQ(p["pid"], 4242);
  EXPECT_EQ(p["command_line"][1], "train.py");
  EXPECT_EQ(p["allocator"]["mode"], "async");
  EXPECT_EQ(p["exit"]["source"], "launcher");
  EXPECT_EQ(p["exit"]["code"], 0);
  EXPECT_TRUE(p["exit"]["signal"].is_null());
  EXPECT_EQ(p["complete"], true);
  EXPECT_EQ(p["lost_batches"]["count"], 2);
  EXPECT_EQ(p["dropped"][0]["source"], "cupti");
  EXPECT_EQ(p["dropped"][0]["count"], 12);
  EXPECT_EQ(p["duration_ns"], 800);
  const auto& d = p["devices"][0];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["total_memory_bytes"].get<uint64_t>(), 85899345920ull);
  EXPECT_EQ(d["peak"]["bytes"].get<uint64_t>(), 1234567890u);
  EXPECT_EQ(d["peak"]["time_ns"], 400);
  EXPECT_EQ(d["peak"]["live_by_phase_and_kind"][0]["phase"], "forward");
  EXPECT_EQ(d["peak"]["live_by_phase_and_kind"][1]["phase"], "backward");
  EXPECT_EQ(d["peak"]["largest"][0]["address"].get<uint64_t>(), 0x7f0000000000ull);
  EXPECT_EQ(d["by_kind"]["PINNED"]["peak_bytes"], 4096);
  EXPECT_EQ(d["live_at_exit"]["bytes"].get<uint64_t>(), 1234567000u);
  ASSERT_EQ(p["phases"].size(), 2u);
  EXPECT_EQ(p["phases"][1]["name"], "backward");
  EXPECT_TRUE(p["phases"][1]["domain"].is_null());
  EXPECT_EQ(p["phases"][1]["devices"][0]["bytes_at_entry"].get<uint64_t>(), 1234567000u);
  EXPECT_EQ(p["phases"][1]["devices"][0]["peak_above_entry_bytes"], 890);
  EXPECT_EQ(p["phases"][1]["devices"][0]["failed_allocations"], 1);
  ASSERT_EQ(p["failed_allocations"].size(), 1u);
  EXPECT_EQ(p["failed_allocations"][0]["phase"], "backward");
  EXPECT_EQ(p["failed_allocations"][0]["requested_bytes"].get<uint64_t>(), 80ull << 30);
  EXPECT_EQ(p["failed_allocations"][0]["error_name"], "cudaErrorMemoryAllocation");
  EXPECT_EQ(p["failed_allocations"][0]["device_in_use_bytes"].get<uint64_t>(), 1234567890u);
}

TEST(SummaryJson, TruncatedReportSaysWhy) {
  auto report = SampleReport();
  report->truncated = true;
  report->truncation_reason = "file ends inside a chunk at byte 99";
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(*report));
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["truncation_reason"], "file ends inside a chunk at byte 99");
}

TEST(SummaryJson, InvalidUtf8InACommandLineKeepsTheProcessAndValidJson) {
  StreamBuilder s(1, 1);
  s.handshake().add_command_line(std::string("train\xff\xfe.py", 10));
  s.Alloc(1, 0, 0x1, 1);
  auto report = testing::Analyze(s.Chunks());
  // Text fields are `bytes` on the wire, so a stray byte costs nothing but that byte.
  ASSERT_EQ(report->processes.size(), 1u);
  const ProcessReport& p = report->processes[0];
  EXPECT_TRUE(p.has_handshake);
  EXPECT_FALSE(p.damaged);
  EXPECT_EQ(p.devices.at(0).peak.bytes, 1u);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(SummaryJson(*report)));
  const std::string shown = j["processes"][0]["command_line"].back();
  EXPECT_EQ(shown.substr(0, 5), "train");
  EXPECT_EQ(shown.substr(shown.size() - 3), ".py");
}

TEST(SummaryText, ShowsPhasesExactPeakAndWarnings) {
  auto report = SampleReport();
  report->truncated = true;
  report->truncation_reason = "file ends inside a chunk at byte 99";
  std::ostringstream out;
  PrintSummaryText(*report, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("1,234,567,890 B"), std::string::npos) << text;
  EXPECT_NE(text.find("1.15 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("forward"), std::string::npos) << text;
  EXPECT_NE(text.find("backward"), std::string::npos) << text;
  EXPECT_NE(text.find("process 4242"), std::string::npos) << text;
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  EXPECT_NE(text.find("12 records dropped"), std::string::npos) << text;
  EXPECT_NE(text.find("2 event batches lost"), std::string::npos) << text;
  EXPECT_NE(text.find("cudaErrorMemoryAllocation"), std::string::npos) << text;
  EXPECT_NE(text.find("async"), std::string::npos) << text;
  std::cout << text;  // for eyes in the test log
}

// Born in the first phase, freed in the second, live at the peak beside a 1 MiB block of the
// second phase: with phases forward and backward, a forward-to-backward allocation.
std::unique_ptr<Report> TwoPhaseReport(const std::string& first, const std::string& second) {
  constexpr uint64_t kMiB = 1 << 20;
  StreamBuilder s(1, 77);
  s.String(1, first).String(2, second).String(3, "cudaMalloc");
  s.Device(0, "NVIDIA H100 80GB HBM3", 85899345920ull).Flush();
  s.Push(1000, 1, 1).Alloc(1100, 0, 0x10000000, 10 * kMiB, testing::kDevice, 1, 3).Pop(1200, 1);
  s.Push(1300, 1, 2).Alloc(1400, 0, 0x20000000, kMiB, testing::kDevice, 2, 3);
  s.Free(1500, 0, 0x10000000, 10 * kMiB, testing::kDevice, 2);
  s.Free(1600, 0, 0x20000000, kMiB, testing::kDevice, 2).Pop(1700, 1);
  s.Exit(1800, 0).LauncherExit(0, 0);
  return testing::Analyze(s.Chunks());
}

size_t Count(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// With the allocator bridge the by-category block has both peaks, PyTorch's cache and the
// memory it never sees by library, each category's own peak and its objects/inferred split.
TEST(SummaryText, CategoriesAtBothPeaksWithTheBridge) {
  constexpr uint64_t kMiB = 1 << 20;
  Report report;
  ProcessReport& p = report.processes.emplace_back();
  p.pid = 5;
  p.categories_given = true;
  p.category_tags = 3;
  DeviceReport& d = p.devices.emplace_back();
  d.peak.seen = true;
  d.peak.bytes = 70 * kMiB;
  DeviceCategories& c = d.categories;
  c.given = true;
  c.tensor_layer = "torch_allocated";
  c.tensor_peak_bytes = 60 * kMiB;
  c.cache_at_tensor_peak_bytes = 2 * kMiB;
  c.cache_at_device_peak_bytes = 3 * kMiB;
  c.not_torch_at_device_peak_by_library["libcublasLt.so"] = 10 * kMiB;
  CategoryFigures& parameter = c.by_category["parameter"];
  parameter.at_tensor_peak = {40 * kMiB, 40 * kMiB};
  parameter.at_device_peak = {40 * kMiB, 40 * kMiB};
  parameter.own_peak = {40 * kMiB, 30 * kMiB};
  parameter.allocations = 4;
  CategoryFigures& activation = c.by_category["activation"];
  activation.at_tensor_peak = {20 * kMiB, 0};
  activation.own_peak = {25 * kMiB, 0};
  activation.allocations = 9;
  std::ostringstream out;
  PrintSummaryText(report, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("at tensor peak  at device peak  own peak"), std::string::npos) << text;
  // parameter: 40 MiB at both peaks and at its own, 30 MiB of it named by objects.
  const size_t row = text.find("      parameter ");
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row, text.find('\n', row) - row);
  EXPECT_NE(line.find("40.0 MiB        40.0 MiB  40.0 MiB  +0 ns  30.0 MiB  10.0 MiB"),
            std::string::npos)
      << text;
  EXPECT_LT(text.find("      parameter"), text.find("      activation")) << text;
  EXPECT_NE(text.find("PyTorch's cache"), std::string::npos) << text;
  EXPECT_NE(text.find("not PyTorch's: libcublasLt.so"), std::string::npos) << text;
  EXPECT_NE(text.find("(tensor peak 60.0 MiB"), std::string::npos) << text;
  EXPECT_EQ(text.find("every category is inferred"), std::string::npos) << text;
}

// Issue: "activation memory 112 MiB, 100 %" for a plain CUDA program, and a class and a figure
// both called activation. One figure is called activation, with its definition, and only for
// a program with forward and backward phases; text and JSON agree.
TEST(SummaryText, OneActivationFigureAndOnlyWithTrainingPhases) {
  auto training = TwoPhaseReport("forward", "backward");
  std::ostringstream out;
  PrintSummaryText(*training, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("forward-to-backward 10.0 MiB, temporary 1.00 MiB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("activation memory   11.0 MiB (peak - persistent)"), std::string::npos)
      << text;
  // The figure, and the category of memory born in forward and freed in backward (its row
  // under "by category"); the lifetime class keeps its own name.
  EXPECT_EQ(Count(text, "activation"), 2u) << text;
  EXPECT_NE(text.find("\n      activation "), std::string::npos) << text;
  EXPECT_EQ(Count(text, "caching allocator keeps"), 0u) << text;
  // PyTorch's caching allocator kept and no bridge: the classes are of segments, and it says so.
  training->processes[0].allocator_mode = "native";
  std::ostringstream native;
  PrintSummaryText(*training, native);
  EXPECT_NE(native.str().find("(of the segments PyTorch's caching allocator keeps, not of tensors"),
            std::string::npos)
      << native.str();
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(*training));
  const auto& lifetime = j["processes"][0]["devices"][0]["lifetime_at_peak"];
  EXPECT_EQ(lifetime["bytes_by_class"]["activation"], 10u << 20);
  EXPECT_EQ(lifetime["activation_memory_bytes"], 11u << 20);

  auto plain = TwoPhaseReport("setup", "compute");
  std::ostringstream plain_out;
  PrintSummaryText(*plain, plain_out);
  EXPECT_EQ(Count(plain_out.str(), "activation"), 0u) << plain_out.str();
  EXPECT_EQ(Count(plain_out.str(), "lifetime"), 0u) << plain_out.str();
  const nlohmann::json pj = nlohmann::json::parse(SummaryJson(*plain));
  EXPECT_TRUE(pj["processes"][0]["devices"][0]["lifetime_at_peak"].is_null());
  EXPECT_EQ(pj["processes"][0]["devices"][0]["peak"]["bytes"], 11u << 20);
}

// What reaches a terminal: controls escaped, text that is not UTF-8 too, characters kept,
// long text cut by characters (never inside one).
TEST(TerminalText, EscapesWhatATerminalWouldActOnAndCutsByCharacters) {
  using internal::TerminalText;
  EXPECT_EQ(TerminalText("a\x1b[2Jb\x07"), "a\\x1b[2Jb\\x07");
  EXPECT_EQ(TerminalText("del\x7f c1\u009b nl\n tab\t"), "del\\x7f c1\\u009b nl\\n tab\\t");
  EXPECT_EQ(TerminalText("lone \x9b and cut \xe2\x82"), "lone \\x9b and cut \\xe2\\x82");
  EXPECT_EQ(TerminalText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate is not UTF-8
  EXPECT_EQ(TerminalText("caf\u00e9 \u2014 \u65e5\u672c"), "caf\u00e9 \u2014 \u65e5\u672c");
  EXPECT_EQ(TerminalText("\u65e5\u672c\u8a9e", 2), "\u65e5\u672c...");
  EXPECT_EQ(TerminalText("abc", 3), "abc");
  EXPECT_EQ(TerminalText("one\x1b\ntwo", SIZE_MAX, /*keep_newlines=*/true), "one\\x1b\ntwo");
  EXPECT_EQ(TerminalText("abcd\nxy\nlong", 2, /*keep_newlines=*/true), "ab...\nxy\nlo...");
  EXPECT_EQ(internal::DisplayWidth("caf\u00e9"), 4u);
}

// A table is as wide as its shortened cells, aligned by characters.
TEST(TerminalText, TablesShortenCellsAndAlignByCharacters) {
  std::ostringstream out;
  const std::vector<internal::Row> rows_in = {
      {"name", "n"}, {std::string(500, 'x'), "1"}, {"\u00e9t\u00e9", "22"}};
  internal::PrintTable(out, "", rows_in, "lr");
  std::istringstream lines(out.str());
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1], std::string(internal::kMaxCellChars, 'x') + "...   1");
  EXPECT_EQ(internal::DisplayWidth(rows[2]), internal::DisplayWidth(rows[1])) << rows[2];
}

}  // namespace
}  // namespace cumemtrace
