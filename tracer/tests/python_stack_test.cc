// The Python capture (python_frames.h) against a real interpreter embedded in this test: the
// CPython API is found with dlsym as in a traced python3, and the frames of a known function
// come back with their file, line and qualified name, through the sender's interning too.
#include <gtest/gtest.h>

#include <Python.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/stack_interner.h"
#include "tracer/sources/python/python_frames.h"
#include "tracer/sources/stacks/stack_capture.h"

namespace cumemtrace::tracer {
namespace {

// What the last capture() call saw: (function, file, line), innermost first.
struct Seen {
  std::string function;
  std::string file;
  uint64_t line;
  uint32_t entry;  // v1::PythonFrameEntry
};
std::vector<Seen> g_seen;
std::vector<uint64_t> g_words;  // CaptureStack's words of the last call
uint32_t g_other_thread_frames = 1234;

PyObject* Capture(PyObject*, PyObject*) {
  uint64_t pairs[2 * 64];
  const uint32_t n = CapturePythonFrames(pairs, 64);
  g_seen.clear();
  for (uint32_t i = 0; i < n; ++i) {
    Seen s;
    EXPECT_TRUE(PythonCodeNames(pairs[2 * i], &s.function, &s.file));
    s.line = v1::ring::PythonFrameLine(pairs[2 * i + 1]);
    s.entry = v1::ring::PythonFrameEntry(pairs[2 * i + 1]);
    g_seen.push_back(s);
  }
  const StackWords words = CaptureStack(kStacksPython);
  g_words.assign(words.words, words.words + words.count);
  Py_RETURN_NONE;
}

// A thread of the process that never took the GIL (as autograd's workers are while they
// allocate): no Python stack, and no crash.
PyObject* CaptureOnAnotherThread(PyObject*, PyObject*) {
  std::thread([] {
    uint64_t pairs[2 * 64];
    g_other_thread_frames = CapturePythonFrames(pairs, 64);
  }).join();
  Py_RETURN_NONE;
}

// Reading a new code object's names must not clear an exception that is being raised.
PyObject* CaptureWithPendingError(PyObject*, PyObject*) {
  PyErr_SetString(PyExc_KeyError, "kept");
  uint64_t pairs[2 * 64];
  CapturePythonFrames(pairs, 64);
  return nullptr;  // the KeyError propagates
}

// The frames of one capture as a Python list [(function, file, line)], innermost first.
PyObject* FramesAsList(const uint64_t* pairs, uint32_t n) {
  PyObject* frames = PyList_New(0);
  for (uint32_t i = 0; i < n; ++i) {
    std::string function, file;
    PythonCodeNames(pairs[2 * i], &function, &file);
    const uint32_t line = v1::ring::PythonFrameLine(pairs[2 * i + 1]);
    PyObject* frame = Py_BuildValue("(ssK)", function.c_str(), file.c_str(),
                                    static_cast<unsigned long long>(line));
    PyList_Append(frames, frame);
    Py_DECREF(frame);
  }
  return frames;
}

// As PyTorch's operators do: let go of the GIL, then allocate.
PyObject* FramesWithoutGil(PyObject*, PyObject*) {
  uint64_t pairs[2 * 64];
  PyThreadState* state = PyEval_SaveThread();
  const uint32_t n = CapturePythonFrames(pairs, 64);
  PyEval_RestoreThread(state);
  return FramesAsList(pairs, n);
}

PyObject* FramesWithGil(PyObject*, PyObject*) {
  uint64_t pairs[2 * 64];
  return FramesAsList(pairs, CapturePythonFrames(pairs, 64));
}

PyObject* ResetLayout(PyObject*, PyObject*) {
  ResetPythonFrameLayoutForTesting();
  Py_RETURN_NONE;
}

PyObject* RefuseLayout(PyObject*, PyObject*) {
  ResetPythonFrameLayoutForTesting(/*usable=*/false);
  Py_RETURN_NONE;
}

// The tracer's notice, once: its text, then None.
PyObject* TakeNotice(PyObject*, PyObject*) {
  std::string text;
  if (!TakePythonFramesNotice(&text)) Py_RETURN_NONE;
  return PyUnicode_FromString(text.c_str());
}

PyMethodDef kMethods[] = {
    {"frames_with_gil", FramesWithGil, METH_NOARGS, nullptr},
    {"reset_layout", ResetLayout, METH_NOARGS, nullptr},
    {"refuse_layout", RefuseLayout, METH_NOARGS, nullptr},
    {"take_notice", TakeNotice, METH_NOARGS, nullptr},
    {"frames_without_gil", FramesWithoutGil, METH_NOARGS, nullptr},
    {"capture", Capture, METH_NOARGS, nullptr},
    {"capture_on_another_thread", CaptureOnAnotherThread, METH_NOARGS, nullptr},
    {"capture_with_pending_error", CaptureWithPendingError, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};
PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "stackprobe", nullptr, -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};
PyObject* InitModule() { return PyModule_Create(&kModule); }

class PythonStack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PyImport_AppendInittab("stackprobe", &InitModule);
    Py_InitializeEx(0);
  }
  // The interpreter stays up: Py_Finalize and re-initialization are not what is tested.

