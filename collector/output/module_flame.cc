// The tensors at the tensor peak by module as folded stacks (`export --format modules`): one
// line per module path with bytes of its own, its frames the path's segments from the root
// module, then the bytes, as flamegraph.pl, inferno and speedscope read them.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "collector/output/exports.h"

namespace cumemtrace {
namespace {

// A frame may hold neither the separator nor a line break; a space before the count would
// be read as part of it by no reader, but keep frames plain.
std::string Frame(const std::string& text) {
  std::string out;
  for (const char c : text) out += (c == ';' || c == '\n' || c == '\r') ? '_' : c;
  return out;
}

// The segments a path adds below its parent's row: "encoder.fc1" under "encoder" adds "fc1".
std::vector<std::string> Segments(const std::string& path, const std::string& parent) {
  std::string rest = path;
  if (!parent.empty() && parent[0] != '<' &&
      path.compare(0, parent.size() + 1, parent + ".") == 0) {
    rest = path.substr(parent.size() + 1);
  }
  std::vector<std::string> out;
  if (!rest.empty() && rest[0] == '<') return {rest};
  size_t start = 0;
  for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.', start)) {
    out.push_back(rest.substr(start, dot - start));
    start = dot + 1;
  }
  out.push_back(rest.substr(start));
  return out;
}

}  // namespace

std::string ModuleFoldedStacks(const Report& report) {
  size_t given = 0;
  for (const ProcessReport& p : report.processes) {
    for (const DeviceReport& d : p.devices) given += d.attribution.given ? 1 : 0;
  }
  std::ostringstream out;
  for (const ProcessReport& p : report.processes) {
    for (const DeviceReport& d : p.devices) {
      if (!d.attribution.given) continue;
      // Several processes or devices: each under a frame of its own.
      const std::string top =
          given > 1 ? "pid " + std::to_string(p.pid) + " GPU " + std::to_string(d.index) : "";
      // The rows are depth-first, each after its parent: the path to a row is the stack of
      // rows above it of lower depth.
      std::vector<std::pair<std::string, std::vector<std::string>>> stack;  // path, frames
      for (const ModuleBytes& m : d.attribution.modules) {
        std::vector<std::string> frames;
        if (m.module.empty()) {
          frames = {"(no module)"};
          stack.clear();
        } else {
          stack.resize(std::min<size_t>(stack.size(), m.depth));
          const std::string parent = stack.empty() ? std::string() : stack.back().first;
          if (!stack.empty()) frames = stack.back().second;
          for (std::string& s : Segments(m.module, parent)) frames.push_back(std::move(s));
          stack.emplace_back(m.module, frames);
        }
        if (m.self_bytes == 0) continue;
        std::string line = top;
        for (const std::string& f : frames) line += (line.empty() ? "" : ";") + Frame(f);
        out << line << ' ' << m.self_bytes << '\n';
      }
    }
  }
  return out.str();
}

}  // namespace cumemtrace
