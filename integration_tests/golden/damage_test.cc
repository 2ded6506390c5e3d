// Damaged trace files, measured on recorded traces: random bit flips, a tail of zeros, a cut at
// every chunk boundary. Each golden trace is also rewritten in the current format (version 2:
// a checksum per chunk, a closing FileEnd), which must summarize exactly as the original.
//
// A flip is "harmless" when the summary JSON is byte-identical to the undamaged one,
// "detected" when the file is refused with a reason or the summary says it is truncated and
// names the byte, and "silently different" otherwise. The current format must have none of the
// last; the counts of version 1 are printed for comparison (it has no checksums).
//   CUMEMTRACE_FLIPS (default 200) and CUMEMTRACE_FLIP_SEED (default 1) change the experiment.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/format/framing.h"
#include "collector/format/trace_file.h"
#include "collector/output/summary.h"

namespace cumemtrace {
namespace {

const std::string kGolden = CUMEMTRACE_GOLDEN_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

// The golden trace `name` as recorded (version 1), or for "A+B" both traces in one version 1
// file, B's streams renumbered after A's: a job of several processes, as `merge` makes.
std::string Golden(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos) return ReadFile(kGolden + "/" + name + ".cmtrace");
  std::string out("CMTRACE\x01", 8);
  uint32_t offset = 0;
  for (const std::string& part : {name.substr(0, plus), name.substr(plus + 1)}) {
    TraceFileReader reader;
    const std::string bytes = Golden(part);
    EXPECT_TRUE(reader.OpenBytes(bytes, part)) << reader.error();
    uint32_t last = 0;
    v1::TraceChunk chunk;
    while (reader.Next(&chunk) == TraceFileReader::Result::kChunk) {
      if (chunk.has_file_header() && offset > 0) continue;
      if (chunk.stream_id() != 0) chunk.set_stream_id(chunk.stream_id() + offset);
      last = std::max(last, chunk.stream_id());
      AppendFrame(chunk.SerializeAsString(), &out);
    }
    offset = last;
  }
  return out;
}

// The trace's chunks written again in the current format; *ends gets each chunk's end.
std::string Rewrite(const std::string& bytes, std::vector<size_t>* ends = nullptr) {
  TraceFileReader reader;
  EXPECT_TRUE(reader.OpenBytes(bytes, "golden")) << reader.error();
  std::string out(TraceFilePreamble());
  v1::TraceChunk chunk;
  TraceFileReader::Result result;
  while ((result = reader.Next(&chunk)) == TraceFileReader::Result::kChunk) {
    AppendChunk(chunk, &out);
    if (ends != nullptr) ends->push_back(out.size());
  }
  EXPECT_EQ(result, TraceFileReader::Result::kEnd) << reader.error();
  AppendFileEnd(out.size(), &out);
  return out;
}

struct Outcome {
  bool refused = false;
  std::string json;
  bool truncated = false;
  std::string reason;
};

Outcome Summarize(const TraceSource& source) {
  Outcome o;
  std::string error;
  std::unique_ptr<AnalyzedTrace> analyzed = Analyze(source, AnalysisOptions{}, &error);
  if (analyzed == nullptr) {
    o.refused = true;
    o.reason = error;
    return o;
  }
  analyzed->report->trace_file.clear();  // where it was read from is no figure
  o.json = SummaryJson(*analyzed->report);
  o.truncated = analyzed->report->truncated;
  o.reason = analyzed->report->truncation_reason;
  return o;
}

bool SaysWhere(const Outcome& o) {
  return !o.reason.empty() && o.reason.find("byte") != std::string::npos;
}

struct Tally {
  int detected = 0;
  int harmless = 0;
  int silent = 0;
  std::string first_silent;
};

Tally FlipBits(const std::string& bytes, const std::string& clean_json, uint64_t flips,
               uint64_t seed) {
  std::mt19937_64 random(seed);
  Tally t;
  for (uint64_t n = 0; n < flips; ++n) {
    const uint64_t bit = random() % (bytes.size() * 8);
    std::string damaged = bytes;
    damaged[bit / 8] = static_cast<char>(damaged[bit / 8] ^ (1 << (bit % 8)));
    const Outcome o = Summarize({"", damaged});
    if (o.refused ? !o.reason.empty() : (o.truncated && SaysWhere(o))) {
      ++t.detected;
    } else if (o.json == clean_json) {
      ++t.harmless;
    } else {
      if (t.silent == 0) {
        t.first_silent = "byte " + std::to_string(bit / 8) + " bit " + std::to_string(bit % 8);
      }
      ++t.silent;
    }
  }
  return t;
}

class GoldenDamage : public ::testing::TestWithParam<const char*> {};

// The figures of docs/reliability.md ("Damaged trace files").
TEST_P(GoldenDamage, RandomBitFlipsAreDetectedOrHarmlessNeverSilentlyDifferent) {
  const std::string name = GetParam();
  const std::string old_bytes = Golden(name);
  ASSERT_FALSE(old_bytes.empty());
  ASSERT_EQ(static_cast<unsigned char>(old_bytes[7]), 1u) << "the golden traces are version 1";
  const std::string current = Rewrite(old_bytes);
  const Outcome old_clean = Summarize({"", old_bytes});
  const Outcome clean = Summarize({"", current});
  ASSERT_FALSE(clean.refused) << clean.reason;
  EXPECT_FALSE(clean.truncated) << clean.reason;
  EXPECT_EQ(clean.json, old_clean.json) << "the format changed a figure";

  const uint64_t flips = EnvOr("CUMEMTRACE_FLIPS", 200);
  const uint64_t seed = EnvOr("CUMEMTRACE_FLIP_SEED", 1);
  const Tally before = FlipBits(old_bytes, old_clean.json, flips, seed);
  const Tally now = FlipBits(current, clean.json, flips, seed);
  std::cout << name << ", " << flips << " flips, seed " << seed << ":\n"
            << "  version 1 (" << old_bytes.size() << " B): detected " << before.detected
            << ", harmless " << before.harmless << ", silently different " << before.silent
            << "\n  version 2 (" << current.size() << " B): detected " << now.detected
            << ", harmless " << now.harmless << ", silently different " << now.silent << "\n";
  EXPECT_EQ(now.silent, 0) << "first at " << now.first_silent;
  EXPECT_EQ(now.detected + now.harmless, static_cast<int>(flips));
}

// A whole trace followed by 1 GiB of zeros (a sparse file: no disk used) was once read as
// clean, in 25 s. Both versions now stop at the first zero and say where.
TEST_P(GoldenDamage, ATailOfZerosIsDamageFoundAtItsFirstByte) {
  const std::string name = GetParam();
  const std::string old_bytes = Golden(name);
  for (const std::string& bytes : {old_bytes, Rewrite(old_bytes)}) {
    const std::string path =
        ::testing::TempDir() + "/" + std::to_string(getpid()) + ".zeros." + name;
    {
      std::ofstream(path, std::ios::binary | std::ios::trunc)
          .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(bytes.size() + (uint64_t{1} << 30))), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const Outcome o = Summarize({path, {}});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unlink(path.c_str());
    const int version = static_cast<unsigned char>(bytes[7]);
    std::cout << name << " version " << version << " + 1 GiB of zeros: " << seconds << " s, "
              << o.reason << "\n";
    ASSERT_FALSE(o.refused) << o.reason;
    EXPECT_TRUE(o.truncated);
    const std::string expected =
        std::string(version == 1 ? "damaged file at byte "
                                 : "damaged file: bytes follow its end record, from byte ") +
        std::to_string(bytes.size());
    EXPECT_EQ(o.reason.rfind(expected, 0), 0u) << o.reason;
  }
}

TEST_P(GoldenDamage, ACutAtEveryChunkBoundaryIsReportedAsCut) {
  const std::string name = GetParam();
  std::vector<size_t> ends;
  const std::string current = Rewrite(Golden(name), &ends);
  for (size_t end : ends) {
    const Outcome o = Summarize({"", std::string_view(current).substr(0, end)});
    ASSERT_FALSE(o.refused) << o.reason;
    EXPECT_TRUE(o.truncated) << "cut at " << end;
    EXPECT_EQ(o.reason.rfind("the file ends after " + std::to_string(end) +
                                 " bytes, at a chunk boundary, without its end record",
                             0),
              0u)
        << o.reason;
  }
}

// The name of the test: the trace's, "and" for "+".
std::string TraceName(const ::testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  for (size_t plus; (plus = name.find('+')) != std::string::npos;) name.replace(plus, 1, "_and_");
  return name;
}

INSTANTIATE_TEST_SUITE_P(Traces, GoldenDamage,
                         ::testing::Values("cuda_phases", "torch_async",
                                           "cuda_phases+torch_reset_accumulated+torch_sigterm"),
                         TraceName);

}  // namespace
}  // namespace cumemtrace