  static void Run(const char* source) {
    PyObject* globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject* code = Py_CompileString(source, "probe_program.py", Py_file_input);
    ASSERT_NE(code, nullptr);
    PyObject* result = PyEval_EvalCode(code, globals, globals);
    if (result == nullptr) PyErr_Print();
    ASSERT_NE(result, nullptr);
    Py_XDECREF(result);
    Py_DECREF(code);
    Py_DECREF(globals);
  }
};

TEST_F(PythonStack, AKnownFunctionComesBackWithItsFileLineAndQualifiedName) {
  Run("import stackprobe\n"            // 1
      "class Model:\n"                 // 2
      "    def forward(self):\n"       // 3
      "        stackprobe.capture()\n"  // 4
      "def main():\n"                  // 5
      "    Model().forward()\n"        // 6
      "main()\n");                     // 7
  ASSERT_EQ(g_seen.size(), 3u);
  EXPECT_EQ(g_seen[0].file, "probe_program.py");
  EXPECT_EQ(g_seen[0].line, 4u);
  EXPECT_EQ(g_seen[0].function, PY_VERSION_HEX >= 0x030B0000 ? "Model.forward" : "forward");
  EXPECT_EQ(g_seen[1].function, "main");
  EXPECT_EQ(g_seen[1].line, 6u);
  EXPECT_EQ(g_seen[2].function, "<module>");
  EXPECT_EQ(g_seen[2].line, 7u);
  // The same function from another line of the caller: the line follows the call site.
  Run("import stackprobe\n"
      "def f():\n"
      "    stackprobe.capture()\n"
      "f()\n"
      "x = 1\n"
      "f()\n");
  ASSERT_EQ(g_seen.size(), 2u);
  EXPECT_EQ(g_seen[1].line, 6u);
}

