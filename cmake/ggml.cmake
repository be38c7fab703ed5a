# ggml: from an installed package, or built from the llama.cpp release tree
# that scripts/fetch-ggml.sh puts in .deps/llama.cpp. graft computes on
# ggml's CPU backend only: GPU options (GGML_CUDA, ...) would build backends
# graft does not use.
if(GRAFT_SYSTEM_GGML)
  find_package(ggml REQUIRED)
  set(GRAFT_GGML_TARGET ggml::ggml)
else()
  if(NOT EXISTS "${GRAFT_GGML_SOURCE}/CMakeLists.txt")
    message(FATAL_ERROR "ggml source not found in ${GRAFT_GGML_SOURCE}: run scripts/setup.sh (or make setup) first")
  endif()
  set(GGML_BUILD_TESTS OFF CACHE BOOL "" FORCE)
  set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
  set(GGML_NATIVE ${GRAFT_NATIVE} CACHE BOOL "" FORCE)
  # As llama.cpp builds it: tinyBLAS matmuls for F16/Q8_0/... (same numbers and speed as llama.cpp).
  set(GGML_LLAMAFILE ON CACHE BOOL "" FORCE)
  set(GGML_CCACHE ON CACHE BOOL "")
  set(BUILD_SHARED_LIBS OFF CACHE BOOL "")
  set(GGML_STATIC OFF CACHE BOOL "")
  add_subdirectory(${GRAFT_GGML_SOURCE} ${CMAKE_BINARY_DIR}/ggml EXCLUDE_FROM_ALL)
  set(GRAFT_GGML_TARGET ggml)
endif()
