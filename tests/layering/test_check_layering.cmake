# cmake -DCHECKER=<cmake/check_layering.cmake> -DWORK=<scratch dir> -P test_check_layering.cmake
# The layering check refuses an upward include (megatron/core including megatron/training),
# names the file and the header, and accepts includes from the folders a library depends on.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/megatron/core ${WORK}/megatron/training)
file(WRITE ${WORK}/megatron/core/tensor.h "#pragma once\n#include <vector>\n")
file(WRITE ${WORK}/megatron/training/trainer.h "#pragma once\n#include \"megatron/core/tensor.h\"\n")
set(common -DALL_DIRS=megatron/core|megatron/training -DSOURCE_DIR=${WORK})

function(run_check layer own allowed out_rc out_text)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DLAYER=${layer} -DOWN_DIRS=${own} -DALLOWED_DIRS=${allowed}
            ${common} -P ${CHECKER}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

# Downward includes pass.
run_check(megatron_training megatron/training "megatron/training|megatron/core" rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a downward include was refused:\n${text}")
endif()
run_check(megatron_core megatron/core megatron/core rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a layer without foreign includes was refused:\n${text}")
endif()

# An upward include fails, naming the file, the header and what the layer may use.
file(WRITE ${WORK}/megatron/core/error.cpp "#include \"megatron/training/trainer.h\"\n")
run_check(megatron_core megatron/core megatron/core rc text)
if(rc EQUAL 0)
  message(FATAL_ERROR "megatron/core including megatron/training passed the check")
endif()
foreach(expected "megatron/core/error.cpp includes \"megatron/training/trainer.h\""
                 "megatron_core may include only from: megatron/core")
  string(FIND "${text}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the refusal does not say '${expected}':\n${text}")
  endif()
endforeach()
message(STATUS "layering check: downward includes pass, the upward one is refused")
