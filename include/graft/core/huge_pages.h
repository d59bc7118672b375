// Anonymous memory for the matrices decode streams (the interleaved copies, --no-mmap copies): on
// 2 MiB transparent huge pages where the kernel allows (MADV_HUGEPAGE, which the common
// `enabled=madvise` setting requires), each page zeroed by the kernel where it is first written. A
// decode step reads every weight byte once; on 4 KiB pages that is a TLB miss every 4 KiB and a
// hardware prefetcher that stops at each page.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace graft {

// A zeroed, writable buffer of `bytes` on huge pages: its own 2 MiB-aligned region from 1 MiB up,
// else a 4 KiB-aligned slice of a shared 32 MiB region (a huge page each would waste most of it).
// Thread-safe. Throws bad_alloc.
std::shared_ptr<uint8_t[]> huge_page_buffer(size_t bytes);

}  // namespace graft
