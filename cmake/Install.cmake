# `cmake --install` makes the `shapetune` CMake package: what another project needs to load a
# dispatch database and launch a winner through the catalogue (the libraries from core/ to
# models/, their headers, and the targets), found with find_package(shapetune CONFIG) as the one
# target shapetune::dispatch. The tuner and the CLI stay out: a consumer only reads the table,
# and leaving them out keeps yaml-cpp off its dependencies. examples/dispatch_consumer/ is such a
# project; tests/install/consumer-test.sh builds it against a fresh install.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_install_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/shapetune")

set(_installed_targets shapetune_core shapetune_db shapetune_kernels_sm90a shapetune_kernels shapetune_baselines
                       shapetune_variants shapetune_harness shapetune_models)
foreach(_target IN LISTS _installed_targets)
  string(REPLACE "shapetune_" "" _export_name "${_target}")
  set_target_properties(${_target} PROPERTIES EXPORT_NAME ${_export_name})  # shapetune::models, ...
endforeach()
# Their folders' headers, included as in the tree ("models/dispatcher.hpp"; see shapetune_library).
foreach(_folder core db kernels baselines variants harness models)
  install(DIRECTORY "${CMAKE_SOURCE_DIR}/${_folder}/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/shapetune/${_folder}"
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" PATTERN "*.h")
endforeach()

# The one target a consumer links: the dispatcher and everything under it. Its headers are C++20.
add_library(shapetune_dispatch INTERFACE)
set_target_properties(shapetune_dispatch PROPERTIES EXPORT_NAME dispatch)
target_link_libraries(shapetune_dispatch INTERFACE shapetune_models)
target_compile_features(shapetune_dispatch INTERFACE cxx_std_20)
if(SHAPETUNE_SANITIZE)
  # The libraries' objects call the sanitizers' runtimes, which only the final link can bring.
  target_link_options(shapetune_dispatch INTERFACE -fsanitize=address,undefined)
endif()

install(TARGETS ${_installed_targets} shapetune_dispatch EXPORT shapetuneTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT shapetuneTargets NAMESPACE shapetune:: DESTINATION "${_install_cmake_dir}")

configure_package_config_file("${CMAKE_SOURCE_DIR}/cmake/shapetuneConfig.cmake.in"
                              "${CMAKE_BINARY_DIR}/package/shapetuneConfig.cmake"
                              INSTALL_DESTINATION "${_install_cmake_dir}")
# 0.x: a minor version may change the headers, so only the same minor version is compatible.
write_basic_package_version_file("${CMAKE_BINARY_DIR}/package/shapetuneConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/package/shapetuneConfig.cmake"
              "${CMAKE_BINARY_DIR}/package/shapetuneConfigVersion.cmake"
              "${CMAKE_SOURCE_DIR}/cmake/InterfaceTargets.cmake"
        DESTINATION "${_install_cmake_dir}")
