// A main() for a fuzz target's source in the ordinary builds (any compiler, no libFuzzer): feeds
// every file of the folders (or the files) named on the command line to LLVMFuzzerTestOneInput,
// in name order, so each target's seed corpus and every input a fuzzer ever crashed on run as a
// CTest test under the plain, ASan and TSan builds.
//
//   fuzz_<name>_replay [--optional] PATH...   (a path after --optional may be missing)
//
// A missing required path, an unreadable file, an empty folder of required inputs or a
// LLVMFuzzerTestOneInput that returns non-zero fails (exit 1); a crash is the target's own
// abort. Prints how many inputs of each path ran.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool RunFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  // A copy of exactly `size` bytes on the heap, as libFuzzer passes it: reading past it is
  // caught by ASan here too.
  const std::vector<uint8_t> data(bytes.begin(), bytes.end());
  if (LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size()) != 0) {
    std::fprintf(stderr, "replay: %s: LLVMFuzzerTestOneInput returned non-zero\n", path.c_str());
    return false;
  }
  return true;
}

// Runs every regular file under `path` (or `path` itself); the number run, or -1 on failure.
long RunPath(const fs::path& path, bool optional) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (optional) return 0;
    std::fprintf(stderr, "replay: %s does not exist\n", path.c_str());
    return -1;
  }
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  if (files.empty() && !optional) {
    std::fprintf(stderr, "replay: %s holds no inputs\n", path.c_str());
    return -1;
  }
  for (const fs::path& f : files) {
    if (!RunFile(f)) return -1;
  }
  return static_cast<long>(files.size());
}

}  // namespace

int main(int argc, char** argv) {
  bool optional = false;
  int paths = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--optional") {
      optional = true;
      continue;
    }
    const long n = RunPath(arg, optional);
    if (n < 0) return 1;
    std::printf("replay: %ld inputs from %s\n", n, arg.c_str());
    ++paths;
  }
  if (paths == 0) {
    std::fprintf(stderr, "usage: %s [--optional] PATH...\n", argv[0]);
    return 1;
  }
  return 0;
}
