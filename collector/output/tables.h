// Internal: the two table writers of the output layer, a text table aligned in columns (the
// terminal summary, compare and sweep) and a CSV table (the summary's CSV files, compare's and
// sweep's --csv), with the cell helpers they share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cumemtrace::internal {

using Row = std::vector<std::string>;

// snprintf of one number.
inline std::string Format(const char* format, double value) {
  char text[64];
  snprintf(text, sizeof(text), format, value);
  return text;
}

// 1536 -> "1.50 KiB": three significant figures, binary units.
inline std::string Bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return Format(value < 10 ? "%.2f" : value < 100 ? "%.1f" : "%.0f", value) + " " + kUnits[unit];
}

inline std::string PhaseName(const std::string& phase) {
  return phase.empty() ? "(no phase)" : phase;
}

// A lifetime class as tables name it: the class summary.json calls "activation" by what it
// is, so that the one figure called activation is activation memory (peak - persistent).
inline std::string LifetimeClassLabel(const std::string& lifetime_class) {
  return lifetime_class == "activation" ? "forward-to-backward" : lifetime_class;
}

// `text` as a terminal shows it and never acts on it: C0 controls, DEL, C1 controls
// (U+0080..U+009F) and bytes that are not UTF-8 become escapes (`\n`, `\t`, `\x1b`,
// `\u009b`), so that a range or program name cannot move the cursor, retitle the window or
// hide what follows. Past `max_chars` characters (on each line, with `keep_newlines`) the
// text is cut and ends in "...". Only for what goes to a terminal: JSON and CSV keep names
// whole.
std::string TerminalText(std::string_view text, size_t max_chars = SIZE_MAX,
                         bool keep_newlines = false);

// Columns `text` takes on a terminal: its UTF-8 characters (wide characters count one).
size_t DisplayWidth(std::string_view text);

// Characters of a name (a phase, a range, a command) in a table cell or a summary line: a
// name of 100,000 characters once widened every row of its table to that. Long enough for
// pytest's node ids, which name its phases.
constexpr size_t kMaxNameChars = 100;
// Characters of any table cell: names cut to kMaxNameChars carry a few words more.
constexpr size_t kMaxCellChars = 120;

// `align` has one letter per column: 'l' for names, 'r' (or missing) for numbers. The first
// row sets the number of columns; trailing blanks are cut. Every cell goes through
// TerminalText, cut at kMaxCellChars.
inline void PrintTable(std::ostream& out, const std::string& indent, const std::vector<Row>& rows,
                       const std::string& align) {
  if (rows.empty()) return;
  std::vector<Row> cells;
  cells.reserve(rows.size());
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    cells.emplace_back();
    for (const std::string& cell : row) cells.back().push_back(TerminalText(cell, kMaxCellChars));
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], DisplayWidth(cells.back()[c]));
    }
  }
  for (const auto& row : cells) {
    std::string line = indent;
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      const std::string pad(width[c] - DisplayWidth(row[c]), ' ');
      const bool left = c < align.size() && align[c] == 'l';
      line += (c == 0 ? "" : "  ") + (left ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

// A CSV cell: numbers in decimal, text as it is.
template <typename T>
std::string Cell(const T& value) {
  if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(value);
  } else {
    return value;
  }
}

// A cell that is blank when the value is not `given`.
template <typename T>
std::string CellIf(bool given, const T& value) {
  return given ? Cell(value) : std::string();
}

// RFC 4180: comma-separated, CRLF line ends, fields with a comma, quote or line break quoted,
// quotes doubled.
class CsvTable {
 public:
  explicit CsvTable(const std::vector<std::string>& header) {
    for (const std::string& name : header) Field(name);
  }
  // A new row with these fields; Field() adds more.
  template <typename... T>
  CsvTable& Row(const T&... fields) {
    text_ += "\r\n";
    first_ = true;
    (Field(Cell(fields)), ...);
    return *this;
  }
  CsvTable& Field(const std::string& value) {
    if (!first_) text_ += ',';
    first_ = false;
    if (value.find_first_of(",\"\r\n") == std::string::npos) {
      text_ += value;
    } else {
      text_ += '"';
      for (char c : value) {
        if (c == '"') text_ += '"';
        text_ += c;
      }
      text_ += '"';
    }
    return *this;
  }
  std::string Text() const { return text_ + "\r\n"; }

 private:
  std::string text_;
  bool first_ = true;
};

}  // namespace cumemtrace::internal
