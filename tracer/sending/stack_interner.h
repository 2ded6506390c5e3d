// The sender's side of `run --stacks`: turns captured stacks (the ring's words) into the
// wire's stack table (trace.proto StackFrame, Stack, NativeModule), each frame, stack and
// module defined once per connection, before the first event that refers to it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tracer/sending/event_encoder.h"

namespace cumemtrace::tracer {

// Where a native address lies: the module's file and load bias, and whether it is the
// tracer's own. Looked up with dladdr1 on the sender thread (never in a hook).
struct ModuleLookup {
  virtual ~ModuleLookup() = default;
  // False when no module holds `pc`.
  virtual bool Find(uint64_t pc, std::string* path, uint64_t* load_bias, bool* own) const;
};

class StackInterner {
 public:
  StackInterner(EventEncoder* encoder, const ModuleLookup* modules)
      : encoder_(encoder), modules_(modules) {}

  // Id of the stack in `words` (shared_ring.h StackHeader and its words), defining what is
  // new; 0 when the words hold no frame. Leading frames inside the tracer are dropped.
  uint32_t Intern(const uint64_t* words, uint32_t count);

 private:
  // `line_word` as CapturePythonFrames writes it: the line and whether it is an entry frame.
  uint32_t PythonFrame(uint64_t code_key, uint64_t line_word);
  uint32_t NativeFrame(uint64_t pc, bool* own);
  void ForgetIfBatchesWereLost();

  EventEncoder* encoder_;
  const ModuleLookup* modules_;
  uint64_t discarded_seen_ = 0;
  uint32_t next_frame_id_ = 1;
  uint32_t next_stack_id_ = 1;
  uint32_t next_module_id_ = 1;
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> python_frames_;  // (code key, line word)
  std::unordered_map<uint64_t, uint32_t> native_frames_;  // pc -> frame id (0: the tracer's)
  std::unordered_map<std::string, uint32_t> module_ids_;   // path -> module id
  std::map<std::vector<uint32_t>, uint32_t> stacks_;
};

}  // namespace cumemtrace::tracer
