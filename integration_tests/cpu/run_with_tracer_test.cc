// `cumemtrace run` with the real tracer, without a GPU:
// - --phase PHASE=MODULE:QUALNAME on an unmodified Python program, through the Python
//   start-up hooks: the named methods become phases, the loop's iterations are found, and a
//   name that cannot be resolved gets one warning;
// - a CUDA program on a machine with no CUDA driver: NVTX phases and the process's lifetime
//   are recorded, with one notice;
// - the Python side's categories, read from a stand-in torch's objects at the moments torch
//   calls its hooks (python/fake_torch).
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration_tests/cpu/child_process.h"

namespace {

namespace fs = std::filesystem;

using cumemtrace::testing::ReadFile;
using cumemtrace::testing::Shell;

class PythonPhases : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = cumemtrace::testing::MakeTempDir("cumemtrace-pyphase");
    ASSERT_FALSE(tmp_.empty());
    // The real interpreter, not a launcher shim, so the summary has one python process.
    ASSERT_EQ(Shell("python3 -c 'import sys; print(sys.executable)' > " + tmp_ + "/python"), 0);
    python_ = ReadFile(tmp_ + "/python");
    while (!python_.empty() && python_.back() == '\n') python_.pop_back();
    std::ofstream(tmp_ + "/toy_train.py") << R"(import sys
class Trainer:
    def settle(self, n):
        return sum(range(n))
    def update(self):
        return 1
    @staticmethod
    def energy(x):
        return x * 2
trainer = Trainer()
for _ in range(3):
    trainer.settle(1000)
    Trainer.energy(3)
    trainer.update()
print("trained")
sys.exit(4)
)";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  std::string tmp_;
  std::string python_;
};

