// graft serve: adapters at run time. vLLM's lifecycle routes (POST /v1/load_lora_adapter,
// /v1/unload_lora_adapter) confined to --lora-root, the OpenAI `model` name as an adapter selector,
// and --lora-dir's load on first use (vLLM's filesystem resolver).
#include <cstdio>
#include <filesystem>

#include "graft/core/error.h"
#include "graft/hub/hub.h"
#include "server/state.h"

namespace graft::server {

namespace {

namespace fs = std::filesystem;

// `given` (relative paths from `root`) as a real path inside `root`, symlinks resolved: a `..`
// component or a path resolving outside is a 403, a missing one a 404.
std::string confined(const std::string& root, const std::string& given, const std::string& what) {
  const fs::path p(given);
  for (const auto& part : p)
    if (part == "..")
      throw HttpError(403, "permission_error",
                      what + " '" + given + "' has a '..' component; adapter paths must stay inside " + root);
  const fs::path full = p.is_relative() ? fs::path(root) / p : p;
  std::error_code ec;
  if (!fs::exists(full, ec))
    throw HttpError(404, "not_found_error", what + " '" + given + "': no such file or directory");
  const fs::path real = fs::canonical(full, ec);
  if (ec) throw HttpError(404, "not_found_error", what + " '" + given + "': " + ec.message());
  const fs::path real_root = fs::canonical(root, ec);
  if (ec) throw HttpError(500, "server_error", "the adapter root '" + root + "' is gone: " + ec.message());
  const auto [r, q] = std::mismatch(real_root.begin(), real_root.end(), real.begin(), real.end());
  if (r != real_root.end())
    throw HttpError(403, "permission_error",
                    what + " '" + given + "' resolves to '" + real.string() + "', outside " + real_root.string());
  return real.string();
}

// lora_path "hf:ORG/NAME[@REV]": the adapter fetched from the Hugging Face Hub into its cache, allowed
// only where that cache is inside --lora-root (checked before anything is fetched); other paths as given.
std::string hub_adapter(const State& st, const std::string& given) {
  if (given.rfind("hf:", 0) != 0) return given;
  const hub::Hub h = hub::Hub::from_environment();
  std::error_code ec;
  fs::create_directories(h.cache, ec);
  const fs::path cache = fs::weakly_canonical(h.cache, ec), root = fs::weakly_canonical(st.opts.lora_root, ec);
  if (std::mismatch(root.begin(), root.end(), cache.begin(), cache.end()).first != root.end())
    throw HttpError(403, "permission_error",
                    "lora_path '" + given + "': adapters from the Hub need the Hugging Face cache (" + cache.string() +
                        ", HF_HUB_CACHE) inside --lora-root " + root.string());
  return hub::resolve_adapter(h, given);
}

// A refused load is the request's fault whatever the kind (a bad, unsupported or unreadable
// adapter): 400 naming the problem; only an internal error is a 500.
ApiError load_error(const std::exception& e) {
  const auto* ge = dynamic_cast<const Error*>(&e);
  if (ge && ge->kind() != ErrorKind::kInternal && ge->kind() != ErrorKind::kLimit)
    return api_error(400, "invalid_request_error", e.what());
  return api_error(e);
}

ApiError disabled() {
  return api_error(501, "not_supported_error",
                   "runtime adapter loading is off: start graft serve with --allow-runtime-lora --lora-root DIR");
}

void plain(httplib::Response& res, const std::string& text) {
  res.status = 200;
  res.set_content(text, "text/plain; charset=utf-8");
}

}  // namespace

// " (known: base, a, b)": the names `model` takes, for a 404's message (at most 8 adapters listed).
std::string known_models(const State& st) {
  const std::string adapters = adapter_list(st, [](const engine::AdapterInfo& a) { return a.name; }, " in GET /v1/models");
  return " (known: " + st.model_name + (adapters.empty() ? "" : ", " + adapters) + ")";
}

std::optional<int64_t> model_adapter(State& st, const std::string& model) {
  if (model.empty() || model == st.model_name || model == st.model_path) return std::nullopt;
  engine::AdapterRegistry& reg = st.engine->adapters();
  if (auto id = reg.find(model)) return id;
  const std::string not_found = "The model '" + model + "' does not exist: it is not the base model ('" +
                                st.model_name + "') or a loaded adapter";
  if (!st.opts.lora_dir.empty()) {
    const fs::path name(model);
    if (model == "." || model == ".." || name.has_parent_path() || model.find('/') != std::string::npos)
      throw HttpError(404, "not_found_error", not_found + " (a --lora-dir adapter name is one path component)");
    std::lock_guard<std::mutex> lock(st.resolve_mu);
    if (auto id = reg.find(model)) return id;
    if (std::error_code ec; !fs::exists(fs::path(st.opts.lora_dir) / name, ec))
      throw HttpError(404, "not_found_error", not_found + " or in --lora-dir " + st.opts.lora_dir);
    const std::string path = confined(st.opts.lora_dir, model, "model");
    try {
      const int64_t id = reg.add(model, path, 0.0f);
      std::fprintf(stderr, "graft serve: loaded adapter '%s' from --lora-dir (id %lld)\n", model.c_str(),
                   static_cast<long long>(id));
      return id;
    } catch (const Error&) {
      if (auto id = reg.find(model)) return id;  // loaded meanwhile by a load request
      throw;
    }
  }
  // One rule, runtime loading on or off: where adapters go by name (State::routes_by_name) a name
  // that is neither the base nor an adapter is a 404, so a typo never silently serves the base;
  // where they do not (llama-server's unnamed --lora FILE), `model` is ignored, as llama-server does.
  if (st.routes_by_name) throw HttpError(404, "not_found_error", not_found + known_models(st));
  return std::nullopt;
}

json adapter_model_entries(const State& st) {
  json out = json::array();
  for (const auto& a : st.engine->adapters().list())
    out.push_back(json{{"id", a.name}, {"object", "model"}, {"created", st.created}, {"owned_by", "graft"},
                       {"root", a.path}, {"parent", st.model_name}});
  return out;
}

void add_adapter_routes(httplib::Server& svr, State& st) {
  st.routes.post(svr, "/v1/load_lora_adapter", [&st](const httplib::Request& q, httplib::Response& res) {
    if (!st.opts.allow_runtime_lora) return send_error(res, disabled());
    try {
      const json b = parse_body(q);
      if (!b.is_object()) fail_as(ErrorKind::kBadRequest, "the request body must be a JSON object");
      const std::string& name = string_field(b, "lora_name");
      const std::string& given = string_field(b, "lora_path");
      bool inplace = false;
      if (auto it = b.find("load_inplace"); it != b.end() && !it->is_null()) {
        if (!it->is_boolean()) fail_as(ErrorKind::kBadRequest, "field 'load_inplace' must be true or false");
        inplace = it->get<bool>();
      }
      if (name == st.model_name)
        fail_as(ErrorKind::kBadRequest, "lora_name '", name, "' is the base model's name");
      const std::string path = confined(st.opts.lora_root, hub_adapter(st, given), "lora_path");
      const int64_t id = st.engine->adapters().add(name, path, 0.0f, inplace);
      if (inplace) st.scheduler->adapters_changed();  // KV computed with the old bytes is dropped
      std::fprintf(stderr, "graft serve: loaded adapter '%s' from %s (id %lld)\n", name.c_str(), path.c_str(),
                   static_cast<long long>(id));
      plain(res, "Success: LoRA adapter '" + name + "' added successfully.");
    } catch (const std::exception& e) {
      send_error(res, load_error(e));
    }
  });
  st.routes.post(svr, "/v1/unload_lora_adapter", [&st](const httplib::Request& q, httplib::Response& res) {
    if (!st.opts.allow_runtime_lora) return send_error(res, disabled());
    try {
      const json b = parse_body(q);
      if (!b.is_object()) fail_as(ErrorKind::kBadRequest, "the request body must be a JSON object");
      const std::string& name = string_field(b, "lora_name");
      if (!st.engine->adapters().remove(name))
        throw HttpError(404, "not_found_error", "The lora adapter '" + name + "' cannot be found.");
      st.scheduler->adapters_changed();
      std::fprintf(stderr, "graft serve: unloaded adapter '%s'\n", name.c_str());
      plain(res, "Success: LoRA adapter '" + name + "' removed successfully.");
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    }
  });
}

}  // namespace graft::server
