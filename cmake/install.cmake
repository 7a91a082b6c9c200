# cmake/install.cmake — `cmake --install` and the attncheck CMake package.
#
# Included from the top-level CMakeLists.txt after every target exists:
#     include(cmake/install.cmake)
# It installs
#   bin/attncheck                              the command line (`attncheck fuzz --kernel-lib ...`)
#   include/attncheck/*.h, *.hpp               the public headers: the C ABI (kernel_abi.h), the
#                                              one-call check (check.hpp), model, tolerance, errors
#   include/attncheck/internal/<module>/*.hpp  the modules' own headers (reference/attention.hpp,
#                                              properties/..., ...), for code that goes deeper than
#                                              the one-call check; on the include path as
#                                              "reference/attention.hpp" like in the source tree
#   lib/libattncheck_{model,reference,optimized,kernels,properties}.a
#   share/doc/attncheck/                       the contracts: KERNEL_ABI.md (what kernel_abi.h
#                                              and kernel_abi_v2.h mean), kernel-abi.md (their
#                                              layout pinned), MODEL.md, NUMERICS.md
#   lib/cmake/attncheck/                       attncheckConfig.cmake, its version file, and the
#                                              exported targets, namespace attncheck::
# An outside project writes
#     find_package(attncheck REQUIRED)
#     target_link_libraries(my_test PRIVATE attncheck::properties)
# or, for a kernel in plain C that only needs the header and the CLI (no C++ compiler):
#     find_package(attncheck REQUIRED COMPONENTS abi)
# (see examples/outside-project). The libraries are static and attncheck::properties carries
# RapidCheck, which Debian builds without -fPIC: link them into executables, not shared objects.
# The source root, from this file (not PROJECT_SOURCE_DIR: that is the includer's project).
get_filename_component(_attncheck_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNCHECK_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attncheck"
    CACHE STRING "Where cmake --install puts attncheckConfig.cmake (relative to the prefix)")

# attncheck_flags carries our warnings and -march for our own targets. An outside project gets
# none of our compile options (its warnings and CPU target are its business); it keeps the link
# options, which a sanitizer build needs (the static libraries reference the sanitizer runtime),
# and gets the installed include directories.
get_target_property(_attncheck_flag_opts attncheck_flags INTERFACE_COMPILE_OPTIONS)
if(_attncheck_flag_opts)
  set(_attncheck_wrapped "")
  foreach(_opt IN LISTS _attncheck_flag_opts)
    list(APPEND _attncheck_wrapped "$<BUILD_INTERFACE:${_opt}>")
  endforeach()
  set_property(TARGET attncheck_flags PROPERTY INTERFACE_COMPILE_OPTIONS "${_attncheck_wrapped}")
endif()
target_include_directories(attncheck_flags INTERFACE
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/attncheck/internal>)

# attncheck::abi: only the C header attncheck/kernel_abi.h, for the kernel itself (a kernel
# needs nothing else from us; its test links attncheck::properties).
add_library(attncheck_abi INTERFACE)
target_include_directories(attncheck_abi INTERFACE
  $<BUILD_INTERFACE:${_attncheck_root}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_library(attncheck::abi ALIAS attncheck_abi)

# Exported names: attncheck::abi, ::model, ::reference, ::optimized, ::kernels, ::properties, ::flags and the
# executable attncheck::attncheck.
foreach(_module abi model reference optimized kernels properties flags)
  set_target_properties(attncheck_${_module} PROPERTIES EXPORT_NAME ${_module})
endforeach()

# Two export sets, so that a plain C project (a kernel in a shared library) can find the ABI
# header and the CLI without a C++ compiler: xtensor's own package config needs CXX enabled.
install(TARGETS attncheck_abi attncheck
  EXPORT attncheckAbiTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS attncheck_flags attncheck_model attncheck_reference attncheck_optimized
                attncheck_kernels attncheck_properties
  EXPORT attncheckTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

install(DIRECTORY ${_attncheck_root}/include/attncheck
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(DIRECTORY ${_attncheck_root}/model ${_attncheck_root}/reference
                  ${_attncheck_root}/optimized ${_attncheck_root}/kernels ${_attncheck_root}/properties
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attncheck/internal
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

install(EXPORT attncheckAbiTargets
  NAMESPACE attncheck::
  DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})
install(EXPORT attncheckTargets
  NAMESPACE attncheck::
  DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attncheckConfig.cmake.in
  ${PROJECT_BINARY_DIR}/attncheckConfig.cmake
  INSTALL_DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: minor versions may change the C++ API (the C ABI has its own version number).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attncheckConfig.cmake
              ${PROJECT_BINARY_DIR}/attncheckConfigVersion.cmake
  DESTINATION ${ATTNCHECK_INSTALL_CMAKEDIR})

# The contracts the headers implement, beside them for a kernel author with only the package.
install(FILES ${_attncheck_root}/docs/spec/KERNEL_ABI.md ${_attncheck_root}/docs/spec/MODEL.md
              ${_attncheck_root}/docs/spec/NUMERICS.md ${_attncheck_root}/docs/kernel-abi.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
