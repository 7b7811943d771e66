# Writes a C++ source that holds a file's bytes, for a file the library ships inside itself (the memory
# report's HTML page). Run at build time:
#   cmake -DINPUT=page.html -DOUTPUT=page_html.cpp -DNAMESPACE=bytegrad::embedded -DFUNCTION=page_html -P embed_file.cmake
# The source defines `std::string_view NAMESPACE::FUNCTION()`, the file's bytes exactly. They are written as a
# byte array, not a string literal: no raw-string delimiter can clash with the content, and compilers' limits
# on a literal's length (MSVC: 16 KiB a piece, 64 KiB in all) do not apply.
foreach(variable INPUT OUTPUT NAMESPACE FUNCTION)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "embed_file.cmake: -D${variable}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" bytes HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${bytes}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){20})" "\\1\n    " bytes "${bytes}")
get_filename_component(input_name "${INPUT}" NAME)

# Written to a temporary file and copied only when different, so an unchanged input rebuilds nothing.
file(WRITE "${OUTPUT}.tmp" "// Generated from ${input_name} by cmake/embed_file.cmake at build time: edit ${input_name}, not this.
#include <cstddef>
#include <string_view>

namespace ${NAMESPACE} {

namespace {
// The file's bytes and a terminating 0 (which the view leaves out), so that an empty file is a valid array.
constexpr unsigned char kBytes[] = {
    ${bytes}0x00};
}  // namespace

std::string_view ${FUNCTION}() { return {reinterpret_cast<const char*>(kBytes), sizeof(kBytes) - 1}; }

}  // namespace ${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