TEST_F(PythonPhases, NamedMethodsBecomePhasesWithoutEditingTheProgram) {
  const std::string out = tmp_ + "/out";
  const int status = Shell(
      "cd " + tmp_ + " && env -u CUMEMTRACE_TRACER_LIB -u CUMEMTRACE_SOCKET " CUMEMTRACE_BIN
      " run -o " + out + " --quiet --phase settling=toy_train:Trainer.settle"
      " --phase energy=toy_train:Trainer.energy --phase update=toy_train:Trainer.update"
      " --phase ghost=no_such_package.module:f -- " + python_ + " toy_train.py > " + tmp_ +
      "/stdout 2> " + tmp_ + "/stderr");
  EXPECT_EQ(status, 4);
  EXPECT_EQ(ReadFile(tmp_ + "/stdout"), "trained\n");
  const std::string err = ReadFile(tmp_ + "/stderr");
  // Said once, at exit: a module may be imported at any time.
  EXPECT_NE(err.find("ghost=no_such_package.module:f: module 'no_such_package.module' was never "
                     "imported"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("ghost=no_such_package.module:f was never called"), std::string::npos)
      << "one warning per name is enough: " << err;

  std::ifstream in(out + "/summary.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json summary = nlohmann::json::parse(in);
  const nlohmann::json* program = nullptr;
  for (const nlohmann::json& p : summary["processes"]) {
    if (!p["phases"].empty()) program = &p;
  }
  ASSERT_NE(program, nullptr) << summary.dump(1);
  std::map<std::string, uint64_t> occurrences;
  for (const nlohmann::json& phase : (*program)["phases"]) {
    occurrences[phase["name"]] = phase["occurrences"];
  }
  EXPECT_EQ(occurrences, (std::map<std::string, uint64_t>{{"settling", 3}, {"energy", 3},
                                                           {"update", 3}}));
  EXPECT_EQ((*program)["iterations"]["count"], 3);
  EXPECT_EQ((*program)["iterations"]["range"], "settling > energy > update");
}

// Research code that is not installed: the script puts its library on sys.path, then imports
// it; another module is imported lazily inside a function. Both used to get "no module ...
// can be imported; ignored" at start.
TEST_F(PythonPhases, ModulesImportedLaterAreResolvedWhenImported) {
  fs::create_directories(tmp_ + "/src/eplib");
  std::ofstream(tmp_ + "/src/eplib/__init__.py") << "";
  std::ofstream(tmp_ + "/src/eplib/trainer.py") << R"(class Trainer:
    def settle(self, n):
        return sum(range(n))
def update():
    return 1
)";
  std::ofstream(tmp_ + "/src/lazy_energy.py") << "def energy(x):\n    return x * 2\n";
  fs::create_directories(tmp_ + "/examples");
  std::ofstream(tmp_ + "/examples/run_ep.py") << R"(import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from eplib import trainer
def energy(x):
    import lazy_energy
    return lazy_energy.energy(x)
t = trainer.Trainer()
for _ in range(3):
    t.settle(1000)
    energy(3)
    trainer.update()
print("trained")
)";
  const std::string out = tmp_ + "/out";
  const int status = Shell(
      "cd " + tmp_ + "/examples && env -u CUMEMTRACE_TRACER_LIB -u CUMEMTRACE_SOCKET "
      "-u PYTHONPATH " CUMEMTRACE_BIN " run -o " + out +
      " --quiet --phase settling=eplib.trainer:Trainer.settle"
      " --phase energy=lazy_energy:energy --phase update=eplib.trainer:update -- " + python_ +
      " run_ep.py > " + tmp_ + "/stdout 2> " + tmp_ + "/stderr");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(ReadFile(tmp_ + "/stdout"), "trained\n");
  const std::string err = ReadFile(tmp_ + "/stderr");
  EXPECT_EQ(err.find("--phase"), std::string::npos) << err;
  std::ifstream in(out + "/summary.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json summary = nlohmann::json::parse(in);
  std::map<std::string, uint64_t> occurrences;
  for (const nlohmann::json& p : summary["processes"]) {
    for (const nlohmann::json& phase : p["phases"]) occurrences[phase["name"]] = phase["occurrences"];
  }
  EXPECT_EQ(occurrences, (std::map<std::string, uint64_t>{{"settling", 3}, {"energy", 3},
                                                           {"update", 3}}));
}

TEST_F(PythonPhases, MalformedPhaseIsAUsageError) {
  const int status = Shell("env -u CUMEMTRACE_TRACER_LIB " CUMEMTRACE_BIN " run -o " + tmp_ +
                           "/x --phase settling -- true 2> " + tmp_ + "/stderr");
  EXPECT_EQ(status, 2);
  EXPECT_NE(ReadFile(tmp_ + "/stderr").find("PHASE=MODULE:QUALNAME"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp_ + "/x"));  // nothing created for a refused command line
}

TEST_F(PythonPhases, NoCudaDriverStillRecordsPhasesWithOneNotice) {
  const std::string out = tmp_ + "/out";
  const int status = Shell("env -u CUMEMTRACE_TRACER_LIB -u CUMEMTRACE_SOCKET " CUMEMTRACE_BIN
                           " run -o " + out + " -- " NO_DRIVER_PROBE " " CUDART_LIBRARY " > " +
                           tmp_ + "/stdout 2> " + tmp_ + "/stderr");
  EXPECT_EQ(status, 0);
  EXPECT_NE(ReadFile(tmp_ + "/stdout").find("cudaGetDeviceCount: error"), std::string::npos);
  const std::string err = ReadFile(tmp_ + "/stderr");
  size_t notices = 0;  // lines the tracer printed (the summary and the last line aside)
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cumemtrace: ", 0) == 0 && line.rfind("cumemtrace: trace written", 0) != 0 &&
        line.rfind("cumemtrace: open ", 0) != 0) {
      ++notices;
    }
  }
  EXPECT_EQ(notices, 1u) << err;
  EXPECT_NE(err.find("no CUDA driver was found"), std::string::npos) << err;
  std::ifstream in(out + "/summary.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json process = nlohmann::json::parse(in)["processes"][0];
  ASSERT_EQ(process["notices"].size(), 1u);
  EXPECT_EQ(process["notices"][0]["code"], "no_cuda_driver");
  EXPECT_EQ(process["phases"].size(), 2u);  // setup, train
  EXPECT_EQ(process["exit"]["code"], 0);
  EXPECT_TRUE(process["devices"].empty());
}

}  // namespace

namespace {

// A training loop over the stand-in torch (python/fake_torch): two parameters and a buffer,
// an optimizer whose first step makes one state tensor per parameter, new gradients every
// step, and a tensor on the CPU, which is never named.
class PythonCategories : public PythonPhases {
 protected:
  void SetUp() override {
    PythonPhases::SetUp();
    std::ofstream(tmp_ + "/fake_train.py") << R"(import torch
from torch.nn import Module, Parameter
from torch.optim import Optimizer


class Net(Module):
    def __init__(self):
        super().__init__()
        self.register_parameter("w", Parameter(4096))
        self.register_parameter("b", Parameter(512))
        self.register_buffer("running", torch.Tensor(1024))

    def forward(self, x):
        return x


class Momentum(Optimizer):
    def update(self):
        for p in self.param_groups[0]["params"]:
            self.state.setdefault(p, {"momentum_buffer": torch.Tensor(p.nbytes), "step": 1})


net = Net()
optimizer = Momentum(net.parameters())
on_cpu = torch.Tensor(64, device=-1)
for step in range(2):
    for p in net.parameters():
        p.grad = torch.Tensor(p.nbytes)
    net(None)
    optimizer.step()
print("trained")
)";
  }

