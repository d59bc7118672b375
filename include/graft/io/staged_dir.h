// Whole-directory atomic writes: a checkpoint is written into a temporary directory beside its
// target (".NAME.graft-tmp-PID"), every file checked and fsynced, then renamed into place, so the
// target path holds either nothing or a complete checkpoint, whatever happens (errors, a full
// disk, SIGINT/SIGTERM via graft/core/interrupt.h, SIGKILL: then only the temporary directory is
// left, and the next run on the same target removes it once its process is gone).
#pragma once
#include <string>
#include <string_view>

namespace graft::io {

class StagedDirectory {
 public:
  // Refuses a target that exists and is not an empty directory (kBadRequest). Creates the
  // temporary directory (kIo on failure) after removing stale ones left by dead processes.
  explicit StagedDirectory(const std::string& target);
  // Removes the temporary directory unless committed.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write the files.
  const std::string& path() const { return tmp_; }
  // Writes `content` to path()/name; every byte checked (kIo: disk full, file too large).
  void write_file(const std::string& name, std::string_view content) const;
  // Copies a regular file into path()/name, checked as above.
  void copy_file(const std::string& from, const std::string& name) const;
  // fsyncs every file and the directory, renames it to the target, fsyncs the parent.
  void commit();

 private:
  std::string target_, tmp_;
  bool committed_ = false;
};

// Writes a whole file, checking every write and the close (kIo naming the file on failure).
void write_file_checked(const std::string& path, std::string_view content);

}  // namespace graft::io
