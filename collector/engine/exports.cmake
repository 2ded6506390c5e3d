# The timeline model and the exports (export.h) of the engine, kept in their own list so that
# collector/engine/CMakeLists.txt needs one line for them.

# Perfetto's schema, the subset we write (perfetto/perfetto_trace_subset.proto), protobuf-lite.
set(CUMEMTRACE_PERFETTO_PROTO "${CMAKE_CURRENT_SOURCE_DIR}/perfetto/perfetto_trace_subset.proto")
set(CUMEMTRACE_PERFETTO_OUT "${CMAKE_CURRENT_BINARY_DIR}/gen")
file(MAKE_DIRECTORY "${CUMEMTRACE_PERFETTO_OUT}/perfetto")
add_custom_command(
  OUTPUT "${CUMEMTRACE_PERFETTO_OUT}/perfetto/perfetto_trace_subset.pb.cc"
         "${CUMEMTRACE_PERFETTO_OUT}/perfetto/perfetto_trace_subset.pb.h"
  COMMAND ${PROTOC_EXECUTABLE} --proto_path=${CMAKE_CURRENT_SOURCE_DIR}
          --cpp_out=${CUMEMTRACE_PERFETTO_OUT} ${CUMEMTRACE_PERFETTO_PROTO}
  DEPENDS ${CUMEMTRACE_PERFETTO_PROTO}
  COMMENT "protoc perfetto/perfetto_trace_subset.proto")
# Generated code: built without our warning flags.
add_library(cumemtrace_perfetto_proto STATIC
            "${CUMEMTRACE_PERFETTO_OUT}/perfetto/perfetto_trace_subset.pb.cc")
target_include_directories(cumemtrace_perfetto_proto SYSTEM PUBLIC "${CUMEMTRACE_PERFETTO_OUT}")
target_link_libraries(cumemtrace_perfetto_proto PUBLIC libprotobuf-lite)

target_sources(cumemtrace_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/timeline_capture.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_tracks.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_perfetto.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_chrome.cc
  ${CMAKE_CURRENT_LIST_DIR}/pickle_writer.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_memory_viz.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_csv.cc
  ${CMAKE_CURRENT_LIST_DIR}/export_html.cc
)
# The viewer's HTML, CSS and JS as one string (viewer/CMakeLists.txt).
target_link_libraries(cumemtrace_engine PUBLIC cumemtrace_perfetto_proto
                      PRIVATE cumemtrace_viewer_assets)
