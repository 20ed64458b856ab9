# The folder layering, enforced at build time.
#
# megatron_layer(<target> DIRS <folders> DEPS <libraries>) records which folders a library is
# made of and which libraries it uses; megatron_library calls it. megatron_check_layering(), at
# the end of the top-level CMakeLists, gives every recorded library a check that runs before it
# compiles (and in every default build): each file of its folders may include headers only from
# its own folders and from the folders of the libraries it uses, directly or through theirs.
# A violation stops the build naming the file, the include and what the library may use.

function(megatron_layer name)
  cmake_parse_arguments(ARG "" "" "DIRS;DEPS" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY MEGATRON_LAYERS ${name})
  set_property(GLOBAL PROPERTY MEGATRON_LAYER_DIRS_${name} ${ARG_DIRS})
  set_property(GLOBAL PROPERTY MEGATRON_LAYER_DEPS_${name} ${ARG_DEPS})
endfunction()

# The folders `name` may include from: its own and those of every library it reaches.
function(megatron_layer_reach name out)
  set(seen)
  set(todo ${name})
  get_property(layers GLOBAL PROPERTY MEGATRON_LAYERS)
  while(todo)
    list(POP_FRONT todo current)
    if(current IN_LIST seen OR NOT current IN_LIST layers)
      continue()
    endif()
    list(APPEND seen ${current})
    get_property(deps GLOBAL PROPERTY MEGATRON_LAYER_DEPS_${current})
    list(APPEND todo ${deps})
  endwhile()
  set(dirs)
  foreach(layer ${seen})
    get_property(layer_dirs GLOBAL PROPERTY MEGATRON_LAYER_DIRS_${layer})
    list(APPEND dirs ${layer_dirs})
  endforeach()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

function(megatron_check_layering)
  get_property(layers GLOBAL PROPERTY MEGATRON_LAYERS)
  set(all_dirs)
  foreach(layer ${layers})
    get_property(dirs GLOBAL PROPERTY MEGATRON_LAYER_DIRS_${layer})
    list(APPEND all_dirs ${dirs})
  endforeach()
  string(REPLACE ";" "|" all_dirs_arg "${all_dirs}")
  foreach(layer ${layers})
    get_property(own GLOBAL PROPERTY MEGATRON_LAYER_DIRS_${layer})
    megatron_layer_reach(${layer} allowed)
    set(files)
    foreach(dir ${own})
      file(GLOB dir_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.h
           ${CMAKE_SOURCE_DIR}/${dir}/*.cpp ${CMAKE_SOURCE_DIR}/${dir}/*.cu
           ${CMAKE_SOURCE_DIR}/${dir}/*.cuh)
      list(APPEND files ${dir_files})
    endforeach()
    string(REPLACE ";" "|" own_arg "${own}")
    string(REPLACE ";" "|" allowed_arg "${allowed}")
    set(stamp ${CMAKE_BINARY_DIR}/layering/${layer}.stamp)
    add_custom_command(
      OUTPUT ${stamp}
      COMMAND ${CMAKE_COMMAND} -DLAYER=${layer} "-DOWN_DIRS=${own_arg}"
              "-DALLOWED_DIRS=${allowed_arg}" "-DALL_DIRS=${all_dirs_arg}"
              -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DSTAMP=${stamp}
              -P ${CMAKE_SOURCE_DIR}/cmake/check_layering.cmake
      DEPENDS ${files} ${CMAKE_SOURCE_DIR}/cmake/check_layering.cmake
      COMMENT "Checking the includes of ${layer}"
      VERBATIM)
    add_custom_target(${layer}_layering ALL DEPENDS ${stamp})
    get_target_property(type ${layer} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      add_dependencies(${layer} ${layer}_layering)
    endif()
  endforeach()
endfunction()
