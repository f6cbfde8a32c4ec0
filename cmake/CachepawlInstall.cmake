# Install rules (CACHEPAWL_INSTALL=ON): `cmake --install BUILD --prefix P` puts
#
#   P/lib/libcachepawl.so.X.Y.Z, .so.X, .so      the store (cmake/CachepawlSharedLibrary.cmake)
#   P/include/cachepawl/store/store.h ...         the public C++ headers, folders kept
#   P/include/cachepawl/cachepawl.h               the C API's header, once capi/cachepawl.h exists
#   P/lib/cmake/Cachepawl/                        find_package(Cachepawl) -> Cachepawl::cachepawl
#   P/lib/pkgconfig/cachepawl.pc                  pkg-config --cflags --libs cachepawl
#   P/bin/cachepawl                               the command line (when tools are built)
#
# ("lib" is CMAKE_INSTALL_LIBDIR: lib/<multiarch> under the prefix /usr on Debian.) Every
# installed path is relative to the prefix chosen at install time. tests/install/check_install.sh
# installs into a temporary prefix and builds consumers both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/Cachepawl")
set(_include_dir "${CMAKE_INSTALL_INCLUDEDIR}/cachepawl")

install(TARGETS cachepawl_shared EXPORT CachepawlTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
foreach(header IN LISTS CACHEPAWL_PUBLIC_HEADERS)
  get_filename_component(_folder "${header}" DIRECTORY)
  install(FILES "${PROJECT_SOURCE_DIR}/${header}" DESTINATION "${_include_dir}/${_folder}")
endforeach()
if(EXISTS "${CACHEPAWL_C_HEADER}")
  install(FILES "${CACHEPAWL_C_HEADER}" DESTINATION "${_include_dir}")
endif()
if(CACHEPAWL_BUILD_TOOLS)
  install(TARGETS cachepawl RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()

# The CMake package: exported targets, config, version (0.x releases share SONAME .so.0).
install(EXPORT CachepawlTargets NAMESPACE Cachepawl:: DESTINATION "${_cmake_dir}")
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/CachepawlConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/CachepawlConfig.cmake" INSTALL_DESTINATION "${_cmake_dir}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/CachepawlConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/CachepawlConfig.cmake"
  "${PROJECT_BINARY_DIR}/CachepawlConfigVersion.cmake" DESTINATION "${_cmake_dir}")

# pkg-config: the prefix is derived from the .pc file's own folder (${pcfiledir}), so the file
# is right whatever --prefix the install is given. Absolute LIBDIR/INCLUDEDIR are kept as is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(CACHEPAWL_PC_PREFIX_FROM_PCFILEDIR "..")
  set(CACHEPAWL_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH CACHEPAWL_PC_PREFIX_FROM_PCFILEDIR
    "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" CACHEPAWL_PC_PREFIX_FROM_PCFILEDIR
    "${CACHEPAWL_PC_PREFIX_FROM_PCFILEDIR}")
  set(CACHEPAWL_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(CACHEPAWL_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(CACHEPAWL_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${CMAKE_CURRENT_LIST_DIR}/cachepawl.pc.in" "${PROJECT_BINARY_DIR}/cachepawl.pc"
  @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/cachepawl.pc"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
