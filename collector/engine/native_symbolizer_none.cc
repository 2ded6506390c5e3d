// NativeSymbolizer for a build without libdw (top-level CMakeLists.txt): no frame is named,
// so native frames keep their module path and address.
#include "collector/engine/native_symbolizer.h"

namespace cumemtrace::internal {

std::string NativeSymbolizerLibrary() { return ""; }

struct NativeSymbolizer::Module {};

NativeSymbolizer::NativeSymbolizer() = default;
NativeSymbolizer::~NativeSymbolizer() = default;

bool NativeSymbolizer::Symbolize(const std::string&, uint64_t, uint64_t, NativeSymbol* out) {
  *out = NativeSymbol{};
  return false;
}

}  // namespace cumemtrace::internal
