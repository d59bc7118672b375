// A main for the fuzz harnesses without libFuzzer (any compiler): `fuzz_replay HARNESS PATH...` feeds
// every file named on the command line, or found under a directory named there, to that harness once.
// `make test` runs it over the seed corpora and tests/fuzz/regressions/ (crashers found by `make
// fuzz`). All harnesses share this one executable: each is compiled with its LLVMFuzzerTestOneInput
// renamed fuzz_<harness> (tests/CMakeLists.txt), listed in GRAFT_FUZZ_TABLE as H(name)H(name)...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#define H(name) extern "C" int fuzz_##name(const uint8_t* data, size_t size);
GRAFT_FUZZ_TABLE
#undef H

namespace {

using Harness = int (*)(const uint8_t*, size_t);

Harness find_harness(std::string_view name) {
#define H(h) \
  if (name == #h) return fuzz_##h;
  GRAFT_FUZZ_TABLE
#undef H
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const Harness harness = argc > 1 ? find_harness(argv[1]) : nullptr;
  if (!harness) {
    std::fprintf(stderr, "usage: fuzz_replay HARNESS PATH...  (an unknown or missing harness name)\n");
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
    } else if (std::filesystem::exists(p)) {
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), bytes.size());
    harness(bytes.data(), bytes.size());
  }
  std::fprintf(stderr, "replayed %zu inputs\n", files.size());
  return 0;
}
