#include "tracer/recording/code_names.h"

namespace cumemtrace::tracer {

std::atomic<CodeEntry*> g_code_chunks[kMaxCodeChunks];
std::atomic<uint32_t> g_code_count{0};

CodeEntry* NextCodeEntry(uint32_t* key) {
  const uint32_t index = g_code_count.load(std::memory_order_relaxed);
  if (index >= kCodeChunkEntries * kMaxCodeChunks) return nullptr;
  std::atomic<CodeEntry*>& chunk = g_code_chunks[index / kCodeChunkEntries];
  if (chunk.load(std::memory_order_relaxed) == nullptr) {
    chunk.store(new CodeEntry[kCodeChunkEntries](), std::memory_order_release);
  }
  CodeEntry& entry = chunk.load(std::memory_order_relaxed)[index % kCodeChunkEntries];
  entry = CodeEntry{};
  *key = index + 1;
  return &entry;
}

bool PythonCodeNames(uint64_t key, std::string* function, std::string* file) {
  if (key == 0 || key > g_code_count.load(std::memory_order_acquire)) return false;
  const CodeEntry& entry = CodeEntryAt(static_cast<uint32_t>(key - 1));
  function->assign(entry.function != nullptr ? entry.function : "?");
  file->assign(entry.file != nullptr ? entry.file : "?");
  return true;
}

}  // namespace cumemtrace::tracer
