// graft serve: embeddings (with --embeddings). POST /v1/embeddings answers in OpenAI's shape;
// /embedding and /embeddings in llama-server's native one. Each input is its own job through the
// scheduler, so inputs and completions share batching steps and an input's tokens are chunked by
// --batch-size like any prompt (decoding rows always run: a long input never stalls generation).
// The hidden states come back whole; pooling and normalization run here, on the HTTP thread.
#include <bit>
#include <chrono>
#include <cstring>

#include "graft/core/error.h"
#include "graft/engine/embedding.h"
#include "server/state.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::string> fields;  // each input's name in errors: "input" or "input[i]"
  std::string model;
  bool base64 = false;
  int normalize = 2;  // llama.cpp's embd_normalize (2: Euclidean)
  std::optional<std::vector<engine::ScaleEntry>> lora;
};

std::vector<int32_t> token_ids(const json& v, const std::string& field, const text::Tokenizer& tok) {
  std::vector<int32_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer()) bad_field(field, "a string or an array of token ids");
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size())
      fail_as(ErrorKind::kBadRequest, "field '", field, "': token id ", id, " is out of range [0, ", tok.vocab_size(), ")");
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// OpenAI's four input forms: a string, an array of strings, an array of token ids, an array of
// arrays of token ids (strings and arrays may mix in the outer array). Text is tokenized as a
// completion prompt is (special tokens parsed, BOS as the model adds it).
EmbeddingRequest parse_embedding_request(const json& b, bool oai, const text::Tokenizer& tok, int64_t dim) {
  if (!b.is_object()) fail_as(ErrorKind::kBadRequest, "the request body must be a JSON object");
  EmbeddingRequest r;
  const char* name = "input";
  const json* in = find_field(b, "input");
  if (!in && !oai && find_field(b, "content")) in = find_field(b, name = "content");  // llama-server's field
  if (!in) fail_as(ErrorKind::kBadRequest, "field '", name, "' is required");
  auto one = [&](const json& v, const std::string& field) {
    if (v.is_string()) return tok.encode(v.get<std::string>(), /*parse_special=*/true);
    if (v.is_array()) return token_ids(v, field, tok);
    bad_field(field, "a string or an array of token ids");
  };
  const bool flat_ids = in->is_array() && !in->empty() && (*in)[0].is_number();
  if (in->is_string() || flat_ids) {
    r.inputs.push_back(one(*in, name));
    r.fields.push_back(name);
  } else if (in->is_array()) {
    if (in->empty()) bad_field(name, "a string or a non-empty array of inputs");
    for (size_t i = 0; i < in->size(); ++i) {
      const std::string f = std::string(name) + "[" + std::to_string(i) + "]";
      r.inputs.push_back(one((*in)[i], f));
      r.fields.push_back(f);
    }
  } else {
    bad_field(name, "a string, an array of strings, an array of token ids or an array of such arrays");
  }
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (r.inputs[i].empty()) fail_as(ErrorKind::kBadRequest, "field '", r.fields[i], "' is empty (no tokens)");
  if (const json* m = find_field(b, "model"); m && m->is_string()) r.model = m->get<std::string>();
  if (const json* f = find_field(b, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) bad_field("encoding_format", "\"float\" or \"base64\"");
    r.base64 = *f == "base64";
  }
  // OpenAI's `dimensions` shortens embeddings of models trained for it (Matryoshka); a decoder's
  // hidden state cut short is not such an embedding, so only the full size is accepted.
  if (find_field(b, "dimensions") && integer_field(b, "dimensions", dim, 1, INT64_MAX) != dim)
    bad_field("dimensions", "the model's embedding size " + std::to_string(dim) + " (graft does not shorten embeddings)");
  r.normalize = static_cast<int>(integer_field(b, "embd_normalize", 2, -1, 1 << 20));
  if (const json* l = find_field(b, "lora")) r.lora = parse_lora_list(*l, "lora");
  return r;
}