// Which frames entered the interpreter's eval loop: the collector puts each run of Python
// frames up to its entry frame in place of that loop's native frame (stacks.h ShownFrames).
TEST_F(PythonStack, EachFrameSaysWhetherItEnteredTheEvalLoop) {
  const char* program =
      "import stackprobe\n"                      // 1
      "def inner():\n"                           // 2
      "    stackprobe.capture()\n"               // 3
      "def via_c():\n"                           // 4
      "    list(map(lambda _: inner(), [0]))\n"  // 5: map calls the lambda from C
      "def main():\n"                            // 6
      "    via_c()\n"                            // 7
      "main()\n";                                // 8
  const uint32_t yes = v1::PYTHON_FRAME_ENTRY_YES;
  // Before 3.11 each frame had its own eval loop; from 3.11 a call from Python stays in the
  // caller's.
  const uint32_t inlined =
      PY_VERSION_HEX >= 0x030B0000 ? static_cast<uint32_t>(v1::PYTHON_FRAME_ENTRY_NO) : yes;
  // The first walks check the layout against the API's, later ones are trusted: both.
  for (int round = 0; round < 12; ++round) {
    Run(program);
    ASSERT_EQ(g_seen.size(), 5u);
    EXPECT_EQ(g_seen[0].function, "inner");
    EXPECT_EQ(g_seen[0].line, 3u);
    EXPECT_EQ(g_seen[0].entry, inlined) << round;
    EXPECT_EQ(g_seen[1].entry, yes) << round;  // the lambda, called by map
    EXPECT_EQ(g_seen[1].line, 5u);
    EXPECT_EQ(g_seen[2].entry, inlined) << round;  // via_c
    EXPECT_EQ(g_seen[3].entry, inlined) << round;  // main
    EXPECT_EQ(g_seen[4].entry, yes) << round;      // the module, run by PyEval_EvalCode
    EXPECT_EQ(g_seen[4].line, 8u);
  }
}

TEST_F(PythonStack, TheSenderInternsTheFramesOnceAndTheStackOnce) {
  Run("import stackprobe\n"
      "def inner():\n"
      "    stackprobe.capture()\n"  // 3
      "inner()\n");
  const std::vector<uint64_t> first = g_words;
  ASSERT_FALSE(first.empty());
  EventEncoder encoder;
  ModuleLookup modules;
  StackInterner interner(&encoder, &modules);
  const uint32_t id = interner.Intern(first.data(), static_cast<uint32_t>(first.size()));
  EXPECT_NE(id, 0u);
  EXPECT_EQ(interner.Intern(first.data(), static_cast<uint32_t>(first.size())), id);
  std::string frames;
  encoder.FlushBatch(&frames);
  v1::StreamMessage message;
  // Skip the varint length prefix of the frame.
  size_t at = 0;
  while (static_cast<unsigned char>(frames[at]) & 0x80) ++at;
  ASSERT_TRUE(message.ParseFromString(frames.substr(at + 1)));
  std::map<uint32_t, std::string> strings;
  std::vector<v1::StackFrame> defined;
  int stacks = 0;
  for (const v1::Event& e : message.batch().events()) {
    if (e.has_interned_string()) strings[e.interned_string().id()] = e.interned_string().value();
    if (e.has_stack_frame()) defined.push_back(e.stack_frame());
    if (e.has_stack()) {
      ++stacks;
      EXPECT_EQ(e.stack().id(), id);
      ASSERT_EQ(e.stack().frame_ids_size(), 2);
      EXPECT_EQ(e.stack().frame_ids(0), defined.at(0).id());  // innermost first
    }
  }
  EXPECT_EQ(stacks, 1);
  ASSERT_EQ(defined.size(), 2u);
  EXPECT_EQ(defined[0].kind(), v1::STACK_FRAME_KIND_PYTHON);
  EXPECT_EQ(strings[defined[0].function_name_id()], "inner");
  EXPECT_EQ(strings[defined[0].file_name_id()], "probe_program.py");
  EXPECT_EQ(defined[0].line(), 3u);
  // The ring's entry bits become the frame's python_entry; the line is the line alone.
  EXPECT_EQ(defined[0].python_entry(),
            PY_VERSION_HEX >= 0x030B0000 ? v1::PYTHON_FRAME_ENTRY_NO : v1::PYTHON_FRAME_ENTRY_YES);
  EXPECT_EQ(defined[1].python_entry(), v1::PYTHON_FRAME_ENTRY_YES);  // the module
  EXPECT_EQ(defined[1].line(), 4u);
}

