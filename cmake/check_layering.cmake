cmake_minimum_required(VERSION 3.25)
# cmake -DLAYER=<library> -DOWN_DIRS=a|b -DALLOWED_DIRS=a|b|c -DALL_DIRS=... -DSOURCE_DIR=<root>
#       [-DSTAMP=<file>] -P check_layering.cmake
# Fails when a file in OWN_DIRS includes ("...") a header of a layered folder (ALL_DIRS) outside
# ALLOWED_DIRS; includes of other files (system, third party) are not its business.
foreach(var LAYER OWN_DIRS ALLOWED_DIRS ALL_DIRS SOURCE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layering.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" own "${OWN_DIRS}")
string(REPLACE "|" ";" allowed "${ALLOWED_DIRS}")
string(REPLACE "|" ";" all "${ALL_DIRS}")
set(violations)
foreach(dir ${own})
  file(GLOB files ${SOURCE_DIR}/${dir}/*.h ${SOURCE_DIR}/${dir}/*.cpp ${SOURCE_DIR}/${dir}/*.cu
       ${SOURCE_DIR}/${dir}/*.cuh)
  foreach(file ${files})
    file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*$" "\\1" header "${line}")
      get_filename_component(header_dir "${header}" DIRECTORY)
      if(header_dir IN_LIST all AND NOT header_dir IN_LIST allowed)
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
        list(APPEND violations "  ${rel} includes \"${header}\"")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  list(JOIN violations "\n" text)
  list(JOIN allowed ", " allowed_text)
  message(FATAL_ERROR "layering: ${LAYER} includes from a folder it does not depend on:\n"
                      "${text}\n${LAYER} may include only from: ${allowed_text}\n"
                      "(add the library to its DEPS if the dependency is meant, or move the code)")
endif()
if(DEFINED STAMP)
  file(WRITE ${STAMP} "ok\n")
endif()
