# One static library per layer of cmake/layers.txt (argus_model, argus_wire, ...),
# from the *.cpp of the layer's folders (not their *_main.cpp: programs), each
# linking the layer before it and nothing above. Before any of them compiles,
# scripts/check-layers.py checks every include of the layered folders against the
# same file: a backwards include, or a cycle between folders, fails the build.
set(ARGUS_LAYERS_FILE ${PROJECT_SOURCE_DIR}/cmake/layers.txt)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ARGUS_LAYERS_FILE})
find_package(Python3 REQUIRED COMPONENTS Interpreter)

file(STRINGS ${ARGUS_LAYERS_FILE} _argus_layer_lines REGEX "^[a-z]")
set(ARGUS_LAYERS)
set(_argus_checked_sources)
foreach(line ${_argus_layer_lines})
  string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
  list(POP_FRONT fields layer)
  list(APPEND ARGUS_LAYERS ${layer})
  set(ARGUS_LAYER_${layer}_FOLDERS ${fields})
  set(sources)
  foreach(folder ${fields})
    file(GLOB found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cpp)
    file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.h ${PROJECT_SOURCE_DIR}/${folder}/*.c)
    list(APPEND _argus_checked_sources ${found} ${headers})
    list(FILTER found EXCLUDE REGEX "_main\\.cpp$")
    list(APPEND sources ${found})
  endforeach()
  set(ARGUS_LAYER_${layer}_SOURCES ${sources})
endforeach()

add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/layers.checked
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check-layers.py --root ${PROJECT_SOURCE_DIR}
  COMMAND ${CMAKE_COMMAND} -E touch ${CMAKE_BINARY_DIR}/layers.checked
  DEPENDS ${ARGUS_LAYERS_FILE} ${PROJECT_SOURCE_DIR}/scripts/check-layers.py ${_argus_checked_sources}
  COMMENT "Checking that includes go down the layers (cmake/layers.txt)"
  VERBATIM)
add_custom_target(argus_layer_check DEPENDS ${CMAKE_BINARY_DIR}/layers.checked)

set(_argus_below "")
foreach(layer ${ARGUS_LAYERS})
  set(target argus_${layer})
  if(ARGUS_LAYER_${layer}_SOURCES)
    add_library(${target} STATIC ${ARGUS_LAYER_${layer}_SOURCES})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)  # headers only (the C headers shared with BPF)
    set(scope INTERFACE)
  endif()
  # One include root for the whole tree: every #include names its path from the
  # project's top ("userspace/common/clock.h", "bpf/argus.h").
  target_include_directories(${target} ${scope} ${PROJECT_SOURCE_DIR})
  if(scope STREQUAL PUBLIC)
    target_compile_options(${target} PRIVATE ${ARGUS_WARNINGS})
  endif()
  if(_argus_below)
    target_link_libraries(${target} ${scope} ${_argus_below})
  endif()
  add_dependencies(${target} argus_layer_check)
  set(_argus_below ${target})
endforeach()

# What each layer needs from outside, beyond the layers below it.
target_compile_definitions(argus_model PUBLIC ARGUS_VERSION="${PROJECT_VERSION}")
target_link_libraries(argus_model PUBLIC nlohmann_json::nlohmann_json spdlog::spdlog Threads::Threads)
# The BPF skeleton (argus.skel.h) for the backend; libbpf; HTTPS for the apiserver watch.
target_include_directories(argus_sources PUBLIC ${ARGUS_BPF_GEN_DIR})
target_link_libraries(argus_sources PUBLIC PkgConfig::LIBBPF PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)
add_dependencies(argus_sources argus_bpf_skeleton)
target_link_libraries(argus_export PUBLIC prometheus-cpp::core PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)
# The flags bind into the agent's config.
target_link_libraries(argus_app PUBLIC CLI11::CLI11)

# libibverbs is optional: without it the RDMA port attributes always come from sysfs.
pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
if(IBVERBS_FOUND)
  target_link_libraries(argus_sources PRIVATE PkgConfig::IBVERBS)
  target_compile_definitions(argus_sources PRIVATE ARGUS_HAVE_IBVERBS=1)
else()
  find_library(ARGUS_IBVERBS_LIB ibverbs)
  find_path(ARGUS_IBVERBS_INCLUDE infiniband/verbs.h)
  if(ARGUS_IBVERBS_LIB AND ARGUS_IBVERBS_INCLUDE)
    target_include_directories(argus_sources PRIVATE ${ARGUS_IBVERBS_INCLUDE})
    target_link_libraries(argus_sources PRIVATE ${ARGUS_IBVERBS_LIB})
    target_compile_definitions(argus_sources PRIVATE ARGUS_HAVE_IBVERBS=1)
    set(IBVERBS_FOUND ON)
  endif()
endif()
message(STATUS "argus: libibverbs for RDMA port attributes: ${IBVERBS_FOUND}")
