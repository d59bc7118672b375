// Prometheus text for GET /metrics: llama-server's `llamacpp:` families, the gauges scale-out
// routers read (`vllm:num_requests_*`, `vllm:kv_cache_usage_perc`, `vllm:lora_requests_info`,
// `vllm:cache_config_info`), and graft's own counters (mixed-adapter steps, requests per adapter).
#pragma once
#include <string>
#include <vector>

#include "graft/engine/adapter_registry.h"
#include "server/scheduler.h"

namespace graft::server {

// max_lora: the most adapters resident at once (--max-loras-resident, else --parallel).
std::string prometheus_text(const SchedulerStats& s, const std::vector<engine::AdapterInfo>& adapters,
                            const engine::RegistryStats& registry, int64_t max_lora);

}  // namespace graft::server
