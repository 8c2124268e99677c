# Every dependency is a Debian package; a missing one stops configuration with its name.
# (scripts/setup-deps.sh installs them all.)

macro(shapetune_missing what package)
  message(FATAL_ERROR
    "shapetune: ${what} was not found.\n"
    "  Install it with:  sudo apt-get install ${package}\n"
    "  (or run scripts/setup-deps.sh, which installs every dependency)")
endmacro()

find_package(Threads REQUIRED)

set(SHAPETUNE_CUDA_MIN_VERSION 12.0)  # the installed package asks for the same (cmake/Install.cmake)
find_package(CUDAToolkit ${SHAPETUNE_CUDA_MIN_VERSION} QUIET)
if(NOT CUDAToolkit_FOUND)
  shapetune_missing("the CUDA Toolkit (nvcc, cudart, cuBLAS, CUPTI)" "nvidia-cuda-toolkit (or NVIDIA's cuda-toolkit-13-0)")
endif()
foreach(target CUDA::cudart_static CUDA::cublas CUDA::cublasLt CUDA::cupti)
  if(NOT TARGET ${target})
    shapetune_missing("${target}" "cuda-toolkit-13-0 (NVIDIA's repository) or nvidia-cuda-toolkit")
  endif()
endforeach()

# shapetune::cudnn and shapetune::sqlite3 come from cmake/InterfaceTargets.cmake, which the
# installed package uses too (cmake/Install.cmake).
include(InterfaceTargets)
shapetune_interface_targets("${SHAPETUNE_STATIC_DEPS}" _missing)
if(_missing)
  string(REPLACE "|" ";" _missing "${_missing}")
  shapetune_missing(${_missing})
endif()

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
