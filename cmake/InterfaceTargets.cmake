# shapetune::cudnn and shapetune::sqlite3, the two dependencies shapetune's libraries link through
# targets of their own (neither library ships one that fits every case). Both sides make them with
# this file: cmake/Dependencies.cmake when shapetune is built, and the installed
# shapetuneConfig.cmake when another project finds the package, whose exported targets name them
# but cannot carry them (they point at files of the machine that built shapetune).
#
# shapetune_interface_targets(<static_deps> <missing_var>): static_deps as SHAPETUNE_STATIC_DEPS was
# when shapetune was built; CUDAToolkit and Threads must be found first. Sets <missing_var> to
# "<what>|<Debian package>" for the first dependency it cannot find, empty when all were found.
# Targets are not scoped by functions, so the caller's directory sees them.
function(shapetune_interface_targets static_deps missing_var)
  set(${missing_var} "" PARENT_SCOPE)

  if(NOT TARGET shapetune::cudnn)
    # cuDNN ships no CMake config; look beside the toolkit and in Debian's multiarch folders.
    find_path(CUDNN_INCLUDE_DIR cudnn.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu /usr/local/include)
    find_library(CUDNN_LIBRARY cudnn
      HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu /usr/local/lib)
    if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
      set(${missing_var} "cuDNN 9 (cudnn.h, libcudnn.so)|cudnn9-cuda-13 (NVIDIA's repository)" PARENT_SCOPE)
      return()
    endif()
    add_library(shapetune::cudnn INTERFACE IMPORTED)
    set_target_properties(shapetune::cudnn PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${CUDNN_LIBRARY}")
  endif()

  if(NOT TARGET shapetune::sqlite3)
    find_package(SQLite3 QUIET)
    if(static_deps)
      find_library(SQLITE3_STATIC libsqlite3.a)
    endif()
    if(NOT SQLite3_FOUND OR (static_deps AND NOT SQLITE3_STATIC))
      set(${missing_var} "SQLite 3 headers and library|libsqlite3-dev" PARENT_SCOPE)
      return()
    endif()
    add_library(shapetune::sqlite3 INTERFACE IMPORTED)
    if(static_deps)
      set_target_properties(shapetune::sqlite3 PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${SQLite3_INCLUDE_DIRS}"
        INTERFACE_LINK_LIBRARIES "${SQLITE3_STATIC};${CMAKE_DL_LIBS};Threads::Threads;m")
    else()
      set_target_properties(shapetune::sqlite3 PROPERTIES INTERFACE_LINK_LIBRARIES SQLite::SQLite3)
    endif()
  endif()
endfunction()
