#include "graft/core/huge_pages.h"

#include <sys/mman.h>

#include <mutex>
#include <new>

namespace graft {

namespace {

constexpr size_t kHuge = size_t{2} << 20;

// A whole number of huge pages, 2 MiB-aligned: over-allocate by one, keep the aligned middle.
std::shared_ptr<uint8_t[]> huge_region(size_t bytes) {
  const size_t len = (bytes + kHuge - 1) / kHuge * kHuge;
  void* raw = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto lo = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t at = (lo + kHuge - 1) / kHuge * kHuge;
  if (at > lo) munmap(raw, at - lo);
  if (const size_t tail = lo + len + kHuge - (at + len); tail > 0) munmap(reinterpret_cast<void*>(at + len), tail);
  void* mem = reinterpret_cast<void*>(at);
  // Advisory: without THP the pages stay 4 KiB. Not populated here (MADV_POPULATE_WRITE): the
  // kernel zeroes each page on first write, so the threads filling a buffer zero its pages in
  // parallel; populating zeroed them all on the one allocating thread (a fifth of a MoE file's load).
  madvise(mem, len, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(mem), [len](uint8_t* p) { munmap(p, len); });
}

}  // namespace

std::shared_ptr<uint8_t[]> huge_page_buffer(size_t bytes) {
  bytes = bytes == 0 ? 1 : bytes;
  if (bytes >= kHuge / 2) return huge_region(bytes);
  // Small matrices (a small model's projections) share 32 MiB regions, carved in 4 KiB steps and
  // never reused: each buffer holds its region, which is unmapped when the last of them goes.
  constexpr size_t kRegion = size_t{32} << 20, kStep = 4096;
  static std::mutex mu;
  static std::shared_ptr<uint8_t[]> region;
  static size_t used = kRegion;
  std::lock_guard<std::mutex> lock(mu);
  if (used + bytes > kRegion) {
    region = huge_region(kRegion);
    used = 0;
  }
  uint8_t* p = region.get() + used;
  used += (bytes + kStep - 1) / kStep * kStep;
  return std::shared_ptr<uint8_t[]>(region, p);
}

}  // namespace graft
