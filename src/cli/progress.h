// A one-line progress bar on stderr, shown only when stderr is a terminal.
#pragma once
#include <cstdint>
#include <string>

namespace graft::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  void update(int64_t done, int64_t total);

 private:
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

}  // namespace graft::cli