  // The program's categories block in summary.json, after `run` with `options`.
  nlohmann::json Run(const std::string& options, const std::string& script) {
    const std::string out = tmp_ + "/out";
    const int status = Shell("cd " + tmp_ + " && env -u CUMEMTRACE_TRACER_LIB -u CUMEMTRACE_SOCKET "
                             "PYTHONPATH=" FAKE_TORCH_DIR " " CUMEMTRACE_BIN " run -o " + out +
                             " --quiet " + options + " -- " + python_ + " " + script + " > " +
                             tmp_ + "/stdout 2> " + tmp_ + "/stderr");
    EXPECT_EQ(status, 0) << ReadFile(tmp_ + "/stderr");
    EXPECT_EQ(ReadFile(tmp_ + "/stdout"), "trained\n");
    stderr_ = ReadFile(tmp_ + "/stderr");
    std::ifstream in(out + "/summary.json");
    if (!in.good()) return {};
    const nlohmann::json summary = nlohmann::json::parse(in);
    return summary["processes"][0]["categories"];
  }
  std::string stderr_;
};

TEST_F(PythonCategories, TheProgramsObjectsAreNamedWhenTorchCallsItsHooks) {
  const nlohmann::json categories = Run("", "fake_train.py");
  // First module call: 2 parameters and the buffer. Each step's pre-hook: the optimizer's
  // parameters (the first time only: unchanged after) and the 2 new gradients; the first
  // step's post-hook: 2 state tensors. At exit, all of it once more (11). The CPU tensor
  // never. With no GPU there is no allocation to name: every tag is unmatched.
  EXPECT_EQ(categories["tags"], 3 + (2 + 2) + 2 + 2 + 11) << categories.dump();
  EXPECT_EQ(categories["tags_unmatched"], categories["tags"]);
  EXPECT_EQ(stderr_.find("cumemtrace: categories"), std::string::npos) << stderr_;
}

// An optimizer whose state settles, then is replaced at its 6th step: read after steps 1 and
// 2, then at doubling intervals (4, 8), the replaced tensor is named at the 8th step's read
// (the collector names an allocation for its whole life), and again at exit. A state tensor
// without storage (sparse) is passed over, not the reason the state goes unread.
TEST_F(PythonCategories, StateReplacedAfterItSettledIsNamedAtTheNextRead) {
  std::ofstream(tmp_ + "/replacing.py") << R"(import torch
from torch.nn import Module, Parameter
from torch.optim import Optimizer


class Net(Module):
    def __init__(self):
        super().__init__()
        self.register_parameter("w", Parameter(4096))

    def forward(self, x):
        return x


class Replacing(Optimizer):
    steps = 0

    def update(self):
        Replacing.steps += 1
        for p in self.param_groups[0]["params"]:
            if p not in self.state or Replacing.steps == 6:
                self.state[p] = {"momentum_buffer": torch.Tensor(p.nbytes),
                                 "sparse": torch.Tensor(64, storage=False)}


net = Net()
optimizer = Replacing(net.parameters())
for step in range(10):
    for p in net.parameters():
        p.grad = torch.Tensor(p.nbytes)
    net(None)
    optimizer.step()
print("trained")
)";
  const nlohmann::json categories = Run("", "replacing.py");
  // First module call: w. The steps' pre-hooks: w once, and 10 gradients. The state: the
  // first buffer at step 1, the replaced one at step 8. At exit: w twice (module and
  // optimizer), the gradient twice, the state.
  EXPECT_EQ(categories["tags"], 1 + (1 + 10) + 2 + 5) << categories.dump();
  EXPECT_EQ(stderr_.find("cumemtrace: categories"), std::string::npos) << stderr_;
}

TEST_F(PythonCategories, NoCategoriesLeavesTheObjectsUnread) {
  const nlohmann::json categories = Run("--no-categories", "fake_train.py");
  EXPECT_EQ(categories["tags"], 0) << categories.dump();
}

TEST_F(PythonCategories, AProgramThatNeverImportsTorchIsLeftAlone) {
  std::ofstream(tmp_ + "/plain.py") << "import sys\nprint('trained')\n"
                                       "assert 'torch' not in sys.modules\n";
  const nlohmann::json categories = Run("", "plain.py");
  EXPECT_EQ(categories["tags"], 0) << categories.dump();
  EXPECT_EQ(stderr_.find("categories"), std::string::npos) << stderr_;
}

}  // namespace
