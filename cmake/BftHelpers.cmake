# Each capability (milp, curve, alloc, sim) is an OBJECT library bft_obj_<cap>; the public
# library bft::bft is made of all of them. Tests link only the capabilities they exercise.
set(BFT_PUBLIC_INCLUDE_DIR ${PROJECT_SOURCE_DIR}/libbft/include)
set(BFT_SRC_DIR ${PROJECT_SOURCE_DIR}/libbft/src)

# bft_add_capability(<cap> SOURCES ... [DEPENDS <cap>...] [LIBS <target>...])
function(bft_add_capability cap)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;LIBS" ${ARGN})
  add_library(bft_obj_${cap} OBJECT ${ARG_SOURCES})
  target_include_directories(bft_obj_${cap}
    PUBLIC $<BUILD_INTERFACE:${BFT_PUBLIC_INCLUDE_DIR}>
    PRIVATE ${BFT_SRC_DIR})
  target_link_libraries(bft_obj_${cap} PRIVATE $<BUILD_INTERFACE:bft_warnings>)
  foreach(dep IN LISTS ARG_DEPENDS)
    target_link_libraries(bft_obj_${cap} PUBLIC bft_obj_${dep})
  endforeach()
  foreach(lib IN LISTS ARG_LIBS)
    target_link_libraries(bft_obj_${cap} PUBLIC ${lib})
  endforeach()
endfunction()

# Object files of an object library are linked only into targets that name it directly, so a
# test lists every capability (and backend) it needs: bft_link_capabilities(<target> milp curve ...)
function(bft_link_capabilities target)
  foreach(cap IN LISTS ARGN)
    target_link_libraries(${target} PRIVATE bft_obj_${cap})
  endforeach()
endfunction()

# bft_add_backend(<name> SOURCES ... [LIBS <targets>...] [LINK <libraries>...]): a MILP backend, called
# from its folder libbft/src/milp/<name>/: the object library bft_obj_<name> (on milp, with the
# solver's build-time targets LIBS) and the installed library bft::<name> (linking LINK, full
# paths, so that the installed package config needs no find module). Adds <name> to BFT_BACKENDS.
function(bft_add_backend name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LINK" ${ARGN})
  set(_libs)
  foreach(lib IN LISTS ARG_LIBS)
    list(APPEND _libs $<BUILD_INTERFACE:${lib}>)
  endforeach()
  bft_add_capability(${name} SOURCES ${ARG_SOURCES} DEPENDS milp LIBS ${_libs})
  add_library(bft_${name} STATIC $<TARGET_OBJECTS:bft_obj_${name}>)
  add_library(bft::${name} ALIAS bft_${name})
  target_link_libraries(bft_${name} PUBLIC bft ${ARG_LINK})
  set_target_properties(bft_${name} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY BFT_BACKENDS ${name})
endfunction()
