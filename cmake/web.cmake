# graft's web page: web/build.mjs bundles web/src with the npm packages that
# scripts/setup.sh installed into web/node_modules (npm ci; no network at
# build time) and writes a C++ source embedding the files, compiled into the
# given target. The build log shows the page's total transfer size (gzip).
find_program(GRAFT_NODE_EXECUTABLE node)

function(graft_embed_web target)
  set(web_dir ${PROJECT_SOURCE_DIR}/web)
  if(NOT GRAFT_NODE_EXECUTABLE)
    message(FATAL_ERROR "graft's web page is built with node, which is missing: run ./scripts/setup.sh")
  endif()
  if(NOT EXISTS ${web_dir}/node_modules/esbuild/package.json)
    message(FATAL_ERROR "web/node_modules is missing: run ./scripts/setup.sh (it runs npm ci in web/)")
  endif()
  set(out_cpp ${CMAKE_CURRENT_BINARY_DIR}/web_assets.cpp)
  file(GLOB_RECURSE web_sources CONFIGURE_DEPENDS ${web_dir}/src/*)
  add_custom_command(
    OUTPUT ${out_cpp}
    COMMAND ${GRAFT_NODE_EXECUTABLE} ${web_dir}/build.mjs --out ${CMAKE_BINARY_DIR}/web --cpp ${out_cpp}
    DEPENDS ${web_sources} ${web_dir}/build.mjs ${web_dir}/package-lock.json
    WORKING_DIRECTORY ${web_dir}
    COMMENT "Building the web page (web/) and embedding it"
    VERBATIM)
  target_sources(${target} PRIVATE ${out_cpp})
endfunction()