std::string base64_floats(const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little, "OpenAI's base64 embeddings are little-endian float32");
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? abc[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

void handle_embeddings(State& st, bool oai, const httplib::Request& http, httplib::Response& res) {
  if (!st.opts.embeddings)
    return send_error(res, api_error(501, "not_supported_error",
                                     "This server does not support embeddings. Start it with `--embeddings`"));
  // llama-server's rule and words: per-token vectors have no place in OpenAI's shape.
  if (oai && st.pooling == engine::Pooling::None)
    return send_error(res, api_error(400, "invalid_request_error",
                                     "Pooling type 'none' is not OAI compatible. Please use a different pooling type"));
  engine::Engine& eng = *st.engine;
  const int64_t dim = eng.model().config.hidden_size;
  EmbeddingRequest req;
  try {
    req = parse_embedding_request(parse_body(http), oai, eng.tokenizer(), dim);
  } catch (const std::exception& e) {
    return send_error(res, api_error(e));
  }
  for (size_t i = 0; i < req.inputs.size(); ++i)
    if (static_cast<int64_t>(req.inputs[i].size()) > st.slot_ctx)
      return send_error(res, api_error(400, "exceed_context_size_error",
                                       "field '" + req.fields[i] + "' has " + std::to_string(req.inputs[i].size()) +
                                           " tokens, more than the context size of a slot (" +
                                           std::to_string(st.slot_ctx) + " tokens); raise --ctx-size or shorten it"));
  engine::Selection adapters;
  try {
    adapters = eng.adapters().select(model_adapter(st, req.model), req.lora);
  } catch (const std::exception& e) {
    return send_error(res, registry_error(e));
  }
  auto channel = std::make_shared<JobChannel>();
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(st.opts.timeout_s * 1e3));
  std::vector<std::shared_ptr<CompletionJob>> jobs;
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    auto j = std::make_shared<CompletionJob>();
    j->prompt = std::move(req.inputs[i]);
    j->params.embedding = true;
    j->params.max_tokens = 0;
    j->adapters = adapters;
    j->cache_prompt = false;
    j->deadline = deadline;
    j->index = static_cast<int>(i);
    j->channel = channel;
    jobs.push_back(std::move(j));
  }
  auto cancel_all = [&] {
    for (auto& j : jobs) j->cancelled = true;
  };
  // At most --parallel inputs of this request in the scheduler at once: a long input list takes
  // turns instead of filling the queue that other requests need.
  const size_t window = static_cast<size_t>(std::max(1, st.scheduler->options().parallel));
  std::vector<std::vector<float>> hidden(jobs.size());
  int64_t prompt_tokens = 0;
  size_t submitted = 0, finals = 0;
  while (finals < jobs.size()) {
    while (submitted < jobs.size() && submitted - finals < window) {
      try {
        st.scheduler->submit(jobs[submitted]);
      } catch (const std::exception& e) {
        cancel_all();
        return send_error(res, api_error(e));
      }
      ++submitted;
    }
    JobEvent e;
    if (!channel->pop(e, std::chrono::milliseconds(100)) || !e.final) continue;
    ++finals;
    if (e.failed) {
      cancel_all();
      return send_error(res, api_error(Error(e.error, e.error_kind)));
    }
    prompt_tokens += e.prompt_tokens;
    hidden.at(static_cast<size_t>(e.index)) = std::move(e.hidden);
  }

  const std::string model = req.model.empty() ? st.model_name : req.model;
  json data = json::array();
  try {
    for (size_t i = 0; i < hidden.size(); ++i) {
      if (hidden[i].empty()) fail_as(ErrorKind::kInternal, "input ", i, " came back without hidden states");
      std::vector<float> v = engine::pool_rows(hidden[i], dim, st.pooling);
      if (st.pooling != engine::Pooling::None) engine::normalize_embedding(v, req.normalize);  // llama-server's rule
      if (oai) {
        json emb = req.base64 ? json(base64_floats(v)) : json(v);
        data.push_back(json{{"object", "embedding"}, {"index", i}, {"embedding", std::move(emb)}});
      } else {
        // llama-server's native shape: a list of vectors, one (pooled) or one per token (none).
        json rows = json::array();
        for (size_t r = 0; r < v.size(); r += static_cast<size_t>(dim))
          rows.push_back(std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(r),
                                            v.begin() + static_cast<std::ptrdiff_t>(r + static_cast<size_t>(dim))));
        data.push_back(json{{"index", i}, {"embedding", std::move(rows)}});
      }
    }
  } catch (const std::exception& e) {
    return send_error(res, api_error(e));
  }
  if (!oai) return send_json(res, 200, data);
  send_json(res, 200,
            json{{"object", "list"},
                 {"data", std::move(data)},
                 {"model", model},
                 {"usage", json{{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace

void add_embedding_routes(httplib::Server& svr, State& st) {
  st.routes.post(svr, "/v1/embeddings",
           [&st](const httplib::Request& q, httplib::Response& r) { handle_embeddings(st, true, q, r); });
  for (const char* path : {"/embedding", "/embeddings"})
    st.routes.post(svr, path, [&st](const httplib::Request& q, httplib::Response& r) { handle_embeddings(st, false, q, r); });
}

}  // namespace graft::server
