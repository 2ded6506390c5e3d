#include "collector/cli/output_names.h"

#include <algorithm>

namespace cumemtrace {

std::string SafePathComponent(const std::string& text) {
  constexpr size_t kMaxBytes = 200;  // NAME_MAX is 255; room for a "-N" suffix
  std::string out = text.substr(0, kMaxBytes);
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '/' || u < 0x20 || u == 0x7f) c = '_';
  }
  if (out.empty()) return "_";
  if (out[0] == '.') out[0] = '_';  // no ".", "..", or hidden file
  return out;
}

std::string SweepRunFolderName(const std::string& label, const std::string& name,
                               const std::string& value, std::vector<std::string>* taken) {
  const std::string base =
      SafePathComponent((label.empty() ? std::string("run") : label) + "-" + name + "=" + value);
  std::string candidate = base;
  for (int n = 2; std::find(taken->begin(), taken->end(), candidate) != taken->end(); ++n) {
    candidate = base + "-" + std::to_string(n);
  }
  taken->push_back(candidate);
  return candidate;
}

std::vector<std::string> SplitValues(const std::string& values) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= values.size()) {
    const size_t comma = values.find(',', start);
    const size_t end = comma == std::string::npos ? values.size() : comma;
    if (end > start) out.push_back(values.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool ParseProcessId(const std::string& text, uint32_t* pid) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value == 0 || value > 0xffffffffu) return false;
  *pid = static_cast<uint32_t>(value);
  return true;
}

}  // namespace cumemtrace
