#include "graft/core/interrupt.h"

#include <csignal>
#include <cstring>

#include "graft/core/error.h"

namespace graft {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void record_signal(int sig) { g_signal = sig; }
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_signal; }

void throw_if_interrupted() {
  if (g_signal) fail_as(ErrorKind::kIo, "interrupted by signal ", int(g_signal), " (", strsignal(g_signal), ")");
}

}  // namespace graft
