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
  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

NativeSymbolizer::NativeSymbolizer() = default;
NativeSymbolizer::~NativeSymbolizer() = default;

NativeSymbolizer::Module* NativeSymbolizer::ModuleFor(const std::string& path,
                                                      uint64_t load_bias) {
  auto [it, inserted] = modules_.try_emplace({path, load_bias});
  if (!inserted) return it->second.get();
  auto module = std::make_unique<Module>();
  // The path comes from the trace: only a regular file is opened (never a FIFO or a device
  // that would block or never end).
  struct stat st {};
  const bool regular = stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (regular) module->dwfl = dwfl_begin(&kOfflineCallbacks);
  if (module->dwfl != nullptr) {
    dwfl_report_begin(module->dwfl);
    // ET_DYN: placed at the load bias plus its own p_vaddr, as the loader placed it.
    module->module = dwfl_report_elf(module->dwfl, path.c_str(), path.c_str(), -1, load_bias,
                                     /*add_p_vaddr=*/true);
    dwfl_report_end(module->dwfl, nullptr, nullptr);
  }
  it->second = std::move(module);
  return it->second.get();
}

bool NativeSymbolizer::Symbolize(const std::string& path, uint64_t load_bias, uint64_t address,
                                 NativeSymbol* out) {
  *out = NativeSymbol{};
  if (path.empty() || address == 0) return false;
  Module* m = ModuleFor(path, load_bias);
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

}  // namespace cumemtrace::internal
