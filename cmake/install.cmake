# cmake --install: headers, the library (static; shared with
# BUILD_SHARED_LIBS=ON, with a SOVERSION), the qvg CLI, the shipped model
# weights and clips (share/qvg, where the installed CLI looks for them), the
# exported target qvg::qvg with qvgConfig.cmake + version file
# (find_package(qvg 0.1 [COMPONENTS CUDA])), and a pkg-config file.
include(CMakePackageConfigHelpers)

set_target_properties(qvg PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
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

# pkg-config: the compile definitions the public headers depend on, and what
# a static libqvg needs at link time (in Requires and Libs, not their .private
# forms: libqvg is only built static, so every consumer links them, and
# `pkg-config --static` would ask for static FFmpeg dependencies as well).
set(QVG_PC_CFLAGS "")
set(QVG_PC_LIBS_PRIVATE "-lpthread")
set(QVG_PC_REQUIRES_PRIVATE "")
if(QVG_WITH_CUDA)
  string(APPEND QVG_PC_CFLAGS " -DQVG_WITH_CUDA=1 -I${CUDAToolkit_INCLUDE_DIRS}")
  string(APPEND QVG_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
if(QVG_WITH_FFMPEG)
  string(APPEND QVG_PC_CFLAGS " -DQVG_WITH_FFMPEG=1")
  set(QVG_PC_REQUIRES_PRIVATE "libavformat libavcodec libswscale libavutil")
endif()
# The prefix relative to the .pc file (pkg-config's ${pcfiledir}): a moved prefix keeps working.
file(RELATIVE_PATH QVG_PC_PREFIX_FROM_PCFILEDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" QVG_PC_PREFIX_FROM_PCFILEDIR "${QVG_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(cmake/qvg.pc.in ${CMAKE_CURRENT_BINARY_DIR}/qvg.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/qvg.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
