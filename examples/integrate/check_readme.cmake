# Fails unless README.md shows main() of examples/integrate/main.cpp verbatim (docs are compiled code).
#   -DEXAMPLE=<main.cpp> -DREADME=<README.md>
file(READ "${EXAMPLE}" _example)
file(READ "${README}" _readme)
string(FIND "${_example}" "int main() {" _begin)
string(FIND "${_example}" "\n}\n" _end REVERSE)
if(_begin LESS 0 OR _end LESS _begin)
  message(FATAL_ERROR "check_readme: no `int main() {` ... `}` in ${EXAMPLE}")
endif()
math(EXPR _length "${_end} + 2 - ${_begin}")
string(SUBSTRING "${_example}" ${_begin} ${_length} _main)
string(FIND "${_readme}" "${_main}" _at)
if(_at LESS 0)
  message(FATAL_ERROR "README.md no longer shows main() of examples/integrate/main.cpp verbatim; "
                      "copy it into the section \"Integrate in ten lines\":\n${_main}")
endif()
message("README shows main() of examples/integrate verbatim")
