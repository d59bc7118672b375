#include "server/metrics.h"

#include <chrono>
#include <filesystem>
#include <sstream>

namespace graft::server {

namespace {

void metric(std::ostringstream& os, const char* name, const char* type, const char* help, double value) {
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
}

std::string adapter_names(const std::vector<int64_t>& ids, const std::vector<engine::AdapterInfo>& adapters) {
  std::string out;
  for (int64_t id : ids) {
    if (!out.empty()) out += ',';
    out += id < static_cast<int64_t>(adapters.size())
               ? std::filesystem::path(adapters[static_cast<size_t>(id)].path).filename().string()
               : std::to_string(id);
  }
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

std::string prometheus_text(const SchedulerStats& s, const std::vector<engine::AdapterInfo>& adapters) {
  std::ostringstream os;
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
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  os << "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"
     << "vllm:lora_requests_info{max_lora=\"" << adapters.size() << "\",running_lora_adapters=\""
     << label_escape(adapter_names(s.running_adapters, adapters)) << "\",waiting_lora_adapters=\""
     << label_escape(adapter_names(s.waiting_adapters, adapters)) << "\"} " << std::fixed << now << '\n';
  os.unsetf(std::ios::fixed);
  metric(os, "graft:batch_steps_mixed_adapters_total", "counter",
         "Batched forward passes whose rows ran under more than one adapter set.", static_cast<double>(s.mixed_steps_total));
  metric(os, "graft:requests_total", "counter", "Requests admitted to a slot.", static_cast<double>(s.requests_total));
  metric(os, "graft:requests_cancelled_total", "counter", "Requests cancelled (client gone, timeout, shutdown).",
         static_cast<double>(s.requests_cancelled));
  os << "# HELP graft:adapter_requests_total Requests admitted with the adapter at a non-zero scale.\n"
     << "# TYPE graft:adapter_requests_total counter\n";
  for (size_t i = 0; i < adapters.size() && i < s.adapter_requests.size(); ++i)
    os << "graft:adapter_requests_total{id=\"" << i << "\",path=\"" << label_escape(adapters[i].path) << "\"} "
       << s.adapter_requests[i] << '\n';
  return os.str();
}

}  // namespace graft::server
