// Names that come from the command line and become file names or numbers: every one is
// checked here, so that no value given to `sweep --param`, no label and no process id can
// name a place outside the output folder or silently become another number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cumemtrace {

// One path component made of `text`: never empty, ".", ".." or longer than 200 bytes, and
// without '/', NUL or control characters (each becomes '_'; a leading '.' becomes '_' too).
std::string SafePathComponent(const std::string& text);

// The folder of one sweep point, "LABEL-NAME=VALUE" (or "run-NAME=VALUE") as one safe
// component; when that name is already in `taken`, "-2", "-3", ... is added. Adds the
// result to `taken`.
std::string SweepRunFolderName(const std::string& label, const std::string& name,
                               const std::string& value, std::vector<std::string>* taken);

// "V1,V2,..." split at commas, empty values dropped.
std::vector<std::string> SplitValues(const std::string& values);

// A decimal process id as traces hold them (1 to 2^32-1). False for anything else: signs,
// spaces, other characters, numbers out of range (never clamped to another number).
bool ParseProcessId(const std::string& text, uint32_t* pid);

}  // namespace cumemtrace
