// NVTX through the real tracer, without a GPU: `cumemtrace run -- nvtx_phases 7` must pass
// the program's exit status through and list its NVTX ranges as phases with the right
// occurrence counts in summary.json.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

TEST(NvtxEndToEnd, RunListsPhasesWithTheirOccurrences) {
  char pattern[] = "/tmp/cumemtrace-nvtx-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string tmp = pattern;
  const std::string out = tmp + "/out";

  const pid_t pid = fork();
  if (pid == 0) {
    unsetenv("CUMEMTRACE_TRACER_LIB");  // the tracer next to the binary, as users get it
    unsetenv("CUMEMTRACE_SOCKET");
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    execl(CUMEMTRACE_BIN, CUMEMTRACE_BIN, "run", "-o", out.c_str(), "--quiet", "--",
          NVTX_PHASES_BIN, "7", static_cast<char*>(nullptr));
    _exit(121);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);

  std::ifstream in(out + "/summary.json");
  ASSERT_TRUE(in.good()) << "no summary.json in " << out;
  const nlohmann::json summary = nlohmann::json::parse(in);
  ASSERT_EQ(summary.at("processes").size(), 1u) << summary.dump(2);
  const nlohmann::json& process = summary.at("processes")[0];
  std::map<std::string, int> occurrences;
  for (const auto& phase : process.at("phases")) {
    occurrences[phase.at("name").get<std::string>()] = phase.at("occurrences").get<int>();
  }
  const std::map<std::string, int> expected = {
      {"epoch", 1}, {"step", 3}, {"forward", 3}, {"backward", 3}};
  EXPECT_EQ(occurrences, expected) << process.at("phases").dump(2);
  EXPECT_EQ(process.at("nvtx_marks").get<int>(), 1);
  bool named = false;
  for (const auto& thread : process.at("threads")) named |= thread.at("name") == "trainer";
  EXPECT_TRUE(named) << process.at("threads").dump();

  std::error_code ignored;
  fs::remove_all(tmp, ignored);
}

}  // namespace
