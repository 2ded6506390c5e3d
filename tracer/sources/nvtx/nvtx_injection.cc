// NVTX injection: NVTX v3 is header-only, so every library that uses it has its own
// instance, and each one calls InitializeInjectionNvtx2 with its own function tables.
// We patch every table we are given.
#include "tracer/sources/nvtx/nvtx_injection.h"

#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstring>
#include <new>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "tracer/recording/clock.h"
#include "tracer/recording/nvtx_domain.h"
#include "tracer/recording/recorder.h"

namespace cumemtrace::tracer {
namespace {

std::atomic<uint64_t> g_next_range_id{1};
thread_local int g_push_depth = 0;

// wchar_t is UTF-32 on Linux; NVTX's W variants are rare, so a plain encoder suffices.
std::string Utf8FromWide(const wchar_t* text) {
  std::string out;
  if (text == nullptr) return out;
  for (; *text != 0; ++text) {
    const uint32_t c = static_cast<uint32_t>(*text);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::string MessageOf(const nvtxEventAttributes_t* attributes) {
  if (attributes == nullptr) return {};
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return attributes->message.ascii != nullptr ? attributes->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return Utf8FromWide(attributes->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      const auto* registered =
          reinterpret_cast<const NvtxRegisteredString*>(attributes->message.registered);
      return registered != nullptr ? registered->value : "";
    }
    default:
      return {};
  }
}

void Emit(v1::NvtxOperation operation, const NvtxDomain* domain, std::string message,
          const nvtxEventAttributes_t* attributes, uint64_t range_id) {
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording()) return;
  HostRecord record;
  record.type = HostRecord::Type::kNvtx;
  record.nvtx_operation = static_cast<uint8_t>(operation);
  record.timestamp_ns = MonotonicNs();
  record.thread_id = CurrentThreadId();
  record.domain = domain;
  record.range_id = range_id;
  record.text = std::move(message);
  if (attributes != nullptr) {
    record.category = attributes->category;
    if (attributes->colorType == NVTX_COLOR_ARGB) record.color = attributes->color;
  }
  recorder.Record(std::move(record));
}

const NvtxDomain* AsDomain(nvtxDomainHandle_t handle) {
  return reinterpret_cast<const NvtxDomain*>(handle);
}

// --- Core (default domain) ---
void MarkEx(const nvtxEventAttributes_t* a) {
  Emit(v1::NVTX_OPERATION_MARK, nullptr, MessageOf(a), a, 0);
}
void MarkA(const char* m) { Emit(v1::NVTX_OPERATION_MARK, nullptr, m ? m : "", nullptr, 0); }
void MarkW(const wchar_t* m) { Emit(v1::NVTX_OPERATION_MARK, nullptr, Utf8FromWide(m), nullptr, 0); }
nvtxRangeId_t RangeStartEx(const nvtxEventAttributes_t* a) {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  Emit(v1::NVTX_OPERATION_START, nullptr, MessageOf(a), a, id);
  return id;
}
nvtxRangeId_t RangeStartA(const char* m) {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  Emit(v1::NVTX_OPERATION_START, nullptr, m ? m : "", nullptr, id);
  return id;
}
nvtxRangeId_t RangeStartW(const wchar_t* m) {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  Emit(v1::NVTX_OPERATION_START, nullptr, Utf8FromWide(m), nullptr, id);
  return id;
}
void RangeEnd(nvtxRangeId_t id) { Emit(v1::NVTX_OPERATION_END, nullptr, {}, nullptr, id); }
int RangePushEx(const nvtxEventAttributes_t* a) {
  Emit(v1::NVTX_OPERATION_PUSH, nullptr, MessageOf(a), a, 0);
  return g_push_depth++;
}
int RangePushA(const char* m) {
  Emit(v1::NVTX_OPERATION_PUSH, nullptr, m ? m : "", nullptr, 0);
  return g_push_depth++;
}
int RangePushW(const wchar_t* m) {
  Emit(v1::NVTX_OPERATION_PUSH, nullptr, Utf8FromWide(m), nullptr, 0);
  return g_push_depth++;
}
int RangePop() {
  if (g_push_depth == 0) return -1;  // NVTX's answer to a pop without a push
  Emit(v1::NVTX_OPERATION_POP, nullptr, {}, nullptr, 0);
  return --g_push_depth;
}
void NameOsThreadA(uint32_t tid, const char* name) {
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording() || name == nullptr) return;
  HostRecord record;
  record.type = HostRecord::Type::kThreadName;
  record.timestamp_ns = MonotonicNs();
  record.thread_id = tid;
  record.text = name;
  recorder.Record(std::move(record));
}
void NameOsThreadW(uint32_t tid, const wchar_t* name) {
  NameOsThreadA(tid, Utf8FromWide(name).c_str());
}

// --- Core2 (named domains) ---
std::mutex g_domains_mutex;
std::unordered_map<std::string, NvtxDomain*>* g_domains = nullptr;

nvtxDomainHandle_t DomainCreateA(const char* name) {
  std::lock_guard<std::mutex> lock(g_domains_mutex);
  if (g_domains == nullptr) g_domains = new std::unordered_map<std::string, NvtxDomain*>();
  const std::string key = name != nullptr ? name : "";
  NvtxDomain*& domain = (*g_domains)[key];
  if (domain == nullptr) {
    domain = new NvtxDomain{key};
    AddKnownNvtxDomain(domain);
  }
  return reinterpret_cast<nvtxDomainHandle_t>(domain);
}
nvtxDomainHandle_t DomainCreateW(const wchar_t* name) {
  return DomainCreateA(Utf8FromWide(name).c_str());
}
void DomainDestroy(nvtxDomainHandle_t) {}  // handles stay valid: records may still use them
nvtxStringHandle_t DomainRegisterStringA(nvtxDomainHandle_t, const char* value) {
  return reinterpret_cast<nvtxStringHandle_t>(new NvtxRegisteredString{value ? value : ""});
}
nvtxStringHandle_t DomainRegisterStringW(nvtxDomainHandle_t, const wchar_t* value) {
  return reinterpret_cast<nvtxStringHandle_t>(new NvtxRegisteredString{Utf8FromWide(value)});
}
void DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Emit(v1::NVTX_OPERATION_MARK, AsDomain(d), MessageOf(a), a, 0);
}
nvtxRangeId_t DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  Emit(v1::NVTX_OPERATION_START, AsDomain(d), MessageOf(a), a, id);
  return id;
}
void DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  Emit(v1::NVTX_OPERATION_END, AsDomain(d), {}, nullptr, id);
}
// Push depth per thread is shared across domains: NVTX only asks for a level back.
int DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Emit(v1::NVTX_OPERATION_PUSH, AsDomain(d), MessageOf(a), a, 0);
  return g_push_depth++;
}
int DomainRangePop(nvtxDomainHandle_t d) {
  if (g_push_depth == 0) return -1;
  Emit(v1::NVTX_OPERATION_POP, AsDomain(d), {}, nullptr, 0);
  return --g_push_depth;
}

