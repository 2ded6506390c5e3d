// The names of the Python code objects that captured stacks refer to, by code key (from 1):
// the Python source (sources/python/python_frames.cc) adds an entry when it first meets a
// code object, under its own table lock, and the sender names stacks' frames with them
// without a lock (an entry's function and file never change once it is counted). Here, below
// both, so that the sender never reaches into a source.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace cumemtrace::tracer {

struct CodeEntry {
  const char* function;
  const char* file;
  // What identifies the code object beyond its address: one read without the GIL is not
  // kept alive, and its address may come back as another code object.
  uintptr_t qualname_object;
  uintptr_t filename_object;
  bool pinned;  // referenced by us (named with the GIL): its address is never reused
};

constexpr uint32_t kCodeChunkEntries = 4096;
constexpr uint32_t kMaxCodeChunks = 1024;  // 4 M code objects; past that, frames have no name
extern std::atomic<CodeEntry*> g_code_chunks[kMaxCodeChunks];
extern std::atomic<uint32_t> g_code_count;

// The entry of key index + 1, once counted.
inline CodeEntry& CodeEntryAt(uint32_t index) {
  return g_code_chunks[index / kCodeChunkEntries].load(
      std::memory_order_acquire)[index % kCodeChunkEntries];
}

// The writer's (one at a time): the next entry, cleared, with the key it will have in *key;
// nullptr when the table is full. Not counted, so not read, until CountCodeEntry.
CodeEntry* NextCodeEntry(uint32_t* key);
inline void CountCodeEntry(uint32_t key) { g_code_count.store(key, std::memory_order_release); }

// The sender's side: the qualified name and file of a code key CapturePythonFrames gave.
// False for a key it never gave.
bool PythonCodeNames(uint64_t key, std::string* function, std::string* file);

}  // namespace cumemtrace::tracer