TEST_F(PythonStack, AThreadWithoutTheGilHasNoPythonStack) {
  Run("import stackprobe\n"
      "stackprobe.capture_on_another_thread()\n");
  EXPECT_EQ(g_other_thread_frames, 0u);
  // And the main thread, once it let go of the GIL, has none either.
  PyThreadState* state = PyEval_SaveThread();
  uint64_t pairs[2 * 64];
  EXPECT_EQ(CapturePythonFrames(pairs, 64), 0u);
  PyEval_RestoreThread(state);
}

// Python 3.11 and later: the frames are read without the API, first checked, then trusted.
TEST_F(PythonStack, AThreadThatLetGoOfTheGilInsideACallKeepsItsStack) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import stackprobe\n"
      "class Model:\n"
      "    def forward(self):\n"
      "        return stackprobe.frames_without_gil()\n"  // 4
      "def main():\n"
      "    return Model().forward()\n"  // 6
      "for i in range(40):\n"  // past the checked walks
      "    frames = main()\n"  // 8
      "    assert frames == [('Model.forward', 'probe_program.py', 4),\n"
      "                      ('main', 'probe_program.py', 6),\n"
      "                      ('<module>', 'probe_program.py', 8)], (i, frames)\n");
  // A generator's frame, and a function called from C (map) in between.
  Run("import stackprobe\n"
      "def gen():\n"
      "    yield stackprobe.frames_without_gil()\n"  // 3
      "def key(x):\n"
      "    return next(gen())\n"  // 5
      "frames = list(map(key, [1]))[0]\n"  // 6
      "assert [f[0] for f in frames] == ['gen', 'key', '<module>'], frames\n"
      "assert [f[2] for f in frames] == [3, 5, 6], frames\n");
}

// While the layout is being checked, captures with and without the GIL alternate on the same
// code objects (named first without the GIL, then with it): both keep reading the frames.
TEST_F(PythonStack, CapturesWithAndWithoutTheGilAlternate) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import stackprobe\n"
      "stackprobe.reset_layout()\n"
      "def inner(f):\n"
      "    return f()\n"  // 4
      "for i in range(20):\n"
      "    for f in (stackprobe.frames_without_gil, stackprobe.frames_with_gil):\n"
      "        frames = inner(f)\n"  // 7
      "        assert [(x[0], x[2]) for x in frames] == [('inner', 4), ('<module>', 7)], \\\n"
      "            (i, f, frames)\n");
}

// A layout that failed its check: threads without the GIL get no stack, the others still do,
// and the tracer is told why once.
TEST_F(PythonStack, ARefusedLayoutLeavesTheGilPathAndSaysWhyOnce) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import stackprobe, sys\n"
      "stackprobe.refuse_layout()\n"
      "assert stackprobe.take_notice() is None\n"
      "def inner(f):\n"
      "    return f()\n"
      "assert inner(stackprobe.frames_without_gil) == []\n"
      "assert [x[0] for x in inner(stackprobe.frames_with_gil)] == ['inner', '<module>']\n"
      "notice = stackprobe.take_notice()\n"
      "version = '%d.%d' % sys.version_info[:2]\n"
      "assert notice.startswith(f'Python {version}: its frames are not laid out'), notice\n"
      "assert 'has no Python stack' in notice, notice\n"
      "assert inner(stackprobe.frames_without_gil) == []\n"
      "assert stackprobe.take_notice() is None\n"
      "stackprobe.reset_layout()\n"
      "assert [x[0] for x in inner(stackprobe.frames_without_gil)] == ['inner', '<module>']\n");
}

