#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "collector/output/tables.h"

namespace cumemtrace::internal {
namespace {

// The length of the well-formed UTF-8 sequence at text[i], 0 when it is not one.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    if (lead == 0xe0) low = 0xa0;   // no overlong forms
    if (lead == 0xed) high = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  return n;
}

std::string Escape(const char* format, unsigned value) {
  char text[8];
  snprintf(text, sizeof(text), format, value);
  return text;
}

}  // namespace

std::string TerminalText(std::string_view text, size_t max_chars, bool keep_newlines) {
  std::string out;
  out.reserve(std::min(text.size(), max_chars) + 8);
  size_t chars = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' && keep_newlines) {
      out += '\n';
      chars = 0;  // a limit is per line
      ++i;
      continue;
    }
    if (chars == max_chars) {
      out += "...";
      if (!keep_newlines) break;
      const size_t newline = text.find('\n', i);  // the next line has its own limit
      if (newline == std::string_view::npos) break;
      i = newline;
      continue;
    }
    ++chars;
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += Escape("\\x%02x", c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (const size_t n = Utf8Length(text, i); n == 0) {
      out += Escape("\\x%02x", c);  // not UTF-8: a terminal may read a lone 0x9b as CSI
    } else {
      if (n == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
        out += Escape("\\u%04x", static_cast<unsigned char>(text[i + 1]));  // C1 controls
      } else {
        out.append(text.data() + i, n);
      }
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++width;
  }
  return width;
}

}  // namespace cumemtrace::internal
