// What the outputs show of a recorded stack (stacks.h ShownFrames), on fabricated stacks:
// the tracer's, CUPTI's and the allocator's frames left out, and the interpreter's native
// frames replaced by the Python frames they ran.
#include "collector/engine/stacks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {
namespace {

constexpr uint8_t kUnknown = v1::PYTHON_FRAME_ENTRY_UNKNOWN;
constexpr uint8_t kEntry = v1::PYTHON_FRAME_ENTRY_YES;
constexpr uint8_t kInlined = v1::PYTHON_FRAME_ENTRY_NO;

// A wire stack built innermost first: native frames, then Python frames.
struct Stack {
  std::vector<FrameFacts> frames;
  Stack& Native(const std::string& module, const std::string& function) {
    frames.push_back(FrameFacts{false, module, function, "", kUnknown});
    return *this;
  }
  Stack& Python(const std::string& function, uint8_t entry,
                const std::string& file = "/home/ada/train.py") {
    frames.push_back(FrameFacts{true, "", function, file, entry});
    return *this;
  }
  // The shown frames as "module!function" (native) or "py:function".
  std::vector<std::string> Shown() const {
    std::vector<std::string> out;
    for (size_t i : ShownFrames(frames)) {
      const FrameFacts& f = frames.at(i);
      out.push_back(f.python ? "py:" + f.function : BaseName(f.module) + "!" + f.function);
    }
    return out;
  }
};

using Frames = std::vector<std::string>;

const char* const kTracer = "/opt/cumemtrace/lib/cumemtrace/libcumemtrace-tracer.so";
const char* const kBridge =
    "/home/ada/.cache/cumemtrace/bridges/libcumemtrace-torch-bridge-2.5.1.so";
const char* const kCupti = "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13";
const char* const kCuda = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
const char* const kC10Cuda = "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
const char* const kTorchCpu = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";
const char* const kTorchPython = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_python.so";
const char* const kPython = "/usr/bin/python3.12";
const char* const kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";

TEST(ShownFrames, ADriverCallLosesTheTracersAndCuptisFramesWhereverTheyAre) {
  Stack s;
  s.Native(kTracer, "OnCallback")
      .Native(kCupti, "0x1")
      .Native(kCupti, "0x2")
      .Native(kCuda, "0x3")
      .Native(kTracer, "cuMemAlloc_v2")  // an interposed entry point
      .Native(kC10Cuda, "c10::cuda::CUDACachingAllocator::DeviceCachingAllocator::alloc_block")
      .Native(kTorchCpu, "at::detail::empty_generic");
  EXPECT_EQ(s.Shown(),
            (Frames{"libcuda.so.1!0x3",
                    "libc10_cuda.so!c10::cuda::CUDACachingAllocator::DeviceCachingAllocator::"
                    "alloc_block",
                    "libtorch_cpu.so!at::detail::empty_generic"}));
}

TEST(ShownFrames, ATensorsStackStartsAtTheAllocatorsCaller) {
  Stack s;
  s.Native(kTracer, "EmitTorchEvent")
      .Native(kBridge, "OnTrace")
      .Native(kBridge, "_M_invoke")
      .Native(kC10Cuda, "DeviceCachingAllocator::malloc")
      .Native(kC10Cuda, "NativeCachingAllocator::allocate")
      .Native(kTorchCpu, "at::detail::empty_generic")
      .Native(kC10Cuda, "c10::cuda::CUDAStream::query")  // a later c10_cuda frame is kept
      .Native(kTorchCpu, "at::native::add");
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::detail::empty_generic",
                               "libc10_cuda.so!c10::cuda::CUDAStream::query",
                               "libtorch_cpu.so!at::native::add"}));
}

TEST(ShownFrames, WithoutTheBridgeTheAllocatorsFramesStay) {
  // A driver call made by the allocator itself (a new segment): its frames are the caller.
  Stack s;
  s.Native(kCupti, "0x1")
      .Native(kC10Cuda, "DeviceCachingAllocator::alloc_block")
      .Native(kTorchCpu, "at::detail::empty_generic");
  EXPECT_EQ(s.Shown(), (Frames{"libc10_cuda.so!DeviceCachingAllocator::alloc_block",
                               "libtorch_cpu.so!at::detail::empty_generic"}));
}

TEST(ShownFrames, OnlyObserverFramesLeaveNothing) {
  Stack s;
  s.Native(kTracer, "a").Native(kCupti, "b").Native(kBridge, "c");
  EXPECT_TRUE(s.Shown().empty());
}

