# Embeds a text file into the binary as a C++ function returning its bytes:
#   graft_embed_text(TARGET target INPUT file FUNCTION name)
# defines `std::string_view name()` in namespace graft (declare it in a header).
# Rebuilt whenever the file changes, so the binary always carries the file as
# it is in the source tree, wherever it later runs from.
function(graft_embed_text)
  cmake_parse_arguments(E "" "TARGET;INPUT;FUNCTION" "" ${ARGN})
  set(out_cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded_${E_FUNCTION}.cpp)
  add_custom_command(
    OUTPUT ${out_cpp}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${E_INPUT} -DOUTPUT=${out_cpp} -DFUNCTION=${E_FUNCTION}
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_text_write.cmake
    DEPENDS ${E_INPUT} ${PROJECT_SOURCE_DIR}/cmake/embed_text_write.cmake
    COMMENT "Embedding ${E_INPUT}"
    VERBATIM)
  target_sources(${E_TARGET} PRIVATE ${out_cpp})
endfunction()
