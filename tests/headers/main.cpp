// The generated translation units (one per public header) are the test: this program only
// links them, so a header that fails to compile alone fails the build.
#include <dcp/dcp.hpp>

int main() { return DCP_VERSION_MAJOR == 0 ? 0 : 1; }
