// The generated translation units (one per public header) are the test: this program only
// links them, so a header that fails to compile alone fails the build. It also ties the version
// macros of <dcp/config.hpp> to the version CMake installs in dcpConfigVersion.cmake.
#include <dcp/dcp.hpp>

#include <cstdio>

static_assert(DCP_VERSION_MAJOR == DCP_PROJECT_VERSION_MAJOR && DCP_VERSION_MINOR == DCP_PROJECT_VERSION_MINOR &&
                  DCP_VERSION_PATCH == DCP_PROJECT_VERSION_PATCH,
              "<dcp/config.hpp> and CMake's project(VERSION) disagree; the version is read from config.hpp");

int main() {
  std::printf("dcp %d.%d.%d: every public header compiles alone\n", DCP_VERSION_MAJOR, DCP_VERSION_MINOR,
              DCP_VERSION_PATCH);
  return 0;
}
