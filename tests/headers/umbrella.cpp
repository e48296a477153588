// Compiled with clang++ -fsyntax-only by the headers.umbrella_clang test.
#include <dcp/dcp.hpp>

int main() { return 0; }
