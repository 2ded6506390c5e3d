// Fuzzes what the CLI makes of names and values from its command line and from traces:
// sweep values and labels made into folder names, comma-separated value lists, process ids,
// and any name embedded in a page's <script> data. Input: fields separated by NUL bytes.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "collector/cli/output_names.h"
#include "collector/output/exports.h"

using namespace cumemtrace;

namespace {

// One path component that names a place inside its folder.
void CheckComponent(const std::string& c, size_t max_bytes) {
  if (c.empty() || c.size() > max_bytes) abort();
  if (c[0] == '.') abort();  // not ".", "..", nor hidden
  for (char ch : c) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '/' || u < 0x20 || u == 0x7f) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t nul = input.find('\0', start);
    fields.push_back(input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }

  // Sweep folders: one safe component each, all distinct.
  std::vector<std::string> taken;
  const std::string label = fields[0];
  const std::string name = fields.size() > 1 ? fields[1] : "x";
  for (size_t i = 1; i < fields.size(); ++i) {
    CheckComponent(SafePathComponent(fields[i]), 200);
    const std::string folder = SweepRunFolderName(label, name, fields[i], &taken);
    CheckComponent(folder, 255);
  }
  if (std::set<std::string>(taken.begin(), taken.end()).size() != taken.size()) abort();

  // Value lists: no empty value, no comma, and nothing else lost.
  const std::vector<std::string> values = SplitValues(fields.back());
  std::string joined, kept;
  for (const std::string& v : values) {
    if (v.empty() || v.find(',') != std::string::npos) abort();
    joined += v;
  }
  for (char ch : fields.back()) {
    if (ch != ',') kept += ch;
  }
  if (joined != kept) abort();

  // Process ids: all digits, in range, never another number.
  uint32_t pid = 0;
  if (ParseProcessId(fields[0], &pid)) {
    if (pid == 0 || fields[0].empty() || fields[0].size() > 10) abort();
    uint64_t value = 0;
    for (char ch : fields[0]) {
      if (ch < '0' || ch > '9') abort();
      value = value * 10 + static_cast<uint64_t>(ch - '0');
    }
    if (value != pid) abort();
  }

  // Names in a page's <script> data: nothing the HTML parser reacts to, the same JSON.
  for (const std::string& field : fields) {
    const std::string dumped =
        nlohmann::json(field).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string escaped = EscapeJsonForScript(dumped);
    for (std::string_view bad : {"<", ">", "&", "\xe2\x80\xa8", "\xe2\x80\xa9"}) {
      if (escaped.find(bad) != std::string::npos) abort();
    }
    if (nlohmann::json::parse(escaped) != nlohmann::json::parse(dumped)) abort();
  }
  return 0;
}