// A walk reuses what the previous one found at each depth while the code object and its
// instruction are the same: alternating call sites and functions keep their own lines.
TEST_F(PythonStack, RepeatedWalksFollowEachCallSiteAndFunction) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import stackprobe\n"
      "def inner():\n"
      "    return stackprobe.frames_without_gil()\n"  // 3
      "def other():\n"
      "    return stackprobe.frames_without_gil()\n"  // 5
      "def outer(i):\n"
      "    if i % 3 == 0:\n"
      "        return inner()\n"  // 8
      "    if i % 3 == 1:\n"
      "        return other()\n"  // 10
      "    return inner()\n"  // 11
      "expected = [[('inner', 3), ('outer', 8)], [('other', 5), ('outer', 10)],\n"
      "            [('inner', 3), ('outer', 11)]]\n"
      "for i in range(60):\n"
      "    frames = outer(i)\n"  // 15
      "    assert [(f[0], f[2]) for f in frames] == expected[i % 3] + [('<module>', 15)], \\\n"
      "        (i, frames)\n");
}

// A code object read without the GIL is not kept alive: another one may take its address.
TEST_F(PythonStack, ACodeObjectAtAFreedOnesAddressGetsItsOwnName) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import gc, stackprobe\n"
      "for i in range(200):\n"
      "    scope = {'stackprobe': stackprobe}\n"
      "    exec(f'def f{i}():\\n    return stackprobe.frames_without_gil()\\n', scope)\n"
      "    frames = scope[f'f{i}']()\n"
      "    assert frames[0][0] == f'f{i}', (i, frames)\n"
      "    del scope\n"
      "    gc.collect()\n");
}

// Other threads run Python (their frames change all the time) while this one reads its own.
TEST_F(PythonStack, OtherThreadsRunningPythonDoNotDisturbTheRead) {
  if (PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000) {
    GTEST_SKIP() << "no frame layout for this Python";
  }
  Run("import threading, stackprobe\n"
      "stop = False\n"
      "def spin(depth):\n"
      "    while not stop:\n"
      "        if depth: spin(depth - 1)\n"
      "threads = [threading.Thread(target=spin, args=(d,)) for d in (3, 7)]\n"
      "for t in threads: t.start()\n"
      "def reader():\n"
      "    return stackprobe.frames_without_gil()\n"  // 9
      "try:\n"
      "    for i in range(2000):\n"
      "        frames = reader()\n"  // 12
      "        assert [(f[0], f[2]) for f in frames] == [('reader', 9), ('<module>', 12)], frames\n"
      "finally:\n"
      "    stop = True\n"
      "    for t in threads: t.join()\n");
}

TEST_F(PythonStack, APendingExceptionIsLeftAsItWas) {
  Run("import stackprobe\n"
      "def fresh_code_object():\n"
      "    try:\n"
      "        stackprobe.capture_with_pending_error()\n"
      "    except KeyError as e:\n"
      "        assert e.args == ('kept',), e.args\n"
      "        return\n"
      "    raise AssertionError('the KeyError was lost')\n"
      "fresh_code_object()\n");
}

// The garbage collector is held off during the walk only: its state is the program's after.
TEST_F(PythonStack, TheGarbageCollectorIsLeftAsItWas) {
  Run("import gc, stackprobe\n"
      "assert gc.isenabled()\n"
      "stackprobe.capture()\n"
      "assert gc.isenabled(), 'the capture left the collector off'\n"
      "gc.disable()\n"
      "stackprobe.capture()\n"
      "assert not gc.isenabled(), 'the capture turned the collector on'\n"
      "gc.enable()\n");
}

TEST_F(PythonStack, TheDepthIsBounded) {
  Run("import stackprobe\n"
      "def deep(n):\n"
      "    if n == 0:\n"
      "        stackprobe.capture()\n"
      "    else:\n"
      "        deep(n - 1)\n"
      "deep(200)\n");
  EXPECT_EQ(g_seen.size(), static_cast<size_t>(kMaxPythonFrames));
  EXPECT_EQ(g_seen[0].line, 4u);
  // The recursive call site, decoded once and then taken from the cache, on every frame.
  for (size_t i = 1; i < g_seen.size(); ++i) EXPECT_EQ(g_seen[i].line, 6u) << i;
}

}  // namespace
}  // namespace cumemtrace::tracer
