#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace graft::cli {

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) != 0) {
  static const long after_ms = [] {
    const char* e = std::getenv("GRAFT_PROGRESS_AFTER_MS");
    return e ? std::max(0L, std::atol(e)) : 1000L;
  }();
  show_after_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(after_ms);
}

ProgressBar::~ProgressBar() {
  if (enabled_ && last_percent_ >= 0) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  if (last_percent_ < 0 && std::chrono::steady_clock::now() < show_after_) return;
  const int percent = static_cast<int>(100 * done / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled, "##############################",
               kWidth - filled, "", percent);
  std::fflush(stderr);
}

}  // namespace graft::cli