template <typename F>
void Patch(NvtxFunctionTable table, unsigned int size, unsigned int id, F function) {
  if (table != nullptr && id < size && table[id] != nullptr) {
    *table[id] = reinterpret_cast<NvtxFunctionPointer>(function);
  }
}

}  // namespace

// Domain registration's mutex is held across fork, so a child never inherits it held.
void LockNvtxBeforeFork() { g_domains_mutex.lock(); }
void UnlockNvtxInParentAfterFork() { g_domains_mutex.unlock(); }
void ResetNvtxInChildAfterFork() {
  new (&g_domains_mutex) std::mutex();  // held by the forking thread, the child's only one
}

static_assert(std::is_same_v<NvtxExportTableGetter, NvtxGetExportTableFunc_t>,
              "nvtx_injection.h's NvtxExportTableGetter is not NVTX's type");

int PatchNvtxTables(NvtxExportTableGetter get_export_table) {
  if (get_export_table == nullptr) return 0;
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      callbacks->GetModuleFunctionTable == nullptr) {
    return 0;
  }
  NvtxFunctionTable core = nullptr;
  unsigned int core_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) {
    Patch(core, core_size, NVTX_CBID_CORE_MarkEx, MarkEx);
    Patch(core, core_size, NVTX_CBID_CORE_MarkA, MarkA);
    Patch(core, core_size, NVTX_CBID_CORE_MarkW, MarkW);
    Patch(core, core_size, NVTX_CBID_CORE_RangeStartEx, RangeStartEx);
    Patch(core, core_size, NVTX_CBID_CORE_RangeStartA, RangeStartA);
    Patch(core, core_size, NVTX_CBID_CORE_RangeStartW, RangeStartW);
    Patch(core, core_size, NVTX_CBID_CORE_RangeEnd, RangeEnd);
    Patch(core, core_size, NVTX_CBID_CORE_RangePushEx, RangePushEx);
    Patch(core, core_size, NVTX_CBID_CORE_RangePushA, RangePushA);
    Patch(core, core_size, NVTX_CBID_CORE_RangePushW, RangePushW);
    Patch(core, core_size, NVTX_CBID_CORE_RangePop, RangePop);
    Patch(core, core_size, NVTX_CBID_CORE_NameOsThreadA, NameOsThreadA);
    Patch(core, core_size, NVTX_CBID_CORE_NameOsThreadW, NameOsThreadW);
  }
  NvtxFunctionTable core2 = nullptr;
  unsigned int core2_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, DomainRangePop);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, DomainRegisterStringA);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringW, DomainRegisterStringW);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, DomainCreateA);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainCreateW, DomainCreateW);
    Patch(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, DomainDestroy);
  }
  return 1;
}

}  // namespace cumemtrace::tracer

namespace cumemtrace::tracer {

// Ranges opened by cumemtrace's own Python start-up hooks (`run --phase`; exported from
// injection.cc): recorded exactly as NVTX push/pop on the default domain, so a phase labeled
// from outside the program looks the same as one the program labels itself.
int PushPhaseRange(const char* name) { return RangePushA(name); }
int PopPhaseRange() { return RangePop(); }

}  // namespace cumemtrace::tracer