// Python 3.11 and later: one eval loop runs a function and those it calls from Python.
TEST(ShownFrames, EachEvalLoopIsReplacedByThePythonFramesItRanUpToItsEntryFrame) {
  Stack s;
  s.Native(kTracer, "EmitTorchEvent")
      .Native(kBridge, "OnTrace")
      .Native(kC10Cuda, "NativeCachingAllocator::allocate")
      .Native(kTorchCpu, "at::native::linear")
      .Native(kTorchPython, "torch::autograd::THPVariable_linear")
      .Native(kPython, "cfunction_call")
      .Native(kPython, "_PyObject_MakeTpCall")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kPython, "_PyFunction_Vectorcall")
      .Native(kTorchPython, "THPFunction_apply")
      .Native(kPython, "_PyEval_EvalFrameDefault.cold")  // GCC's split-off part
      .Native(kPython, "PyEval_EvalCode")
      .Native(kPython, "Py_RunMain")
      .Native(kPython, "main")
      .Native(kLibc, "__libc_start_main")
      .Python("Linear.forward", kInlined)
      .Python("Module._call_impl", kInlined)
      .Python("Block.forward", kEntry)  // called by THPFunction_apply
      .Python("train_step", kInlined)
      .Python("<module>", kEntry);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::native::linear",
                               "libtorch_python.so!torch::autograd::THPVariable_linear",
                               "py:Linear.forward", "py:Module._call_impl", "py:Block.forward",
                               "libtorch_python.so!THPFunction_apply", "py:train_step",
                               "py:<module>", "libc.so.6!__libc_start_main"}));
}

TEST(ShownFrames, TheTracersPythonHooksAreLeftOutAfterTheMerge) {
  // `run --phase` wraps a method: the wrapper runs in the caller's eval loop, and the method
  // it calls is entered from it (here through C). The wrapper's frame goes, the pairing stays.
  const char* hooks = "/opt/cumemtrace/share/cumemtrace/python/cumemtrace_phases.py";
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kTorchPython, "THPFunction_apply")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Python("settle_free", kEntry)
      .Python("wrapper", kInlined, hooks)
      .Python("<module>", kEntry);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::empty", "py:settle_free",
                               "libtorch_python.so!THPFunction_apply", "py:<module>"}));
}

TEST(ShownFrames, LibpythonAndThePythonExecutableAreTheInterpreter) {
  const char* libpython = "/opt/conda/lib/libpython3.11.so.1.0";
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(libpython, "_PyObject_Call")
      .Native(libpython, "_PyEval_EvalFrameDefault")
      .Native(libpython, "Py_BytesMain")
      .Native("/opt/conda/bin/python3.11", "main")
      .Native(kLibc, "__libc_start_main")
      .Python("f", kEntry);
  EXPECT_EQ(s.Shown(),
            (Frames{"libtorch_cpu.so!at::empty", "py:f", "libc.so.6!__libc_start_main"}));
}

TEST(ShownFrames, UnknownEntriesMergeOneEachWhenTheCountsAgree) {
  // Python 3.10 and earlier run one frame per eval loop; an older trace has no entries.
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kTorchPython, "THPFunction_apply")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kPython, "main")
      .Python("inner", kUnknown)
      .Python("outer", kUnknown);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::empty", "py:inner",
                               "libtorch_python.so!THPFunction_apply", "py:outer"}));
}

TEST(ShownFrames, UnknownEntriesAndOtherCountsKeepBothStacksAsRecorded) {
  Stack s;
  s.Native(kCupti, "0x1")
      .Native(kTorchCpu, "at::empty")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kPython, "main")
      .Python("inner", kUnknown)
      .Python("outer", kUnknown);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::empty", "python3.12!_PyEval_EvalFrameDefault",
                               "python3.12!main", "py:inner", "py:outer"}));
}

TEST(ShownFrames, PythonFramesBeyondTheCutNativeStackFollowIt) {
  // The native frames stop at their bound inside the first eval loop's caller.
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kTorchPython, "THPFunction_apply")
      .Python("inner", kInlined)
      .Python("middle", kEntry)
      .Python("outer", kEntry);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::empty", "py:inner", "py:middle",
                               "libtorch_python.so!THPFunction_apply", "py:outer"}));
}

TEST(ShownFrames, ANativeStackCutInsideTheInterpreterBeforeItsLoopStillMerges) {
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(kTorchPython, "THPVariable_add")
      .Native(kPython, "cfunction_call")
      .Native(kPython, "_PyObject_MakeTpCall")
      .Python("inner", kInlined)
      .Python("outer", kEntry);
  EXPECT_EQ(s.Shown(), (Frames{"libtorch_cpu.so!at::empty", "libtorch_python.so!THPVariable_add",
                               "py:inner", "py:outer"}));
}

TEST(ShownFrames, EvalLoopsBeyondTheCutPythonStackAreLeftOut) {
  Stack s;
  s.Native(kTorchCpu, "at::empty")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kTorchPython, "THPFunction_apply")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kPython, "_PyEval_EvalFrameDefault")
      .Native(kLibc, "__libc_start_main")
      .Python("inner", kInlined)
      .Python("outer", kEntry);
  EXPECT_EQ(s.Shown(),
            (Frames{"libtorch_cpu.so!at::empty", "py:inner", "py:outer",
                    "libtorch_python.so!THPFunction_apply", "libc.so.6!__libc_start_main"}));
}

TEST(ShownFrames, WithoutPythonFramesTheInterpreterStays) {
  // A thread with no Python frames (autograd's workers) or `--stacks=native`.
  Stack s;
  s.Native(kTorchCpu, "at::empty").Native(kPython, "_PyEval_EvalFrameDefault");
  EXPECT_EQ(s.Shown(),
            (Frames{"libtorch_cpu.so!at::empty", "python3.12!_PyEval_EvalFrameDefault"}));
}

}  // namespace
}  // namespace cumemtrace::internal
