// Shared pieces of the libFuzzer harnesses: inputs written where graft's readers expect files (an
// anonymous memory file, or a scratch directory for adapter layouts), and the one rule every
// harness checks: a graft::Error is a correct answer to a bad input; anything else escaping (a
// foreign exception) is a finding, so it aborts and the fuzzer reports it.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graft/core/error.h"

namespace graft::fuzz {

// The input as an unnamed in-memory file, opened by path (/proc/self/fd/N) like any file.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("graft-fuzz", 0)) {
    if (fd_ < 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// A scratch directory (removed afterwards) for readers that take a directory or need a file name.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = std::string(base) + "/graft-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Several files in one input: parts separated by this marker (absent from JSON text).
constexpr std::string_view kPartMarker{"\0GRAFT-PART\0", 12};

inline std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = rest.find(kPartMarker);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartMarker.size());
  }
  parts.push_back(rest);
  while (parts.size() < max_parts) parts.emplace_back();
  return parts;
}

// Runs fn; a graft::Error is the expected refusal of a bad input. Anything else aborts.
// GRAFT_FUZZ_VERBOSE=1 prints each outcome (to check that seeds reach deep code).
template <typename Fn>
void expect_graft_errors_only(Fn&& fn) {
  static const bool verbose = std::getenv("GRAFT_FUZZ_VERBOSE") != nullptr;
  try {
    fn();
    if (verbose) std::fprintf(stderr, "  accepted\n");
  } catch (const graft::Error& e) {
    if (verbose) std::fprintf(stderr, "  refused: %.300s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "foreign exception escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace graft::fuzz
