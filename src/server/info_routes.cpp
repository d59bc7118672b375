// graft serve's routes that answer from the loaded model and the registry without generating:
// health, models, props, tokenize/detokenize, the llama-server adapter list, metrics.
#include <httplib.h>

#include "graft/core/error.h"
#include "graft/core/version.h"
#include "server/metrics.h"
#include "server/response.h"
#include "server/scheduler.h"
#include "server/state.h"

namespace graft::server {

namespace {

int64_t parameter_count(const model::ModelConfig& c) {
  const int64_t H = c.hidden_size, L = c.num_layers;
  int64_t n = c.vocab_size * H * (c.tie_word_embeddings ? 1 : 2) + H;
  n += L * (H * c.q_dim() * 2 + H * c.kv_dim() * 2 + 2 * H);
  for (int64_t l = 0; l < L; ++l)  // a sparse layer: the router and every expert
    n += c.layer_is_sparse(l) ? c.num_experts * (H + 3 * H * c.moe_intermediate_size) : 3 * H * c.intermediate_size;
  return n;
}

}  // namespace

void add_info_routes(httplib::Server& svr, State& st) {
  for (const char* path : {"/health", "/v1/health"})
    st.routes.get(svr, path, [&st](const httplib::Request&, httplib::Response& res) {
      if (!st.ready) return send_error(res, api_error(503, "unavailable_error", "Loading model"));
      send_json(res, 200, json{{"status", "ok"}});
    });
  for (const char* path : {"/v1/models", "/models"})
    st.routes.get(svr, path, [&st](const httplib::Request&, httplib::Response& res) {
      const auto& m = st.engine->model();
      int64_t bytes = m.weights.lm_head.nbytes() + m.weights.embed.nbytes();
      for (const auto& L : m.weights.layers)
        for (const model::Matrix* t : L.matrices()) bytes += t->nbytes();
      json meta{{"vocab_type", 2},
                {"n_vocab", m.config.vocab_size},
                {"n_ctx", st.slot_ctx},
                {"n_ctx_train", m.config.max_position_embeddings},
                {"n_embd", m.config.hidden_size},
                {"n_params", parameter_count(m.config)},
                {"size", bytes}};
      json entry{{"id", st.model_name}, {"object", "model"}, {"created", st.created}, {"owned_by", "llamacpp"},
                 {"root", st.model_path}, {"parent", nullptr}, {"meta", meta}};
      json data = json::array({entry});
      for (auto& a : adapter_model_entries(st)) data.push_back(std::move(a));
      send_json(res, 200, json{{"object", "list"}, {"data", data}});
    });

  st.routes.get(svr, "/props", [&st](const httplib::Request&, httplib::Response& res) {
    json params{{"n_predict", -1}, {"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.05},
                {"repeat_penalty", 1.0}, {"repeat_last_n", 64}, {"seed", -1}, {"cache_prompt", true}};
    send_json(res, 200,
              json{{"default_generation_settings", json{{"n_ctx", st.slot_ctx}, {"params", params}}},
                   {"total_slots", st.scheduler->options().parallel},
                   {"cache_type", std::string(runtime::kv_cache_type_name(st.scheduler->options().cache_type))},
                   {"lora_dtype", st.lora_dtype},
                   {"activations", st.activations},
                   {"model_alias", st.model_name},
                   {"model_path", st.model_path},
                   {"chat_template", st.chat ? st.chat->source() : std::string()},
                   {"modalities", json{{"vision", false}, {"audio", false}}},
                   {"build_info", std::string("graft ") + kVersion}});
  });
  // vLLM's route (routers such as SMG probe it to recognize an OpenAI-compatible engine).
  st.routes.get(svr, "/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, json{{"version", kVersion}});
  });

  st.routes.post(svr, "/tokenize", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_object() || !b.contains("content") || !b["content"].is_string())
        fail_as(ErrorKind::kBadRequest, "field 'content' must be a string");
      auto flag = [&](const char* f, bool d) {
        if (!b.contains(f)) return d;
        if (!b[f].is_boolean()) fail_as(ErrorKind::kBadRequest, "field '", f, "' must be true or false");
        return b[f].get<bool>();
      };
      const auto& tok = st.engine->tokenizer();
      const auto ids = tok.encode(b["content"].get<std::string>(), flag("parse_special", true), flag("add_special", false));
      if (!flag("with_pieces", false)) return send_json(res, 200, json{{"tokens", ids}});
      json out = json::array();
      for (int32_t id : ids) {
        const std::string piece = tok.token_bytes(id);
        json p = json::array();
        bool utf8 = true;
        try {
          (void)json(piece).dump();
        } catch (const json::type_error&) {
          utf8 = false;
        }
        if (utf8) {
          p = piece;
        } else {
          for (unsigned char c : piece) p.push_back(static_cast<int>(c));
        }
        out.push_back(json{{"id", id}, {"piece", p}});
      }
      send_json(res, 200, json{{"tokens", out}});
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    }
  });

  st.routes.post(svr, "/detokenize", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
        fail_as(ErrorKind::kBadRequest, "field 'tokens' must be an array of token ids");
      const auto& tok = st.engine->tokenizer();
      std::vector<int32_t> ids;
      for (const auto& v : b["tokens"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size())
          fail_as(ErrorKind::kBadRequest, "field 'tokens': ", truncated(v.dump()), " is not a token id in [0, ",
                  tok.vocab_size(), ")");
        ids.push_back(v.get<int32_t>());
      }
      send_json(res, 200, json{{"content", tok.decode(ids)}});
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    }
  });

  st.routes.get(svr, "/lora-adapters", [&st](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (const auto& a : st.engine->adapters().list())
      out.push_back(json{{"id", a.id}, {"name", a.name}, {"path", a.path}, {"scale", a.scale},
                         {"task_name", a.task_name}, {"prompt_prefix", a.prompt_prefix},
                         {"generation", a.generation}, {"resident", a.resident}, {"rank", a.rank},
                         {"bytes", a.bytes}, {"digest", "sha256:" + engine::digest_hex(a.content_digest)}});
    send_json(res, 200, out);
  });
  st.routes.post(svr, "/lora-adapters", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_array()) fail_as(ErrorKind::kBadRequest, "Request body must be an array");
      st.engine->adapters().set_defaults(parse_lora_list(b, "lora-adapters"));
      send_json(res, 200, json{{"success", true}});
    } catch (const std::exception& e) {
      send_error(res, registry_error(e));
    }
  });

  st.routes.get(svr, "/metrics", [&st](const httplib::Request&, httplib::Response& res) {
    if (!st.opts.metrics)
      return send_error(res, api_error(501, "not_supported_error",
                                       "This server does not support metrics endpoint. Start it with `--metrics`"));
    const auto& reg = st.engine->adapters();
    const int64_t max_lora = reg.limits().max_adapters > 0 ? reg.limits().max_adapters : st.opts.parallel;
    res.set_content(prometheus_text(st.scheduler->stats(), reg.list(), reg.stats(), max_lora),
                    "text/plain; version=0.0.4");
  });
}

}  // namespace graft::server
