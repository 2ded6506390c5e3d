// Tensors by module and operator as the outputs print them (`run --modules`, `--ops`): the
// summary's JSON and text carry the engine's figures, and the folded stacks of the module
// tree add up to the bytes of each module. The figures come from an analyzed stream (the
// engine's own tests check them against the blocks); here, that the outputs say the same.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "collector/engine/engine.h"
#include "collector/output/exports.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// A report as the engine makes it for a small model's step on one GPU.
Report SampleReport() {
  Report r;
  ProcessReport& p = r.processes.emplace_back();
  p.pid = 4242;
  DeviceReport& d = p.devices.emplace_back();
  d.peak.seen = true;
  d.peak.bytes = 11 * kMiB;
  DeviceAttribution& a = d.attribution;
  a.given = true;
  a.tensor_peak_bytes = 11 * kMiB;
  a.tensor_peak_time_ns = 5000;
  auto module = [&](const std::string& path, uint32_t depth, uint64_t bytes, uint64_t self) {
    ModuleBytes& m = a.modules.emplace_back();
    m.module = path;
    m.depth = depth;
    m.bytes = bytes;
    m.self_bytes = self;
    m.count = 1;
    m.own_peak_bytes = bytes + kMiB;
  };
  module("<GPT>", 0, 9 * kMiB, 1 * kMiB);
  module("transformer", 1, 8 * kMiB, 0);
  module("transformer.h.3.mlp", 2, 8 * kMiB, 2 * kMiB);
  module("transformer.h.3.mlp.c_fc", 3, 6 * kMiB, 6 * kMiB);
  module("", 0, 2 * kMiB, 2 * kMiB);
  a.operators.push_back(OperatorBytes{"aten::linear", 8 * kMiB, 2});
  a.operators.push_back(OperatorBytes{"", 3 * kMiB, 2});
  a.backward_allocations = 3;
  a.backward_bytes = 5 * kMiB;
  a.unlinked_backward_allocations = 1;
  a.unlinked_backward_bytes = 2 * kMiB;
  LiveAllocation& forward = d.peak.largest.emplace_back();
  forward.bytes = 6 * kMiB;
  forward.kind = "TORCH_ALLOCATED";
  forward.attributed = true;
  forward.module = "transformer.h.3.mlp.c_fc";
  forward.op = "aten::linear";
  forward.inner_op = "aten::addmm";
  LiveAllocation& backward = d.peak.largest.emplace_back();
  backward.bytes = 2 * kMiB;
  backward.kind = "TORCH_ALLOCATED";
  backward.attributed = true;
  backward.backward = true;
  backward.linked = true;
  backward.module_inherited = true;
  backward.op = "AddmmBackward0";
  backward.module = "transformer.h.3.mlp";
  backward.forward_op = "aten::linear";
  backward.forward_line = "model.py:42";
  LiveAllocation& plain = d.peak.largest.emplace_back();
  plain.bytes = 1 * kMiB;
  plain.kind = "DEVICE";
  return r;
}

TEST(AttributionOutput, JsonCarriesTheFigures) {
  const Report r = SampleReport();
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(r));
  const auto& d = j["processes"][0]["devices"][0];
  const DeviceAttribution& a = r.processes[0].devices[0].attribution;
  const auto& attribution = d["attribution"];
  EXPECT_EQ(attribution["tensor_peak"]["bytes"].get<uint64_t>(), a.tensor_peak_bytes);
  ASSERT_EQ(attribution["by_module"].size(), a.modules.size());
  for (size_t i = 0; i < a.modules.size(); ++i) {
    const auto& m = attribution["by_module"][i];
    if (a.modules[i].module.empty()) {
      EXPECT_TRUE(m["module"].is_null());
    } else {
      EXPECT_EQ(m["module"], a.modules[i].module);
    }
    EXPECT_EQ(m["depth"].get<uint32_t>(), a.modules[i].depth);
    EXPECT_EQ(m["bytes"].get<uint64_t>(), a.modules[i].bytes);
    EXPECT_EQ(m["self_bytes"].get<uint64_t>(), a.modules[i].self_bytes);
    EXPECT_EQ(m["own_peak_bytes"].get<uint64_t>(), a.modules[i].own_peak_bytes);
  }
  EXPECT_EQ(attribution["by_operator"][0]["operator"], "aten::linear");
  EXPECT_EQ(attribution["by_operator"][0]["bytes"].get<uint64_t>(), a.operators[0].bytes);
  EXPECT_TRUE(attribution["by_operator"][1]["operator"].is_null());
  EXPECT_EQ(attribution["backward"]["unlinked_bytes"].get<uint64_t>(), a.unlinked_backward_bytes);
  EXPECT_EQ(attribution["backward"]["allocations"].get<uint64_t>(), a.backward_allocations);
  const auto& largest = d["peak"]["largest"];
  EXPECT_EQ(largest[0]["born"]["module"], "transformer.h.3.mlp.c_fc");
  EXPECT_EQ(largest[0]["born"]["inner_operator"], "aten::addmm");
  EXPECT_EQ(largest[0]["born"]["backward"], false);
  EXPECT_FALSE(largest[0]["born"].contains("linked"));
  EXPECT_EQ(largest[1]["born"]["linked"], true);
  EXPECT_EQ(largest[1]["born"]["module_from_forward"], true);
  EXPECT_EQ(largest[1]["born"]["forward_line"], "model.py:42");
  EXPECT_FALSE(largest[2].contains("born"));  // no attribution: the entry keeps its shape
}

