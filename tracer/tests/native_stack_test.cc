// Native stacks end to end without a GPU: the tracer's capture (_Unwind_Backtrace) and
// interning (modules by dladdr1) in this process, then the collector's libdw symbolizer on
// the module files, which must name a known function of this test and the line that called.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "collector/engine/native_symbolizer.h"
#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/stack_interner.h"
#include "tracer/sources/stacks/stack_capture.h"

namespace cumemtrace::tracer {
namespace {

int g_capture_line = 0;

// The tracer is linked into this test: its own-frame filter would drop every frame here.
struct AllModulesAreTheProgram : ModuleLookup {
  bool Find(uint64_t pc, std::string* path, uint64_t* load_bias, bool* own) const override {
    const bool found = ModuleLookup::Find(pc, path, load_bias, own);
    *own = false;
    return found;
  }
};

__attribute__((noinline)) StackWords KnownAllocatingFunction() {
  g_capture_line = __LINE__ + 1;
  StackWords words = CaptureStack(kStacksNative);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return words;
}

__attribute__((noinline)) StackWords ItsCaller() {
  StackWords words = KnownAllocatingFunction();
  asm volatile("" ::: "memory");
  return words;
}

TEST(NativeStack, CapturedInternedAndSymbolizedToTheCallingLine) {
  const StackWords captured = ItsCaller();
  ASSERT_NE(captured.words, nullptr);
  const std::vector<uint64_t> words(captured.words, captured.words + captured.count);
  v1::ring::StackHeader header{};
  memcpy(&header, &words[0], sizeof(header));
  EXPECT_EQ(header.python_frames, 0u);  // no Python in this program: none, and no crash
  EXPECT_GE(header.native_frames, 3u);

  EventEncoder encoder;
  AllModulesAreTheProgram modules;
  StackInterner interner(&encoder, &modules);
  const uint32_t id = interner.Intern(words.data(), static_cast<uint32_t>(words.size()));
  ASSERT_NE(id, 0u);
  std::string frame;
  encoder.FlushBatch(&frame);
  size_t at = 0;
  while (static_cast<unsigned char>(frame[at]) & 0x80) ++at;
  v1::StreamMessage message;
  ASSERT_TRUE(message.ParseFromString(frame.substr(at + 1)));
  std::map<uint32_t, v1::NativeModule> module_by_id;
  std::map<uint32_t, v1::StackFrame> frame_by_id;
  std::vector<uint32_t> stack;
  for (const v1::Event& e : message.batch().events()) {
    if (e.has_native_module()) module_by_id[e.native_module().id()] = e.native_module();
    if (e.has_stack_frame()) frame_by_id[e.stack_frame().id()] = e.stack_frame();
    if (e.has_stack()) stack.assign(e.stack().frame_ids().begin(), e.stack().frame_ids().end());
  }
  ASSERT_FALSE(stack.empty());

  internal::NativeSymbolizer symbolizer;
  std::vector<internal::NativeSymbol> named;
  for (uint32_t f : stack) {
    const v1::StackFrame& sf = frame_by_id.at(f);
    EXPECT_EQ(sf.kind(), v1::STACK_FRAME_KIND_NATIVE);
    const v1::NativeModule& m = module_by_id.at(sf.module_id());
    internal::NativeSymbol symbol;
    symbolizer.Symbolize(m.path(), m.load_bias(), sf.pc(), &symbol);
    named.push_back(symbol);
  }
  // Innermost first: the capture itself, then this file's two functions in order.
  size_t known = named.size();
  for (size_t i = 0; i < named.size(); ++i) {
    if (named[i].function.find("KnownAllocatingFunction") != std::string::npos) {
      known = i;
      break;
    }
  }
  ASSERT_LT(known, named.size()) << "no frame named KnownAllocatingFunction";
  // C++ names come demangled, qualified and with their parameters, as LibTorch's must.
  EXPECT_EQ(named[known].function,
            "cumemtrace::tracer::(anonymous namespace)::KnownAllocatingFunction()");
  EXPECT_NE(named[known].file.find("native_stack_test.cc"), std::string::npos)
      << named[known].file;
  EXPECT_EQ(named[known].file[0], '/') << named[known].file;  // made absolute
  EXPECT_EQ(named[known].line, static_cast<uint32_t>(g_capture_line));
  ASSERT_LT(known + 1, named.size());
  EXPECT_NE(named[known + 1].function.find("ItsCaller"), std::string::npos)
      << named[known + 1].function;
}

TEST(NativeStack, AModuleThatIsNotThereIsNotNamed) {
  internal::NativeSymbolizer symbolizer;
  internal::NativeSymbol symbol;
  EXPECT_FALSE(symbolizer.Symbolize("/nonexistent/libgone.so", 0x7f0000000000, 0x7f0000001234,
                                    &symbol));
  EXPECT_TRUE(symbol.function.empty());
}

}  // namespace
}  // namespace cumemtrace::tracer
