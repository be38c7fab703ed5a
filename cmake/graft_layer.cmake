# graft_layer(NAME DEPS ...): a static library graft_<NAME> made of every
# .cpp in the calling folder, with graft's strict warnings. Adding a file to a
# layer needs no CMake edit (re-run cmake after adding files is automatic via
# CONFIGURE_DEPENDS).
set(GRAFT_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)

function(graft_layer name)
  cmake_parse_arguments(L "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_library(graft_${name} STATIC ${sources})
  target_include_directories(graft_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(graft_${name} PRIVATE ${GRAFT_WARNINGS})
  target_link_libraries(graft_${name} PUBLIC ${L_DEPS})
endfunction()

# graft_test(LAYER DEPS ...): one GoogleTest binary per tests/<layer> folder.
function(graft_test layer)
  cmake_parse_arguments(T "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(NOT sources)
    return()
  endif()
  add_executable(graft_${layer}_tests ${sources})
  target_compile_options(graft_${layer}_tests PRIVATE ${GRAFT_WARNINGS})
  target_include_directories(graft_${layer}_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(graft_${layer}_tests PRIVATE ${T_DEPS} graft_testing GTest::gtest GTest::gtest_main)
  target_compile_definitions(graft_${layer}_tests PRIVATE
    GRAFT_BUNDLE_DIR="${GRAFT_BUNDLE_DIR}"
    GRAFT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    GRAFT_BINARY="$<TARGET_FILE:graft>")
  gtest_discover_tests(graft_${layer}_tests
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
    PROPERTIES LABELS ${layer} FIXTURES_REQUIRED test_models
    DISCOVERY_TIMEOUT 60)
endfunction()
