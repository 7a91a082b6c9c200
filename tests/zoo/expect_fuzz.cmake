# tests/zoo/expect_fuzz.cmake — runs `attncheck fuzz --kernel-lib LIB --symbol SYMBOL ARGS...` and
# checks its exit code and output: the isolation promise of issue 6 seen from the command line
# (a kernel that segfaults or loops forever is reported as such, and the run goes on to the end).
#
#   cmake -DCLI=... -DLIB=... -DSYMBOL=... -DARGS="--timeout;2" -DWANT_RC=1
#         -DPATTERNS="crashed \\(SIGSEGV;skipped [0-9]+ properties" -P expect_fuzz.cmake
# PATTERNS: CMake regular expressions that must each match the output (a list: an unbalanced
# "\\[" would keep the rest of it from being split at its semicolons, so match "[" with ".").
execute_process(COMMAND ${CLI} fuzz --kernel-lib ${LIB} --symbol ${SYMBOL} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL WANT_RC)
  message(FATAL_ERROR "attncheck fuzz on ${SYMBOL}: exit code ${rc}, expected ${WANT_RC}")
endif()
foreach(pattern IN LISTS PATTERNS)
  if(NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "attncheck fuzz on ${SYMBOL}: the output does not match /${pattern}/")
  endif()
endforeach()
