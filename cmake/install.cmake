# `cmake --install`: the headers (include/bytegrad/...), the libraries, and the CMake package
# (bytegradConfig.cmake + version file) exporting bytegrad::bytegrad and one target per layer.
include(CMakePackageConfigHelpers)
set(BYTEGRAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/bytegrad)

install(TARGETS bytegrad_all ${BYTEGRAD_LAYERS_TARGETS}
        EXPORT bytegradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/bytegrad DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT bytegradTargets NAMESPACE bytegrad:: DESTINATION ${BYTEGRAD_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/bytegradConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/bytegradConfig.cmake
                              INSTALL_DESTINATION ${BYTEGRAD_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/bytegradConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/bytegradConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/bytegradConfigVersion.cmake
        DESTINATION ${BYTEGRAD_CMAKE_DIR})
