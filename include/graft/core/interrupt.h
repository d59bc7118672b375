// Cooperative interruption: a command that writes files (fuse, quantize) installs handlers for
// SIGINT and SIGTERM that only record the signal; the writer checks between tensors and throws,
// so unwinding removes its temporary directory and the command exits with 128 + the signal.
#pragma once

namespace graft {

// Installs the recording handlers for SIGINT and SIGTERM (idempotent).
void install_interrupt_handlers();
// The signal received since installation, or 0.
int interrupt_signal();
// Throws a graft::Error (kIo) naming the signal if one was received.
void throw_if_interrupted();

}  // namespace graft
