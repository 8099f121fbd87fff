# qvg_runtime_libraries(<out> <library files...>): for each shared library
# file (as a development package names it: libavformat.so, a symbolic link),
# the file its SONAME names in the same directory (libavformat.so.59), which
# the runtime package installs. An installed static libqvg lists these in
# its exported target and in qvg.pc, so a consumer links the very libraries
# qvg was built against without their development packages (no headers, no
# .pc files, no find_package modules). A file without a SONAME, or whose
# SONAME file is absent, is listed as its resolved path; static archives and
# linker flags pass through unchanged.
function(qvg_runtime_libraries out)
  set(result "")
  foreach(lib IN LISTS ARGN)
    if(NOT IS_ABSOLUTE "${lib}" OR NOT EXISTS "${lib}" OR NOT lib MATCHES "\\.so(\\.[0-9]+)*$")
      list(APPEND result "${lib}")
      continue()
    endif()
    get_filename_component(real "${lib}" REALPATH)
    get_filename_component(dir "${lib}" DIRECTORY)  # as given: /usr/local/cuda/lib, not the toolkit's versioned folder
    set(soname "")
    if(CMAKE_OBJDUMP)
      execute_process(COMMAND "${CMAKE_OBJDUMP}" -p "${real}" OUTPUT_VARIABLE dump ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND dump MATCHES "SONAME +([^ \n]+)")
        set(soname "${CMAKE_MATCH_1}")
      endif()
    endif()
    if(soname AND EXISTS "${dir}/${soname}")
      list(APPEND result "${dir}/${soname}")
    else()
      list(APPEND result "${real}")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# qvg_target_runtime_libraries(<out> <imported targets...>): the same for
# imported targets (CUDA::cudart, CUDA::cublas), by their IMPORTED_LOCATION.
function(qvg_target_runtime_libraries out)
  set(files "")
  foreach(t IN LISTS ARGN)
    get_target_property(loc ${t} IMPORTED_LOCATION)
    if(NOT loc)
      get_target_property(loc ${t} IMPORTED_LOCATION_RELEASE)
    endif()
    if(loc)
      list(APPEND files "${loc}")
    endif()
  endforeach()
  qvg_runtime_libraries(result ${files})
  set(${out} "${result}" PARENT_SCOPE)
endfunction()
