# Every dependency is a Debian package; a missing one stops configuration with its name.
# (scripts/setup-deps.sh installs them all.)

macro(shapetune_missing what package)
  message(FATAL_ERROR
    "shapetune: ${what} was not found.\n"
    "  Install it with:  sudo apt-get install ${package}\n"
    "  (or run scripts/setup-deps.sh, which installs every dependency)")
endmacro()

find_package(Threads REQUIRED)

find_package(CUDAToolkit 12.0 QUIET)
if(NOT CUDAToolkit_FOUND)
  shapetune_missing("the CUDA Toolkit (nvcc, cudart, cuBLAS, CUPTI)" "nvidia-cuda-toolkit (or NVIDIA's cuda-toolkit-13-0)")
endif()
foreach(target CUDA::cudart_static CUDA::cublas CUDA::cublasLt CUDA::cupti)
  if(NOT TARGET ${target})
    shapetune_missing("${target}" "cuda-toolkit-13-0 (NVIDIA's repository) or nvidia-cuda-toolkit")
  endif()
endforeach()

# cuDNN ships no CMake config; look beside the toolkit and in Debian's multiarch folders.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu /usr/local/include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu /usr/local/lib)
if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY)
  shapetune_missing("cuDNN 9 (cudnn.h, libcudnn.so)" "cudnn9-cuda-13 (NVIDIA's repository)")
endif()
add_library(shapetune::cudnn INTERFACE IMPORTED)
set_target_properties(shapetune::cudnn PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${CUDNN_LIBRARY}")

# yaml-cpp: Debian 12 ships 0.7 (target yaml-cpp), newer ones 0.8 (yaml-cpp::yaml-cpp).
find_package(yaml-cpp QUIET)
if(NOT yaml-cpp_FOUND)
  shapetune_missing("yaml-cpp" "libyaml-cpp-dev")
endif()
add_library(shapetune::yaml-cpp INTERFACE IMPORTED)
if(SHAPETUNE_STATIC_DEPS)
  find_library(YAML_CPP_STATIC libyaml-cpp.a REQUIRED)
  set_target_properties(shapetune::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES "${YAML_CPP_STATIC}")
  get_target_property(_yaml_inc yaml-cpp INTERFACE_INCLUDE_DIRECTORIES)
  if(_yaml_inc)
    set_target_properties(shapetune::yaml-cpp PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_yaml_inc}")
  endif()
elseif(TARGET yaml-cpp::yaml-cpp)
  set_target_properties(shapetune::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp::yaml-cpp)
else()
  set_target_properties(shapetune::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp)
endif()

# zlib: the model runners read gzipped IDX datasets.
find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  shapetune_missing("zlib" "zlib1g-dev")
endif()

find_package(SQLite3 QUIET)
if(NOT SQLite3_FOUND)
  shapetune_missing("SQLite 3 headers and library" "libsqlite3-dev")
endif()
add_library(shapetune::sqlite3 INTERFACE IMPORTED)
if(SHAPETUNE_STATIC_DEPS)
  find_library(SQLITE3_STATIC libsqlite3.a REQUIRED)
  set_target_properties(shapetune::sqlite3 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SQLite3_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${SQLITE3_STATIC};${CMAKE_DL_LIBS};Threads::Threads;m")
else()
  set_target_properties(shapetune::sqlite3 PROPERTIES INTERFACE_LINK_LIBRARIES SQLite::SQLite3)
endif()

if(SHAPETUNE_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    shapetune_missing("GoogleTest" "libgtest-dev")
  endif()
endif()

find_package(benchmark QUIET)
if(NOT benchmark_FOUND)
  shapetune_missing("Google Benchmark" "libbenchmark-dev")
endif()
# shapetune-bench's. Static where a libbenchmark.a exists; Debian's libbenchmark-dev ships only
# the shared library, so a carried build (SHAPETUNE_STATIC_DEPS) instead finds it beside the
# binary ($ORIGIN, see shapetune-bench in CMakeLists.txt): scripts/build-for-gpu-box.sh packs it.
add_library(shapetune::benchmark INTERFACE IMPORTED)
set(SHAPETUNE_BENCHMARK_SHARED ON)
if(SHAPETUNE_STATIC_DEPS)
  find_library(BENCHMARK_STATIC libbenchmark.a)
endif()
if(SHAPETUNE_STATIC_DEPS AND BENCHMARK_STATIC)
  get_target_property(_benchmark_inc benchmark::benchmark INTERFACE_INCLUDE_DIRECTORIES)
  set_target_properties(shapetune::benchmark PROPERTIES
    INTERFACE_LINK_LIBRARIES "${BENCHMARK_STATIC};Threads::Threads")
  if(_benchmark_inc)
    set_target_properties(shapetune::benchmark PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_benchmark_inc}")
  endif()
  set(SHAPETUNE_BENCHMARK_SHARED OFF)
else()
  set_target_properties(shapetune::benchmark PROPERTIES INTERFACE_LINK_LIBRARIES benchmark::benchmark)
endif()
