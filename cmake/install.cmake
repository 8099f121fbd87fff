# cmake --install: headers, the library (static; shared with
# BUILD_SHARED_LIBS=ON, with a SOVERSION), the qvg CLI, the shipped model
# weights and clips (share/qvg, where the installed CLI looks for them), the
# exported target qvg::qvg with qvgConfig.cmake + version file
# (find_package(qvg 0.1 [COMPONENTS CUDA])), and a pkg-config file.
#
# What a consumer needs: the public headers include nothing of Eigen,
# nlohmann_json, CUDA or FFmpeg, so neither the exported target nor qvg.pc
# asks for their development packages. A shared libqvg records its own
# dependencies (DT_NEEDED, RUNPATH); the consumer links libqvg alone. A static
# libqvg passes the exact shared objects it was linked against
# (QVG_LINK_FILES: libav*.so.N, libcublas.so.N, libcudart.so.N, found by
# cmake/runtime_libs.cmake) to the consumer's link line, which needs only the
# runtime packages that hold them. A CPU-only build lists no CUDA library.
include(CMakePackageConfigHelpers)

set_target_properties(qvg PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
if(BUILD_SHARED_LIBS)
  # Installed, libqvg finds the libraries it links outside the system's
  # directories (the CUDA toolkit's lib64) through its RUNPATH.
  set_target_properties(qvg PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    # Exported symbols: namespace qvg only (cmake/qvg.map); the template
    # instantiations of Eigen, nlohmann_json and the standard library that
    # the library's code uses stay local to it.
    target_link_options(qvg PRIVATE "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/qvg.map")
    set_property(TARGET qvg APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/qvg.map)
  endif()
else()
  foreach(_qvg_file IN LISTS QVG_LINK_FILES)
    target_link_libraries(qvg INTERFACE "$<INSTALL_INTERFACE:${_qvg_file}>")
  endforeach()
endif()
install(TARGETS qvg EXPORT qvgTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/qvg DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET qvg_cli)
  # A shared libqvg is found beside the installed CLI wherever the prefix moves.
  set_target_properties(qvg_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS qvg_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES models/qvg_ref_video_dit.safetensors DESTINATION ${CMAKE_INSTALL_DATADIR}/qvg/models)
install(DIRECTORY data/clips DESTINATION ${CMAKE_INSTALL_DATADIR}/qvg/data FILES_MATCHING PATTERN "*.mp4")

set(QVG_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qvg)
install(EXPORT qvgTargets NAMESPACE qvg:: DESTINATION ${QVG_CONFIG_DIR})
configure_package_config_file(cmake/qvgConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/qvgConfig.cmake
                              INSTALL_DESTINATION ${QVG_CONFIG_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/qvgConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/qvgConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/qvgConfigVersion.cmake
        DESTINATION ${QVG_CONFIG_DIR})

# pkg-config: the compile definitions the build had, and what the library
# needs at link time: static, the exact shared objects in Libs (every
# consumer links them; no Requires on their development packages' .pc
# files); shared, libqvg alone, those files in Libs.private.
set(QVG_PC_CFLAGS "")
if(QVG_WITH_CUDA)
  string(APPEND QVG_PC_CFLAGS " -DQVG_WITH_CUDA=1")
endif()
if(QVG_WITH_FFMPEG)
  string(APPEND QVG_PC_CFLAGS " -DQVG_WITH_FFMPEG=1")
endif()
list(JOIN QVG_LINK_FILES " " _qvg_pc_files)
string(STRIP "${_qvg_pc_files} -pthread" _qvg_pc_files)
# Static: a RUNPATH to each of those files' directories outside the linker's
# own (the CUDA toolkit's lib64), as CMake gives a find_package consumer.
set(_qvg_rpath_dirs "")
foreach(_qvg_file IN LISTS QVG_LINK_FILES)
  get_filename_component(_qvg_dir "${_qvg_file}" DIRECTORY)
  if(_qvg_dir AND NOT _qvg_dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    list(APPEND _qvg_rpath_dirs "${_qvg_dir}")
  endif()
endforeach()
list(REMOVE_DUPLICATES _qvg_rpath_dirs)
set(_qvg_pc_rpath "")
foreach(_qvg_dir IN LISTS _qvg_rpath_dirs)
  string(APPEND _qvg_pc_rpath " -Wl,-rpath,${_qvg_dir}")
endforeach()
if(BUILD_SHARED_LIBS)
  set(QVG_PC_LIBS "")
  set(QVG_PC_LIBS_PRIVATE "${_qvg_pc_files}")
else()
  set(QVG_PC_LIBS " ${_qvg_pc_files}${_qvg_pc_rpath}")
  set(QVG_PC_LIBS_PRIVATE "")
endif()
# The prefix relative to the .pc file (pkg-config's ${pcfiledir}): a moved prefix keeps working.
file(RELATIVE_PATH QVG_PC_PREFIX_FROM_PCFILEDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" QVG_PC_PREFIX_FROM_PCFILEDIR "${QVG_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(cmake/qvg.pc.in ${CMAKE_CURRENT_BINARY_DIR}/qvg.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/qvg.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
