// A source that shows parts of stored tensors under names of their own: each part a zero-copy
// view of a contiguous run of the stored bytes (any dtype; GGUF blocks too, as long as a part holds
// whole blocks). The model layer builds its tables: Phi-3's fused qkv_proj / gate_up_proj split
// into Llama's per-projection rows (model/fused_projections.h), mlx-lm's stacked experts shown
// as the Hub's per-expert tensors (model/stacked_experts.h).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "graft/io/tensor_source.h"

namespace graft::io {

// Entries [first, first + count) of the stored tensor's leading dimension; with `squeeze` (count 1)
// that dimension is dropped: entry `first` of a stacked [N, ...] tensor as a tensor of its own.
struct TensorSlice {
  std::string stored;
  int64_t first = 0, count = 1;
  bool squeeze = false;

  static TensorSlice rows(std::string stored, int64_t first, int64_t count) {
    return {std::move(stored), first, count, false};
  }
  static TensorSlice entry(std::string stored, int64_t index) { return {std::move(stored), index, 1, true}; }
};

// `base` with every name of `slices` added as its slice, and the stored tensors they slice hidden
// (absent from names() and info(); read() of one fails naming it, "(<hidden_note>)" after the
// name). A slice's name shadows a stored tensor of the same name. Releasing a slice releases its
// stored tensor once every slice of it has been released: the stored pages back all of them.
// The caller checks the slices against the stored shapes.
std::shared_ptr<TensorSource> make_sliced_source(std::shared_ptr<TensorSource> base,
                                                 std::map<std::string, TensorSlice> slices, std::string hidden_note);

}  // namespace graft::io
