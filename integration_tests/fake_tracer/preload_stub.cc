// An empty shared library that end-to-end tests inject in place of the real tracer
// (CUMEMTRACE_TRACER_LIB), so the fake tracer is the only peer the collector sees.
extern "C" int cumemtrace_test_preload_stub() { return 0; }
