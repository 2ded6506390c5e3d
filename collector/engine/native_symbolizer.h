// Names native return addresses of a traced process from the module files on this machine,
// with elfutils' libdwfl (symbol tables, DWARF line tables, separate debug files): the
// tracer sends raw addresses and each module's path and load bias, and never reads ELF.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace cumemtrace::internal {

struct NativeSymbol {
  std::string function;  // demangled; "" when the module has no symbol there
  std::string file;      // source file from the line table; "" when unknown
  uint32_t line = 0;
};

// "libdw <version>" when this build names native frames, "" when it was built without libdw
// (frames then keep their module and address).
std::string NativeSymbolizerLibrary();

class NativeSymbolizer {
 public:
  NativeSymbolizer();
  ~NativeSymbolizer();
  NativeSymbolizer(const NativeSymbolizer&) = delete;
  NativeSymbolizer& operator=(const NativeSymbolizer&) = delete;

  // `address` is a return address (the byte before it is looked up) in the module at `path`
  // loaded with `load_bias`. False, *out empty, when the module cannot be read or holds no
  // symbol there.
  bool Symbolize(const std::string& path, uint64_t load_bias, uint64_t address,
                 NativeSymbol* out);

 private:
  struct Module;
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<Module>> modules_;
};

}  // namespace cumemtrace::internal
