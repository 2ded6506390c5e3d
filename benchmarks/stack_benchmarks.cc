// What `run --stacks` adds to an allocation hook, in nanoseconds (docs/benchmarks.md):
//   Stack/Python/<depth>  - CaptureStack(python) with <depth> Python frames above the hook, as
//                           a tensor allocation in a module's forward has (an interpreter
//                           embedded here; the benchmarks run from inside a Python call that
//                           holds the GIL)
//   Stack/PythonWithoutGil/<depth> - the same from a thread that let go of the GIL, as PyTorch's
//                           operators do (the frames are read directly)
//   Stack/Native          - CaptureStack(native): _Unwind_Backtrace of this thread
//   Hook/MemoryWithPythonStack/<depth> - an allocation record with its Python stack, pushed
//                           into the shared ring (compare with tracer_benchmarks' Hook/Memory)
//   Encode/Stack/<depth>  - on the sender thread: interning a stack already seen
#include <benchmark/benchmark.h>

#include <Python.h>

#include <unistd.h>

#include <utility>
#include <vector>

#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/record_queue.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/stack_interner.h"
#include "tracer/sources/stacks/stack_capture.h"

namespace cumemtrace::tracer {
namespace {

void BM_Stack_Python(benchmark::State& state) {
  for (auto _ : state) {
    const StackWords words = CaptureStack(kStacksPython);
    benchmark::DoNotOptimize(words.words);
  }
}

// As inside a PyTorch operator: the thread has let go of the GIL (frames read directly).
void BM_Stack_PythonWithoutGil(benchmark::State& state) {
  PyThreadState* thread = PyEval_SaveThread();
  for (auto _ : state) {
    const StackWords words = CaptureStack(kStacksPython);
    benchmark::DoNotOptimize(words.words);
  }
  PyEval_RestoreThread(thread);
}

void BM_Stack_Native(benchmark::State& state) {
  for (auto _ : state) {
    const StackWords words = CaptureStack(kStacksNative);
    benchmark::DoNotOptimize(words.words);
  }
}

void BM_Hook_MemoryWithPythonStack(benchmark::State& state) {
  static RecordQueue queue(1 << 20);
  if (!queue.created()) {
    const int fd = queue.Create();
    if (fd >= 0) close(fd);
  }
  std::vector<HostRecord> taken;
  std::vector<uint64_t> ends;
  uint64_t n = 0;
  for (auto _ : state) {
    HostRecord record;
    record.type = HostRecord::Type::kMemory;
    record.timestamp_ns = MonotonicNs();
    record.thread_id = CurrentThreadId();
    record.correlation_id = static_cast<uint32_t>(++n);
    record.address = 0x7f0000000000 + ((n & 1023) << 22);
    record.bytes = 4 << 20;
    const StackWords words = CaptureStack(kStacksPython);
    record.stack = words.words;
    record.stack_words = words.count;
    if (!queue.Push(record)) {
      state.PauseTiming();
      queue.TakeAll(&taken, &ends);
      if (!ends.empty()) queue.Free(ends.back());
      state.ResumeTiming();
    }
  }
}

void BM_Encode_Stack(benchmark::State& state) {
  const StackWords words = CaptureStack(kStacksPython);
  const std::vector<uint64_t> copy(words.words, words.words + words.count);
  EventEncoder encoder;
  ModuleLookup modules;
  StackInterner interner(&encoder, &modules);
  for (auto _ : state) {
    benchmark::DoNotOptimize(interner.Intern(copy.data(), static_cast<uint32_t>(copy.size())));
  }
}

// The timed loop runs inside Python, `depth` frames deep: the benchmark calls the Python
// function level(depth), which recurses and calls back stackbench.loop(), which runs the body.
benchmark::State* g_state = nullptr;
void (*g_body)(benchmark::State&) = nullptr;
PyObject* g_level = nullptr;

PyObject* Loop(PyObject*, PyObject*) {
  g_body(*g_state);
  Py_RETURN_NONE;
}

void InPython(benchmark::State& state, void (*body)(benchmark::State&)) {
  g_state = &state;
  g_body = body;
  PyObject* result = PyObject_CallFunction(g_level, "l", static_cast<long>(state.range(0)));
  if (result == nullptr) {
    PyErr_Print();
    state.SkipWithError("the Python call failed");
    return;
  }
  Py_DECREF(result);
}

PyMethodDef kMethods[] = {{"loop", Loop, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "stackbench", nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};
PyObject* InitModule() { return PyModule_Create(&kModule); }

}  // namespace
}  // namespace cumemtrace::tracer

namespace cumemtrace::tracer {
namespace {
void BM_Python(benchmark::State& state) { InPython(state, BM_Stack_Python); }
void BM_PythonWithoutGil(benchmark::State& state) { InPython(state, BM_Stack_PythonWithoutGil); }
void BM_Hook(benchmark::State& state) { InPython(state, BM_Hook_MemoryWithPythonStack); }
void BM_Encode(benchmark::State& state) { InPython(state, BM_Encode_Stack); }
}  // namespace
}  // namespace cumemtrace::tracer

int main(int argc, char** argv) {
  using namespace cumemtrace::tracer;
  benchmark::Initialize(&argc, argv);
  PyImport_AppendInittab("stackbench", &InitModule);
  Py_InitializeEx(0);
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* defined = PyRun_String(
      "import stackbench\n"
      "def level(n):\n"
      "    if n <= 1:\n"
      "        stackbench.loop()\n"
      "    else:\n"
      "        level(n - 1)\n",
      Py_file_input, globals, globals);
  if (defined == nullptr) {
    PyErr_Print();
    return 1;
  }
  Py_DECREF(defined);
  g_level = PyDict_GetItemString(globals, "level");
  const std::pair<const char*, void (*)(benchmark::State&)> in_python[] = {
      {"Stack/Python", BM_Python},
      {"Stack/PythonWithoutGil", BM_PythonWithoutGil},
      {"Hook/MemoryWithPythonStack", BM_Hook},
      {"Encode/Stack", BM_Encode}};
  for (const auto& [name, function] : in_python) {
    auto* b = benchmark::RegisterBenchmark(name, function);
    for (int depth : {1, 16, 48}) b->Arg(depth);
  }
  benchmark::RegisterBenchmark("Stack/Native", BM_Stack_Native);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
