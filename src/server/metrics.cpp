#include "server/metrics.h"

#include "graft/engine/adapter_registry.h"

#include <chrono>
#include <iomanip>
#include <sstream>

namespace graft::server {

namespace {

void metric(std::ostringstream& os, const char* name, const char* type, const char* help, double value) {
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::string label_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string prometheus_text(const SchedulerStats& s, const std::vector<engine::AdapterInfo>& adapters,
                            const engine::RegistryStats& r, int64_t max_lora) {
  std::ostringstream os;
  os.precision(15);  // counters stay exact far beyond a million
  metric(os, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         static_cast<double>(s.prompt_tokens_total));
  metric(os, "llamacpp:prompt_seconds_total", "counter", "Prompt process time", s.prompt_seconds_total);
  metric(os, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
         static_cast<double>(s.predicted_tokens_total));
  metric(os, "llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", s.predicted_seconds_total);
  metric(os, "llamacpp:n_decode_total", "counter", "Total number of batched forward passes.",
         static_cast<double>(s.steps_total));
  metric(os, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         s.prompt_seconds_total > 0 ? static_cast<double>(s.prompt_tokens_total) / s.prompt_seconds_total : 0.0);
  metric(os, "llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         s.predicted_seconds_total > 0 ? static_cast<double>(s.predicted_tokens_total) / s.predicted_seconds_total : 0.0);
  const double usage = s.kv_capacity > 0 ? static_cast<double>(s.kv_tokens) / static_cast<double>(s.kv_capacity) : 0.0;
  metric(os, "llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage);
  metric(os, "llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", static_cast<double>(s.kv_tokens));
  metric(os, "llamacpp:requests_processing", "gauge", "Number of requests processing.", static_cast<double>(s.processing));
  metric(os, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", static_cast<double>(s.deferred));
  metric(os, "llamacpp:n_tokens_max", "counter", "Largest observed n_tokens.", static_cast<double>(s.n_tokens_max));
  // What Gateway API Inference Extension / llm-d routers read (vLLM names).
  metric(os, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         static_cast<double>(s.processing));
  metric(os, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         static_cast<double>(s.deferred));
  metric(os, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage);
  // The block size KV events (--kv-events) report and the slots' capacity in such blocks: llm-d's
  // prefix-cache scorer reads both from here (vLLM's info gauge, value 1).
  os << "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"
     << "vllm:cache_config_info{block_size=\"" << s.kv_block_size << "\",enable_prefix_caching=\"True\",num_gpu_blocks=\""
     << (s.kv_block_size > 0 ? s.kv_capacity / s.kv_block_size : 0) << "\"} 1\n";
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  os << "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"
     << "vllm:lora_requests_info{max_lora=\"" << max_lora << "\",running_lora_adapters=\""
     << label_escape(joined(s.running_adapters)) << "\",waiting_lora_adapters=\""
     << label_escape(joined(s.waiting_adapters)) << "\"} " << std::fixed << std::setprecision(3) << now << '\n';
  os.unsetf(std::ios::fixed);
  os.precision(15);
  // Residency in the shape of vLLM PR #54830, its tier names kept so routers' scorers read it
  // unchanged: "gpu" = terms built, runs now; "cpu" = registered, files mapped, built on use.
  int64_t built = 0;
  os << "# HELP vllm:lora_adapter_loaded Registered LoRA adapters by residency level.\n"
     << "# TYPE vllm:lora_adapter_loaded gauge\n";
  for (const auto& a : adapters) {
    built += a.resident ? 1 : 0;
    os << "vllm:lora_adapter_loaded{adapter_name=\"" << label_escape(a.name) << "\",level=\""
       << (a.resident ? "gpu" : "cpu") << "\",pinned=\"" << (a.pinned ? "true" : "false") << "\",rank=\"" << a.rank
       << "\"} 1\n";
  }
  metric(os, "vllm:num_gpu_loaded_lora_adapters", "gauge", "LoRA adapters with their terms built (resident).",
         static_cast<double>(built));
  metric(os, "vllm:num_cpu_loaded_lora_adapters", "gauge",
         "LoRA adapters registered with their files mapped, terms not built.",
         static_cast<double>(static_cast<int64_t>(adapters.size()) - built));
  metric(os, "vllm:max_gpu_lora_adapters", "gauge", "Most adapters resident at once (--max-loras-resident, else --parallel).",
         static_cast<double>(max_lora));
  os << "# HELP vllm:lora_adapter_load_seconds Time to build an adapter's terms (read, bind, check, convert).\n"
     << "# TYPE vllm:lora_adapter_load_seconds histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b < engine::RegistryStats::kLoadBuckets.size(); ++b) {
    cumulative += r.load_buckets[b];
    os << "vllm:lora_adapter_load_seconds_bucket{le=\"" << engine::RegistryStats::kLoadBuckets[b] << "\"} "
       << cumulative << '\n';
  }
  os << "vllm:lora_adapter_load_seconds_bucket{le=\"+Inf\"} " << r.load_count << '\n'
     << "vllm:lora_adapter_load_seconds_sum " << r.load_seconds_sum << '\n'
     << "vllm:lora_adapter_load_seconds_count " << r.load_count << '\n';
  metric(os, "graft:requests_waiting_for_adapter", "gauge",
         "Queued requests whose adapters are being built (part of vllm:num_requests_waiting).",
         static_cast<double>(s.waiting_for_adapter));
  metric(os, "graft:lora_adapters_registered", "gauge", "LoRA adapters registered.", static_cast<double>(adapters.size()));
  metric(os, "graft:lora_adapter_resident_bytes", "gauge", "Bytes of the resident adapters' built terms.",
         static_cast<double>(r.resident_bytes));
  metric(os, "graft:lora_adapter_loads_total", "counter", "Adapter term builds (registrations and rebuilds).",
         static_cast<double>(r.loads));
  metric(os, "graft:lora_adapter_evictions_total", "counter", "Resident adapters dropped by the residency budget.",
         static_cast<double>(r.evictions));
  const auto per_adapter = [&](const char* name, const char* help, int64_t SchedulerStats::AdapterCounters::*field) {
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n";
    for (const auto& a : adapters) {
      auto it = s.adapters.find(a.id);
      os << name << "{adapter_name=\"" << label_escape(a.name) << "\"} " << (it == s.adapters.end() ? 0 : it->second.*field)
         << '\n';
    }
  };
  per_adapter("graft:lora_adapter_requests_total", "Requests admitted with the adapter at a non-zero scale.",
              &SchedulerStats::AdapterCounters::requests);
  per_adapter("graft:lora_adapter_prompt_tokens_total", "Prompt tokens evaluated under the adapter.",
              &SchedulerStats::AdapterCounters::prompt_tokens);
  per_adapter("graft:lora_adapter_generation_tokens_total", "Tokens generated under the adapter.",
              &SchedulerStats::AdapterCounters::generation_tokens);
  metric(os, "graft:batch_steps_mixed_adapters_total", "counter",
         "Batched forward passes whose rows ran under more than one adapter set.", static_cast<double>(s.mixed_steps_total));
  metric(os, "graft:requests_total", "counter", "Requests admitted to a slot.", static_cast<double>(s.requests_total));
  metric(os, "graft:requests_cancelled_total", "counter", "Requests cancelled (client gone, timeout, shutdown).",
         static_cast<double>(s.requests_cancelled));
  os << "# HELP graft:adapter_requests_total Requests admitted with the adapter at a non-zero scale.\n"
     << "# TYPE graft:adapter_requests_total counter\n";
  for (const auto& a : adapters) {
    auto it = s.adapters.find(a.id);
    os << "graft:adapter_requests_total{id=\"" << a.id << "\",path=\"" << label_escape(a.path) << "\"} "
       << (it == s.adapters.end() ? 0 : it->second.requests) << '\n';
  }
  return os.str();
}

}  // namespace graft::server
