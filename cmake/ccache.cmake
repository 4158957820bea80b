# ccache for every compile, with the sloppiness that lets it cache precompiled-header users
# (https://ccache.dev/manual/latest.html#_precompiled_headers).
find_program(CPT_CCACHE ccache)
if(CPT_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
      ${CPT_CCACHE})
endif()
