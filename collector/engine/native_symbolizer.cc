#include "collector/engine/native_symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include <sys/stat.h>

#include <cstdlib>

namespace cumemtrace::internal {
namespace {

const Dwfl_Callbacks kOfflineCallbacks = {
    dwfl_build_id_find_elf,
    dwfl_standard_find_debuginfo,
    dwfl_offline_section_address,
    nullptr,
};

std::string Demangle(const char* name) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return name;
  std::string out = demangled;
  free(demangled);
  return out;
}

}  // namespace

// One Dwfl per module file and bias: modules of several processes may overlap in address.
struct NativeSymbolizer::Module {
  Module(const std::string& path, uint64_t load_bias) {
    // The path comes from the trace: only a regular file is opened (never a FIFO or a
    // device that would block or never end).
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    dwfl = dwfl_begin(&kOfflineCallbacks);
    if (dwfl == nullptr) return;
    dwfl_report_begin(dwfl);
    // ET_DYN: placed at the load bias plus its own p_vaddr, as the loader placed it.
    module = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), -1, load_bias,
                             /*add_p_vaddr=*/true);
    dwfl_report_end(dwfl, nullptr, nullptr);
  }
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;
};

NativeSymbolizer::NativeSymbolizer() = default;
NativeSymbolizer::~NativeSymbolizer() = default;

bool NativeSymbolizer::Symbolize(const std::string& path, uint64_t load_bias, uint64_t address,
                                 NativeSymbol* out) {
  *out = NativeSymbol{};
  if (path.empty() || address == 0) return false;
  std::unique_ptr<Module>& m = modules_[{path, load_bias}];
  if (m == nullptr) m = std::make_unique<Module>(path, load_bias);
  if (m->module == nullptr) return false;
  const Dwarf_Addr at = address - 1;  // inside the call instruction, not after it
  if (const char* name = dwfl_module_addrname(m->module, at)) out->function = Demangle(name);
  if (Dwfl_Line* line = dwfl_module_getsrc(m->module, at)) {
    int number = 0;
    if (const char* file = dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr)) {
      out->file = file;
      // A name relative to the compilation's directory (DWARF keeps what the compiler was
      // given) is made absolute with the unit's DW_AT_comp_dir.
      Dwarf_Attribute attribute;
      Dwarf_Die* unit = out->file.empty() || out->file[0] == '/' ? nullptr : dwfl_linecu(line);
      if (unit != nullptr) {
        const char* dir = dwarf_formstring(dwarf_attr(unit, DW_AT_comp_dir, &attribute));
        if (dir != nullptr && dir[0] != '\0') out->file = std::string(dir) + "/" + out->file;
      }
      out->line = number > 0 ? static_cast<uint32_t>(number) : 0;
    }
  }
  return !out->function.empty() || !out->file.empty();
}

std::string NativeSymbolizerLibrary() {
  const char* version = dwfl_version(nullptr);
  return std::string("libdw ") + (version != nullptr ? version : "");
}

}  // namespace cumemtrace::internal
