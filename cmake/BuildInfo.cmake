# The git sha of the source tree, refreshed on every build (not only at configure time), so a
# result never claims a commit it was not built from. "-dirty" marks uncommitted changes.
set(_build_info_cpp "${CMAKE_BINARY_DIR}/generated/build_info.cpp")
add_custom_target(shapetune_build_info_refresh
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUTPUT=${_build_info_cpp}
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${_build_info_cpp}
  COMMENT "Recording git sha")
add_library(shapetune_build_info STATIC ${_build_info_cpp})
add_dependencies(shapetune_build_info shapetune_build_info_refresh)
target_include_directories(shapetune_build_info PUBLIC ${CMAKE_SOURCE_DIR})
