#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "tools/command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  cachepawl::tools::CommandIo io{std::cin, std::cout, std::cerr, isatty(STDOUT_FILENO) == 1};
  return cachepawl::tools::RunCommandLine(args, io);
}