TEST(AttributionOutput, JsonWithoutAttributionKeepsItsShape) {
  Report r = SampleReport();
  r.processes[0].devices[0].attribution = DeviceAttribution();
  for (LiveAllocation& l : r.processes[0].devices[0].peak.largest) l.attributed = false;
  const nlohmann::json j = nlohmann::json::parse(SummaryJson(r));
  const auto& d = j["processes"][0]["devices"][0];
  EXPECT_FALSE(d.contains("attribution"));
  for (const auto& l : d["peak"]["largest"]) EXPECT_FALSE(l.contains("born"));
}

TEST(AttributionOutput, BornTextNamesTheOperationAndModule) {
  const Report r = SampleReport();
  const auto& largest = r.processes[0].devices[0].peak.largest;
  EXPECT_EQ(BornText(largest[0]),
            "born in aten::addmm (aten::linear) in module transformer.h.3.mlp.c_fc");
  EXPECT_EQ(BornText(largest[1]),
            "backward of aten::linear at model.py:42 (module transformer.h.3.mlp)");
  EXPECT_EQ(BornText(largest[2]), "");
  LiveAllocation unlinked = largest[1];
  unlinked.linked = false;
  unlinked.module.clear();
  EXPECT_EQ(BornText(unlinked), "backward (AddmmBackward0), forward operation not found");
  LiveAllocation nothing;
  nothing.attributed = true;
  EXPECT_EQ(BornText(nothing), "born outside every operator and module");
}

TEST(AttributionOutput, TextListsModulesOperatorsAndBirths) {
  const Report r = SampleReport();
  std::ostringstream out;
  PrintSummaryText(r, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("tensors by module at the tensor peak"), std::string::npos) << text;
  EXPECT_NE(text.find("tensors by operator at the tensor peak"), std::string::npos) << text;
  EXPECT_NE(text.find("born in aten::addmm (aten::linear) in module transformer.h.3.mlp.c_fc"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("backward of aten::linear at model.py:42"), std::string::npos) << text;
  EXPECT_NE(text.find("not linked to a forward operation"), std::string::npos) << text;
  // The modules by bytes of their own: c_fc (6 MiB) first, then mlp (2 MiB); a module with
  // none of its own (transformer) is no row.
  const size_t c_fc = text.find("transformer.h.3.mlp.c_fc ");
  const size_t mlp = text.find("transformer.h.3.mlp ");
  ASSERT_NE(c_fc, std::string::npos) << text;
  ASSERT_NE(mlp, std::string::npos) << text;
  EXPECT_LT(c_fc, mlp);
  EXPECT_EQ(text.find("      transformer "), std::string::npos) << text;
}

TEST(AttributionOutput, FoldedStacksAddUpToEachModule) {
  const Report r = SampleReport();
  std::istringstream in(ModuleFoldedStacks(r));
  std::map<std::string, uint64_t> lines;
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    lines[line.substr(0, space)] += std::stoull(line.substr(space + 1));
  }
  // One line per module with bytes of its own, its frames the path under the one root.
  EXPECT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines["<GPT>"], 1 * kMiB);
  EXPECT_EQ(lines["<GPT>;transformer;h;3;mlp"], 2 * kMiB);
  EXPECT_EQ(lines["<GPT>;transformer;h;3;mlp;c_fc"], 6 * kMiB);
  EXPECT_EQ(lines["(no module)"], 2 * kMiB);
  // A flame graph's frame holds the bytes of the lines under it: each module's subtree.
  const DeviceAttribution& a = r.processes[0].devices[0].attribution;
  for (const ModuleBytes& m : a.modules) {
    if (m.module != "transformer") continue;
    uint64_t under = 0;
    for (const auto& [stack, bytes] : lines) {
      if (stack.rfind("<GPT>;transformer", 0) == 0) under += bytes;
    }
    EXPECT_EQ(under, m.bytes);
  }
  Report none;
  none.processes.emplace_back().devices.emplace_back();
  EXPECT_EQ(ModuleFoldedStacks(none), "");
}

}  // namespace
}  // namespace cumemtrace
