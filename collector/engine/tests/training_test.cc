// Phase analysis for training programs on synthetic streams: rules and roll-up, inferred
// forward/backward/optimizer, iterations and their statistics, lifetime classes, and the
// compare/sweep tables.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>
#include <sstream>

#include <nlohmann/json.hpp>

#include "collector/engine/engine.h"
#include "collector/output/exports.h"
#include "collector/output/summary.h"
#include "collector/engine/phase_rules.h"
#include "collector/output/run_figures.h"
#include "collector/engine/tests/trace_builder.h"

namespace cumemtrace {
namespace {

std::vector<std::vector<std::string>> CsvRows(const std::string& text);

using testing::Analyze;
using testing::FindDevice;
using testing::StreamBuilder;

constexpr uint64_t MiB = 1 << 20;

const PhaseReport* Phase(const ProcessReport& p, const std::string& name) {
  for (const PhaseReport& r : p.phases) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const IterationPhaseStats* IterPhase(const ProcessReport& p, const std::string& name) {
  for (const IterationPhaseStats& s : p.iterations.phases) {
    if (s.phase == name) return &s;
  }
  return nullptr;
}

void NameThread(StreamBuilder& s, uint32_t tid, const std::string& name) {
  v1::Event e;
  e.mutable_thread_name()->set_thread_id(tid);
  e.mutable_thread_name()->set_name(name);
  s.Raw(e);
}

TEST(PhaseRules, BuiltInsMapCommonNamesAndKeepTheRest) {
  const PhaseRules rules = PhaseRules::Defaults();
  EXPECT_EQ(rules.Map("Forward").phase, "forward");
  EXPECT_EQ(rules.Map("loss.backward").phase, "backward");
  EXPECT_EQ(rules.Map("optimizer.step").phase, "optimizer");
  EXPECT_EQ(rules.Map("free_settling").phase, "settling/free");
  EXPECT_EQ(rules.Map("settle_nudged").phase, "settling/nudged");
  EXPECT_EQ(rules.Map("settling").phase, "settling");
  EXPECT_EQ(rules.Map("contrast").phase, "contrast");
  EXPECT_TRUE(rules.Map("aten::addmm, seq = 12").rollup);
  EXPECT_TRUE(rules.Map("NCCL: ncclAllReduce").rollup);  // a library's own domain
  EXPECT_TRUE(rules.Map("CCCL: cub::DeviceRadixSort::SortPairs").rollup);
  EXPECT_TRUE(rules.Map("nvJPEG: decode").rollup);
  EXPECT_FALSE(rules.Map("trainer: load data").rollup);  // the program's own domain
  EXPECT_TRUE(rules.Map("train_step").iteration);
  const PhaseRules::Mapping own = rules.Map("my_phase");
  EXPECT_FALSE(own.matched);
  EXPECT_EQ(own.phase, "my_phase");
}

TEST(PhaseRules, FileRulesComeFirstAndErrorsNameTheLine) {
  PhaseRules rules = PhaseRules::Defaults();
  std::string error;
  ASSERT_TRUE(rules.AddFromText("# EP names\n/^ep\\.relax_.*$/ = settling\nforward = backward\n"
                                "mine = @rollup\n",
                                "rules.txt", &error))
      << error;
  EXPECT_EQ(rules.Map("ep.relax_free").phase, "settling");
  EXPECT_EQ(rules.Map("forward").phase, "backward");  // the user's rule wins
  EXPECT_TRUE(rules.Map("mine").rollup);
  ASSERT_TRUE(rules.AddFromText("/^CCCL: cub::DeviceRadixSort/ = sort\n", "r1", &error)) << error;
  EXPECT_EQ(rules.Map("CCCL: cub::DeviceRadixSort::SortPairs").phase, "sort");  // named: kept
  EXPECT_FALSE(rules.Map("CCCL: cub::DeviceRadixSort::SortPairs").rollup);
  EXPECT_FALSE(rules.AddFromText("no equals sign\n", "r2", &error));
  EXPECT_EQ(error.rfind("r2:1:", 0), 0u) << error;
  EXPECT_FALSE(rules.AddFromText("\n/([/ = x\n", "r3", &error));
  EXPECT_EQ(error.rfind("r3:2: bad regular expression", 0), 0u) << error;
  EXPECT_FALSE(rules.AddFromText("a = @nonsense\n", "r4", &error));
  EXPECT_NE(error.find("unknown target"), std::string::npos) << error;
}

TEST(Phases, PerOpRangesRollUpIntoTheEnclosingPhase) {
  StreamBuilder s(1, 100);
  s.String(1, "forward").String(2, "aten::mm, seq = 3").String(3, "fwd");
  s.Push(10, 100, 1).Push(11, 100, 2).Alloc(12, 0, 0xA0, 64, testing::kDevice, 100);
  s.Pop(13, 100).Pop(14, 100);
  s.Push(20, 100, 3).Alloc(21, 0, 0xB0, 32, testing::kDevice, 100).Pop(22, 100);
  s.Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  ASSERT_EQ(p.phases.size(), 1u);  // "aten::mm" is not a phase; "fwd" is forward
  const PhaseReport& forward = p.phases[0];
  EXPECT_EQ(forward.name, "forward");
  EXPECT_EQ(forward.range_names, (std::vector<std::string>{"forward", "fwd"}));
  EXPECT_EQ(forward.occurrences, 2u);
  EXPECT_EQ(forward.devices.at(0).allocated_bytes, 96u);
  EXPECT_EQ(p.rolled_up_ranges, 1u);
  ASSERT_FALSE(p.devices.at(0).peak.live_by_phase_and_kind.empty());
  EXPECT_EQ(p.devices.at(0).peak.live_by_phase_and_kind[0].phase, "forward");
}

TEST(Phases, EachRowComesFromOneOccurrenceAndAddsUp) {
  // Three occurrences of forward: the first (warm-up) rises 1300 from 300, then 200 from 200,
  // then 300 from 500. The table used to take the highest entry (500), the highest peak (1600)
  // and the highest rise (1300) from different occurrences: 1600 - 500 != 1300.
  StreamBuilder s(1, 7);
  s.String(1, "forward");
  s.Alloc(1, 0, 0xA, 300);
  s.Push(10, 7, 1).Alloc(11, 0, 0xB, 1300).Free(12, 0, 0xB, 1300).Pop(13, 7);
  s.Free(20, 0, 0xA, 300).Alloc(21, 0, 0xC, 200);
  s.Push(30, 7, 1).Alloc(31, 0, 0xD, 200).Free(32, 0, 0xD, 200).Pop(33, 7);
  s.Alloc(40, 0, 0xE, 300);
  s.Push(50, 7, 1).Alloc(51, 0, 0xF, 300).Free(52, 0, 0xF, 300).Pop(53, 7);
  s.Flush();
  auto report = Analyze(s.Chunks());
  const PhaseReport* forward = Phase(report->processes.at(0), "forward");
  ASSERT_NE(forward, nullptr);
  const PhaseDeviceStats& d = forward->devices.at(0);
  EXPECT_EQ(d.bytes_at_entry, 300u);  // the occurrence with the highest peak: the first
  EXPECT_EQ(d.peak_bytes, 1600u);
  EXPECT_EQ(d.peak_above_entry_bytes, 1300u);
  EXPECT_EQ(d.first.bytes_at_entry, 300u);
  EXPECT_EQ(d.first.peak_above_entry_bytes, 1300u);
  EXPECT_EQ(d.steady_of, 2u);  // occurrences 2 and 3: rises 200 and 300, lower median 200
  EXPECT_EQ(d.steady.bytes_at_entry, 200u);
  EXPECT_EQ(d.steady.peak_bytes, 400u);
  EXPECT_EQ(d.steady.peak_above_entry_bytes, 200u);

  // In every output, peak - at entry = above entry.
  const nlohmann::json summary = nlohmann::json::parse(SummaryJson(*report));
  for (const auto& phase : summary["processes"][0]["phases"]) {
    for (const auto& dev : phase["devices"]) {
      for (const auto& w : {dev, dev["first_occurrence"], dev["steady_state"]}) {
        EXPECT_EQ(w["peak_bytes"].get<uint64_t>() - w["bytes_at_entry"].get<uint64_t>(),
                  w["peak_above_entry_bytes"].get<uint64_t>());
      }
      EXPECT_EQ(dev["steady_state"]["of_occurrences"], 2);
    }
  }
  std::map<std::string, std::string> tables;
  for (auto& [name, text] : SummaryCsvTables(*report)) tables[name] = text;
  const auto rows = CsvRows(tables.at("phases.csv"));
  ASSERT_EQ(rows.size(), 2u);
  auto field = [&rows](const std::string& name) {
    const auto& h = rows[0];
    return std::stoull(rows[1].at(std::find(h.begin(), h.end(), name) - h.begin()));
  };
  for (const std::string prefix : {"", "first_", "steady_"}) {
    EXPECT_EQ(field(prefix + "peak_bytes") - field(prefix + "bytes_at_entry"),
              field(prefix + "peak_above_entry_bytes"))
        << prefix;
  }
  EXPECT_EQ(field("steady_peak_above_entry_bytes"), 200u);
  std::ostringstream text;
  PrintSummaryText(*report, text);
  EXPECT_NE(text.str().find("steady: +above"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("highest: the occurrence with the highest peak"), std::string::npos);
}

// A PyTorch-shaped training loop with no NVTX: the calling thread (10) runs forward and the
// optimizer, the autograd worker (11) the backward pass; weights exist before the loop.
StreamBuilder UnlabeledTraining(int iterations, bool library_workspace = false) {
  StreamBuilder s(1, 10);
  NameThread(s, 10, "python3");
  NameThread(s, 11, "pt_autograd_0");
  s.Alloc(1, 0, 0x1000, 100 * MiB, testing::kDevice, 10);  // weights
  uint64_t t = 100;
  for (int k = 0; k < iterations; ++k) {
    const uint64_t act = 0x10000 + k * 0x1000, tmp = 0x20000 + k * 0x1000;
    const uint64_t grad = 0x30000 + k * 0x1000, opt = 0x40000 + k * 0x1000;
    s.Alloc(t + 1, 0, act, 10 * MiB, testing::kDevice, 10);   // forward: activation
    s.Alloc(t + 2, 0, tmp, 1 * MiB, testing::kDevice, 11);    // backward: temporary
    s.Free(t + 3, 0, tmp, 1 * MiB, testing::kDevice, 11);
    s.Alloc(t + 4, 0, grad, 5 * MiB, testing::kDevice, 11);   // backward: gradient
    s.Free(t + 5, 0, act, 10 * MiB, testing::kDevice, 11);    // activation freed in backward
    s.Alloc(t + 6, 0, opt, 2 * MiB, testing::kDevice, 10);    // optimizer: temporary
    s.Free(t + 7, 0, opt, 2 * MiB, testing::kDevice, 10);
    s.Free(t + 8, 0, grad, 5 * MiB, testing::kDevice, 10);    // zero_grad(set_to_none=True)
    if (k == 0 && library_workspace) {
      // The first backward pass also makes a library workspace that is never freed (cuBLAS
      // does, per thread): it must not keep the first optimizer from being found.
      s.Alloc(t + 4, 0, 0x90000, 64 * MiB, testing::kDevice, 11);
    }
    t += 100;
  }
  s.Flush();
  return s;
}

// A file analysis says how far it is, per pass: the inferred phases need more than one pass
// here, and each pass ends with all of the file read.
TEST(Inference, FileAnalysisReportsProgressPerPass) {
  const std::string bytes = testing::FileBytes(UnlabeledTraining(4).Chunks());
  const std::string path = testing::WriteTempFile("progress.cmtrace", bytes);
  AnalysisOptions options;
  std::vector<std::tuple<int, uint64_t, uint64_t>> calls;
  options.progress = [&calls](int pass, uint64_t done, uint64_t total) {
    calls.emplace_back(pass, done, total);
  };
  std::string error;
  auto report = testing::AnalyzeFile(path, options, &error);
  ASSERT_NE(report, nullptr) << error;
  ASSERT_TRUE(report->processes.at(0).phase_inference.applied);
  ASSERT_FALSE(calls.empty());
  std::map<int, uint64_t> last;  // pass -> bytes done at its last call
  for (const auto& [pass, done, total] : calls) {
    if (last.count(pass) == 0) {
      EXPECT_EQ(done, 0u) << pass;  // each pass says when it starts
    }
    EXPECT_EQ(total, bytes.size());
    EXPECT_GE(done, last[pass]) << pass;
    last[pass] = done;
  }
  EXPECT_GE(last.size(), 2u);  // the inference reads the file again
  EXPECT_EQ(last.begin()->first, 1);
  for (const auto& [pass, done] : last) EXPECT_EQ(done, bytes.size()) << pass;
}

// With PyTorch's bridge attached, tensors get a synthetic API and caller name: neither may
// take the name of an inferred phase (both are interned ids the analysis makes up).
TEST(Inference, PhaseNamesAndTensorOriginsStayApartWithTheBridge) {
  StreamBuilder s = UnlabeledTraining(4);
  v1::Event state;
  state.set_timestamp_ns(2);
  state.mutable_torch_bridge()->set_attached(true);
  state.mutable_torch_bridge()->set_library("/venv/torch/lib/libc10_cuda.so");
  s.Raw(state);
  for (uint64_t sequence = 1; sequence <= 2; ++sequence) {
    v1::Event e;
    e.set_timestamp_ns(100 + sequence);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(sequence == 1 ? v1::TORCH_ALLOCATOR_ACTION_ALLOC
                                : v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED);
    t->set_sequence(sequence);
    t->set_address(0x7000);
    t->set_requested_bytes(512);
    t->set_allocated_bytes_total(512);
    t->set_allocated_bytes_current(sequence == 1 ? 0 : 512);
    t->set_thread_id(10);
    s.Raw(e);
  }
  s.Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  ASSERT_TRUE(p.phase_inference.applied) << p.phase_inference.reason;
  for (const char* name : {"forward", "backward", "optimizer"}) {
    EXPECT_NE(Phase(p, name), nullptr) << name;
  }
  const DeviceReport& d = p.devices.at(0);
  EXPECT_EQ(d.by_library.count("libc10_cuda.so"), 1u);
  EXPECT_EQ(d.by_api.count("PyTorch caching allocator"), 1u);
  for (const auto& [library, stats] : d.by_library) EXPECT_NE(library, "forward");
}

TEST(Inference, ForwardBackwardAndOptimizerFromTheAutogradThread) {
  auto report = Analyze(UnlabeledTraining(4).Chunks());
  const ProcessReport& p = report->processes.at(0);
  ASSERT_TRUE(p.phase_inference.applied) << p.phase_inference.reason;
  EXPECT_EQ(p.phase_inference.calling_thread, 10u);
  EXPECT_EQ(p.phase_inference.backward_passes, 4u);
  EXPECT_EQ(p.phase_inference.optimizers_inferred, 4u);
  const PhaseReport* forward = Phase(p, "forward");
  const PhaseReport* backward = Phase(p, "backward");
  const PhaseReport* optimizer = Phase(p, "optimizer");
  ASSERT_TRUE(forward && backward && optimizer);
  EXPECT_TRUE(forward->inferred && backward->inferred && optimizer->inferred);
  EXPECT_EQ(forward->domain, "");  // no NVTX domain
  EXPECT_EQ(backward->occurrences, 4u);
  // The first forward also holds the weights (work before the first iteration).
  EXPECT_EQ(forward->devices[0].allocated_bytes, 100 * MiB + 4 * 10 * MiB);
  EXPECT_EQ(backward->devices[0].allocated_bytes, 4 * 6 * MiB);
  EXPECT_EQ(backward->devices[0].freed_bytes, 4 * 11 * MiB);
  EXPECT_EQ(optimizer->devices[0].allocated_bytes, 4 * 2 * MiB);
  EXPECT_EQ(optimizer->devices[0].freed_bytes, 4 * 7 * MiB);
  EXPECT_EQ(p.iterations.source, "repetition");
  EXPECT_EQ(p.iterations.range, "forward > backward > optimizer");
  EXPECT_EQ(p.iterations.count, 4u);
}

TEST(Inference, ANeverFreedWorkspaceOfTheFirstBackwardPassKeepsEveryOptimizer) {
  auto report = Analyze(UnlabeledTraining(4, /*library_workspace=*/true).Chunks());
  const ProcessReport& p = report->processes.at(0);
  ASSERT_TRUE(p.phase_inference.applied) << p.phase_inference.reason;
  EXPECT_EQ(p.phase_inference.optimizers_inferred, 4u);
  EXPECT_EQ(p.iterations.count, 4u);
  EXPECT_EQ(p.iterations.range, "forward > backward > optimizer");
  EXPECT_EQ(Phase(p, "backward")->devices[0].allocated_bytes, 4 * 6 * MiB + 64 * MiB);
}

TEST(Inference, NotAppliedWhenTheProgramLabelsItsPhases) {
  StreamBuilder s = UnlabeledTraining(2);
  s.String(50, "forward").Push(1000, 10, 50).Pop(1001, 10).Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_FALSE(p.phase_inference.applied);
  EXPECT_NE(p.phase_inference.reason.find("NVTX"), std::string::npos);
  AnalysisOptions no_infer;
  no_infer.infer_phases = false;
  auto plain = Analyze(UnlabeledTraining(2).Chunks(), no_infer);
  EXPECT_TRUE(plain->processes.at(0).phases.empty());
}

TEST(Lifetimes, ClassesAtThePeakAndActivationMemory) {
  auto report = Analyze(UnlabeledTraining(3).Chunks());
  const DeviceReport* d = FindDevice(report->processes.at(0), 0);
  ASSERT_NE(d, nullptr);
  // The peak: weights + activation + gradient = 115 MiB, while the backward pass finishes.
  EXPECT_EQ(d->peak.bytes, 115 * MiB);
  const auto& classes = d->lifetime_at_peak.bytes_by_class;
  EXPECT_EQ(classes.at("persistent"), 100 * MiB);
  EXPECT_EQ(classes.at("activation"), 10 * MiB);
  EXPECT_EQ(classes.at("gradient"), 5 * MiB);
  EXPECT_EQ(d->lifetime_at_peak.activation_memory_bytes, 15 * MiB);

  AnalysisOptions keep;
  keep.keep_lifetimes = true;
  auto detailed = Analyze(UnlabeledTraining(3).Chunks(), keep);
  std::map<std::string, int> count;
  for (const AllocationLifetime& a : detailed->processes.at(0).lifetimes) {
    ++count[a.lifetime_class];
    if (a.bytes == 1 * MiB) {
      EXPECT_EQ(a.birth_phase, "backward");
      EXPECT_EQ(a.death_phase, "backward");
      EXPECT_EQ(a.birth_iteration, a.death_iteration);
    }
  }
  EXPECT_EQ(count["persistent"], 1);
  EXPECT_EQ(count["activation"], 3);
  EXPECT_EQ(count["gradient"], 3);
  EXPECT_EQ(count["temporary"], 6);  // backward scratch and optimizer scratch
}

// One training step, as research scripts measure it (build the model, one step, read the
// peak, exit): weights and optimizer buffers made before the step, a library workspace made
// in its first phase, then EP (settle free/nudged, energy, contrast, update) or backprop
// (forward, backward, optimizer). `teardown`: the program frees everything after the last
// phase (Python at interpreter exit); otherwise it exits holding it.
StreamBuilder OneStep(bool ep, bool teardown) {
  StreamBuilder s(1, 10);
  const std::vector<std::string> names =
      ep ? std::vector<std::string>{"settle_free", "settle_nudged", "energy", "contrast", "update"}
         : std::vector<std::string>{"forward", "backward", "optimizer"};
  for (size_t i = 0; i < names.size(); ++i) s.String(static_cast<uint32_t>(i + 1), names[i]);
  s.Alloc(1, 0, 0x1000, 100 * MiB, testing::kDevice, 10);  // weights
  s.Alloc(2, 0, 0x2000, 100 * MiB, testing::kDevice, 10);  // optimizer buffers
  uint64_t t = 10;
  s.Push(t, 10, 1).Alloc(t + 1, 0, 0x3000, 32 * MiB, testing::kDevice, 10);  // workspace
  s.Alloc(t + 2, 0, 0x4000, 8 * MiB, testing::kDevice, 10);                 // state / activation
  if (ep) {
    s.Pop(t + 3, 10).Push(t + 4, 10, 2).Alloc(t + 5, 0, 0x5000, 8 * MiB, testing::kDevice, 10);
    s.Pop(t + 6, 10).Push(t + 7, 10, 3).Alloc(t + 8, 0, 0x6000, 1 * MiB, testing::kDevice, 10);
    s.Free(t + 9, 0, 0x6000, 1 * MiB, testing::kDevice, 10).Pop(t + 10, 10);
    s.Push(t + 11, 10, 4);
  } else {
    s.Alloc(t + 5, 0, 0x5000, 8 * MiB, testing::kDevice, 10).Pop(t + 10, 10).Push(t + 11, 10, 2);
  }
  s.Alloc(t + 12, 0, 0x7000, 4 * MiB, testing::kDevice, 10);  // gradients: the peak
  // A library workspace made on the second phase's first call (the autograd thread's cuBLAS
  // workspace, born in backward) and kept until exit.
  s.Alloc(t + 12, 0, 0x8000, 16 * MiB, testing::kDevice, 10);
  s.Free(t + 13, 0, 0x4000, 8 * MiB, testing::kDevice, 10);
  s.Free(t + 14, 0, 0x5000, 8 * MiB, testing::kDevice, 10).Pop(t + 15, 10);
  s.Push(t + 16, 10, ep ? 5 : 3).Free(t + 17, 0, 0x7000, 4 * MiB, testing::kDevice, 10);
  s.Pop(t + 18, 10);
  if (teardown) {
    s.Free(t + 29, 0, 0x8000, 16 * MiB, testing::kDevice, 10);
    s.Free(t + 30, 0, 0x3000, 32 * MiB, testing::kDevice, 10);
    s.Free(t + 31, 0, 0x2000, 100 * MiB, testing::kDevice, 10);
    s.Free(t + 32, 0, 0x1000, 100 * MiB, testing::kDevice, 10);
  }
  s.Exit(t + 40, 0);
  s.Flush();
  return s;
}

TEST(Lifetimes, OneStepProgramsKeepWeightsPersistentWhateverTheTeardown) {
  // Freed at interpreter exit or never freed, in EP and in backprop alike: weights, optimizer
  // buffers and the workspace are persistent, and activation memory = peak - persistent. (The
  // weights were "other" when freed at exit, and the EP sweep's activation column held them.)
  for (bool ep : {true, false}) {
    for (bool teardown : {true, false}) {
      SCOPED_TRACE(std::string(ep ? "EP" : "BP") + (teardown ? ", freed in teardown" : ", kept"));
      AnalysisOptions keep;
      keep.keep_lifetimes = true;
      for (const AnalysisOptions& options : {AnalysisOptions(), keep}) {
        auto report = Analyze(OneStep(ep, teardown).Chunks(), options);
        const ProcessReport& p = report->processes.at(0);
        EXPECT_EQ(p.iterations.count, 0u);
        const DeviceReport* d = FindDevice(p, 0);
        ASSERT_NE(d, nullptr);
        EXPECT_EQ(d->peak.bytes, 268 * MiB);
        const auto& classes = d->lifetime_at_peak.bytes_by_class;
        // Weights, optimizer buffers and both workspaces, also the one born in backward.
        EXPECT_EQ(classes.at("persistent"), 248 * MiB);
        EXPECT_EQ(classes.at("activation"), 16 * MiB);
        EXPECT_EQ(classes.at("gradient"), 4 * MiB);
        EXPECT_EQ(classes.count("other"), 0u);
        EXPECT_EQ(d->lifetime_at_peak.activation_memory_bytes, 20 * MiB);
        for (const AllocationLifetime& a : p.lifetimes) {
          if (a.bytes >= 16 * MiB) {
            EXPECT_EQ(a.lifetime_class, "persistent") << a.address;
          }
        }
      }
    }
  }
}

// Splits RFC 4180 CSV text without quoted fields (these tables have none) into rows of fields.
std::vector<std::vector<std::string>> CsvRows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string f; std::getline(cells, f, ',');) fields.push_back(f);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    rows.push_back(fields);
  }
  return rows;
}

TEST(TrainingCsv, IterationStatisticsAndOneLifetimeRowPerAllocation) {
  AnalysisOptions keep;
  keep.keep_lifetimes = true;
  auto report = Analyze(UnlabeledTraining(3).Chunks(), keep);
  std::map<std::string, std::string> tables;
  for (auto& [name, text] : SummaryCsvTables(*report)) tables[name] = text;
  const auto lifetimes = CsvRows(tables.at("lifetimes.csv"));
  ASSERT_EQ(lifetimes.size(), 1u + 1 + 3 * 4);  // header, weights, 4 allocations x 3
  const std::vector<std::string>& header = lifetimes[0];
  const size_t cls = std::find(header.begin(), header.end(), "lifetime_class") - header.begin();
  const size_t death = std::find(header.begin(), header.end(), "death_ns") - header.begin();
  ASSERT_LT(cls, header.size());
  std::map<std::string, int> classes;
  for (size_t i = 1; i < lifetimes.size(); ++i) {
    ++classes[lifetimes[i].at(cls)];
    if (lifetimes[i].at(cls) == "persistent") {
      EXPECT_EQ(lifetimes[i].at(death), "");  // never freed
    }
  }
  EXPECT_EQ(classes, (std::map<std::string, int>{
                         {"activation", 3}, {"gradient", 3}, {"persistent", 1}, {"temporary", 6}}));
  const auto iterations = CsvRows(tables.at("iteration_phases.csv"));
  const auto& h = iterations[0];
  const size_t phase = std::find(h.begin(), h.end(), "phase") - h.begin();
  const size_t median =
      std::find(h.begin(), h.end(), "peak_above_entry_bytes_median") - h.begin();
  bool found = false;
  for (size_t i = 1; i < iterations.size(); ++i) {
    if (iterations[i].at(phase) != "backward") continue;
    found = true;
    // Backward: +1 MiB scratch, then +5 MiB gradient after the scratch is freed.
    EXPECT_EQ(iterations[i].at(median), std::to_string(5 * MiB));
  }
  EXPECT_TRUE(found) << tables.at("iteration_phases.csv");
}

TEST(Iterations, FromStepRangesWithWarmupApartAndLowerMedian) {
  StreamBuilder s(1, 7);
  s.String(1, "train_step").String(2, "forward");
  const uint64_t sizes[] = {100, 10, 30, 20};  // forward's rise per iteration
  uint64_t t = 10;
  for (int k = 0; k < 4; ++k) {
    const uint64_t a = 0x100 + k;
    s.Push(t, 7, 1).Push(t + 1, 7, 2).Alloc(t + 2, 0, a, sizes[k], testing::kDevice, 7);
    s.Free(t + 3, 0, a, sizes[k], testing::kDevice, 7).Pop(t + 4, 7).Pop(t + 5, 7);
    t += 10;
  }
  s.Flush();
  auto report = Analyze(s.Chunks());
  const ProcessReport& p = report->processes.at(0);
  EXPECT_EQ(p.iterations.source, "range");
  EXPECT_EQ(p.iterations.range, "train_step");
  EXPECT_EQ(p.iterations.count, 4u);
  const IterationPhaseStats* forward = IterPhase(p, "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_TRUE(forward->in_warmup);
  ASSERT_EQ(forward->devices.size(), 1u);
  const IterationPhaseDevice& d = forward->devices[0];
  EXPECT_EQ(d.warmup_peak_above_entry_bytes, 100);
  EXPECT_EQ(d.peak_above_entry_bytes.count, 3u);
  EXPECT_EQ(d.peak_above_entry_bytes.median, 20);  // lower median of {10, 20, 30}
  EXPECT_EQ(d.peak_above_entry_bytes.min, 10);
  EXPECT_EQ(d.peak_above_entry_bytes.max, 30);
  EXPECT_EQ(d.net_change_bytes.max, 0);
  EXPECT_EQ(IterPhase(p, "train_step"), nullptr);  // the iteration range is not a phase row

  AnalysisOptions named;
  named.iteration_range = "forward";
  EXPECT_EQ(Analyze(s.Chunks(), named)->processes.at(0).iterations.range, "forward");
  named.iteration_range = "nothing_like_it";
  const IterationReport none = Analyze(s.Chunks(), named)->processes.at(0).iterations;
  EXPECT_EQ(none.count, 0u);
  EXPECT_NE(none.note.find("nothing_like_it"), std::string::npos);
}

TEST(Iterations, RepetitionAfterASetupPrefix) {
  StreamBuilder s(1, 7);
  s.String(1, "setup").String(2, "settle_free").String(3, "settle_nudged").String(4, "update");
  s.Push(1, 7, 1).Pop(5, 7);
  uint64_t t = 10;
  for (int k = 0; k < 3; ++k) {
    for (uint32_t phase : {2u, 3u, 4u}) {
      s.Push(t, 7, phase).Pop(t + 2, 7);
      t += 3;
    }
  }
  s.Flush();
  auto report = Analyze(s.Chunks());
  const IterationReport& it = report->processes.at(0).iterations;
  EXPECT_EQ(it.source, "repetition");
  EXPECT_EQ(it.range, "settling/free > settling/nudged > update");
  EXPECT_EQ(it.count, 3u);
  ASSERT_EQ(it.windows_ns.size(), 3u);
  EXPECT_EQ(it.windows_ns[1].first - it.windows_ns[0].first, 9u);
}

TEST(RunFigures, CompareAndSweepTablesAgreeWithTheReports) {
  auto small = Analyze(UnlabeledTraining(3).Chunks());
  StreamBuilder bigger(1, 10);
  bigger.Alloc(1, 0, 0x1, 300 * MiB, testing::kDevice, 10).Flush();
  auto large = Analyze(bigger.Chunks());
  const RunFigures a = FiguresOf(*small, "EP");
  const RunFigures b = FiguresOf(*large, "BP");
  ASSERT_TRUE(a.found && b.found);
  EXPECT_EQ(a.peak_bytes, 115 * MiB);
  EXPECT_EQ(a.activation_memory_bytes, 15 * MiB);
  const std::string text = CompareText({a, b});
  EXPECT_NE(text.find("115.0 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("+185.0 MiB"), std::string::npos) << text;  // BP's peak vs EP's
  const std::string csv = CompareCsv({a, b});
  EXPECT_NE(csv.find("BP,10,0,peak," + std::to_string(300 * MiB) + "," +
                     std::to_string(185 * MiB) + "\r\n"),
            std::string::npos)
      << csv;

  std::vector<SweepPoint> points = {{"EP", "10", 0, a, ""}, {"BP", "10", 0, b, ""},
                                    {"EP", "50", 3, RunFigures{}, ""}};
  const std::string table = SweepText("depth", points);
  std::istringstream lines(table);
  std::string header, row10, row50;
  std::getline(lines, header);
  std::getline(lines, row10);
  std::getline(lines, row50);
  EXPECT_NE(header.find("EP peak"), std::string::npos) << table;
  EXPECT_NE(header.find("BP activation"), std::string::npos) << table;
  EXPECT_EQ(row10.rfind("10", 0), 0u) << table;
  EXPECT_NE(row10.find("300.0 MiB"), std::string::npos) << table;
  EXPECT_NE(row50.find("exit 3"), std::string::npos) << table;
  const std::string sweep_csv = SweepCsv("depth", points);
  EXPECT_NE(sweep_csv.find("EP,10,0," + std::to_string(115 * MiB) + "," +
                           std::to_string(100 * MiB) + "," + std::to_string(15 * MiB)),
            std::string::npos)
      << sweep_csv;
  EXPECT_NE(sweep_csv.find("EP,50,3,,,,,,"), std::string::npos) << sweep_csv;
}

}  // namespace
}  // namespace cumemtrace

namespace cumemtrace {
namespace {

// Two ranks of one job on two hosts whose monotonic clocks differ by an hour: the clock
// pairs put both on CLOCK_REALTIME, and the job view ranks them.
TEST(Job, RanksOnTwoHostsLineUpOnRealtimeAndShowTheSpread) {
  constexpr uint64_t kRealtimeAtConnect = 1'700'000'000'000'000'000ull;
  testing::StreamBuilder host_a(1, 100), host_b(2, 200);
  host_a.handshake().set_rank(0);
  host_a.handshake().set_world_size(2);
  host_a.handshake().set_hostname("host-a");
  host_a.handshake().mutable_clock_pair()->set_monotonic_ns(1'000'000);
  host_a.handshake().mutable_clock_pair()->set_realtime_ns(kRealtimeAtConnect);
  host_b.handshake().set_rank(1);
  host_b.handshake().set_world_size(2);
  host_b.handshake().set_hostname("host-b");
  host_b.handshake().mutable_clock_pair()->set_monotonic_ns(3'600'000'000'000 + 1'000'000);
  host_b.handshake().mutable_clock_pair()->set_realtime_ns(kRealtimeAtConnect);
  // Both reach their peak 5 ms after connecting, each by its own clock.
  host_a.Alloc(1'000'000 + 5'000'000, 0, 0x10, 300 * MiB, testing::kDevice, 100).Flush();
  host_b.Alloc(3'600'000'000'000 + 1'000'000 + 5'000'000, 0, 0x10, 400 * MiB, testing::kDevice,
               200)
      .Flush();
  auto report = Analyze(testing::Concat({host_a.Chunks(), host_b.Chunks()}));
  const JobReport& job = report->job;
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.world_size, 2);
  EXPECT_EQ(job.hosts, (std::vector<std::string>{"host-a", "host-b"}));
  EXPECT_EQ(job.ranks[0].rank, 0);
  EXPECT_EQ(job.ranks[1].peak_bytes, 400 * MiB);
  EXPECT_EQ(job.highest_rank, 1);
  EXPECT_DOUBLE_EQ(job.imbalance, 0.25);  // (400 - 300) / 400
  EXPECT_EQ(job.ranks[0].peak_abs_ns, kRealtimeAtConnect + 5'000'000);
  EXPECT_EQ(job.ranks[1].peak_abs_ns, job.ranks[0].peak_abs_ns);
  // A stream without a rank (the launcher) is not a rank of the job.
  testing::StreamBuilder launcher(3, 50);
  auto with_launcher =
      Analyze(testing::Concat({host_a.Chunks(), host_b.Chunks(), launcher.Chunks()}));
  EXPECT_EQ(with_launcher->job.ranks.size(), 2u);
}

}  // namespace
}  // namespace cumemtrace
