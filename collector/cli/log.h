// One-line messages on stderr, always prefixed "cumemtrace: ". Each line goes out in a single
// write(2) so lines from the collector and the traced program never interleave mid-line.
#pragma once

#include <string>

namespace cumemtrace {

void LogLine(const std::string& message);

// "strerror(errno)" for the current errno, saved before anything else can change it.
std::string ErrnoText();

}  // namespace cumemtrace
