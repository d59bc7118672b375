#include "graft/io/staged_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "graft/core/error.h"
#include "graft/io/json_file.h"

namespace graft::io {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path, int err) {
  fail_as(ErrorKind::kIo, what, " '", path, "': ", std::strerror(err),
          err == ENOSPC ? " (disk full)" : err == EFBIG ? " (file size limit)" : "");
}

void write_all(int fd, std::string_view content, const std::string& path) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_fail("cannot write", path, errno);
    done += static_cast<size_t>(n);
  }
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) io_fail("cannot flush", path, err);
}

const char* kTmpMarker = ".graft-tmp-";

// Temporary directories of this target left by processes that no longer run (SIGKILL, power loss).
void remove_stale(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  const std::string prefix = "." + name + kTmpMarker;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(n.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(it->path(), ec);
  }
}

}  // namespace

void write_file_checked(const std::string& path, std::string_view content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("cannot create", path, errno);
  try {
    write_all(fd, content, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) io_fail("cannot close", path, errno);
}

StagedDirectory::StagedDirectory(const std::string& target) : target_(target) {
  std::error_code ec;
  if (fs::exists(target_, ec) && (!fs::is_directory(target_, ec) || !fs::is_empty(target_, ec)))
    fail_as(ErrorKind::kBadRequest, "output directory '", target_, "' exists and is not empty; refusing to overwrite");
  fs::path t = fs::absolute(fs::path(target_)).lexically_normal();
  if (!t.has_filename()) t = t.parent_path();  // "out/" -> "out"
  const fs::path parent = t.parent_path();
  if (!fs::is_directory(parent, ec))
    fail_as(ErrorKind::kIo, "output directory '", target_, "': parent '", parent.string(), "' is not a directory");
  remove_stale(parent, t.filename().string());
  tmp_ = (parent / ("." + t.filename().string() + kTmpMarker + std::to_string(::getpid()))).string();
  fs::remove_all(tmp_, ec);  // our own pid: a leftover of a previous process with the same pid
  if (!fs::create_directory(tmp_, ec)) io_fail("cannot create the temporary directory", tmp_, ec.value());
  target_ = t.string();
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedDirectory::write_file(const std::string& name, std::string_view content) const {
  write_file_checked((fs::path(tmp_) / name).string(), content);
}

void StagedDirectory::copy_file(const std::string& from, const std::string& name) const {
  write_file(name, read_regular_file(from, uint64_t{1} << 32, "file"));
}

void StagedDirectory::commit() {
  std::error_code ec;
  for (fs::directory_iterator it(tmp_, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file()) fsync_path(it->path().string(), false);
  if (ec) io_fail("cannot list", tmp_, ec.value());
  fsync_path(tmp_, true);
  // rename(2) replaces an empty directory atomically and fails on a non-empty one, so a target
  // created meanwhile is never overwritten.
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    io_fail("cannot move the finished checkpoint to", target_, errno);
  committed_ = true;
  fsync_path(fs::path(target_).parent_path().string(), true);
}

}  // namespace graft::io
