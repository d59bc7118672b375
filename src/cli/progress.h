// A one-line progress bar on stderr, shown only when stderr is a terminal and the work has taken
// over a second (quick steps do not flicker a bar; GRAFT_PROGRESS_AFTER_MS changes the second, for tests).
#pragma once
#include <chrono>
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
  std::chrono::steady_clock::time_point show_after_;
};

}  // namespace graft::cli
