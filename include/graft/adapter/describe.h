// Machine-readable summaries of adapters and bind plans (what `graft inspect` prints).
#pragma once
#include <nlohmann/json.hpp>

#include "graft/adapter/bind.h"
#include "graft/adapter/weight_adapter.h"

namespace graft::adapter {

// {format, path, summary: {targets, kinds: {kind: count}, ranks, scales, dtypes, modules (last name
// components), layers: [first, last, count]?}, metadata (values typed: numbers, booleans, lists),
// size_bytes, targets: [{module, param, kind, rank, scale, dtype, delta_shape, keys}] in natural
// order (layers.2 before layers.10)}
nlohmann::json describe_adapter(const WeightAdapter& a);
// {tensors: [{tensor, updates: [{adapter, module, kind, rows: [src, dst, n], strength}]}]}
nlohmann::json describe_plan(const WeightAdapterPlan& plan);

}  // namespace graft::adapter
