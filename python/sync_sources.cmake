# Lays out the development build's package: copies python/bft (SRC) into the build's bft (DST) and
# removes what the source tree no longer has, so that a moved or deleted module is not still imported
# from the build (a stale directory would even import as a namespace package).
file(GLOB_RECURSE _built LIST_DIRECTORIES true RELATIVE ${DST} ${DST}/*)
foreach(_path IN LISTS _built)
  if(NOT EXISTS ${SRC}/${_path} AND NOT _path MATCHES "^_core\\." AND EXISTS ${DST}/${_path})
    file(REMOVE_RECURSE ${DST}/${_path})
  endif()
endforeach()
file(COPY ${SRC}/ DESTINATION ${DST} PATTERN "__pycache__" EXCLUDE PATTERN "_core.*" EXCLUDE)
