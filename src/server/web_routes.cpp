// graft serve's web page: the embedded files of src/server/web/ (web_assets.h) at "/" and "/web/".
#include <string>

#include "server/state.h"
#include "server/web_assets.h"

namespace graft::server {

namespace {

constexpr std::string_view kPrefix = "/web/";

const WebAsset* find_asset(std::string_view name) {
  for (const auto& a : web_assets())
    if (a.name == name) return &a;
  return nullptr;
}

void send_asset(const WebAsset& a, const httplib::Request& req, httplib::Response& res) {
  res.set_header("ETag", std::string(a.etag));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  // The page talks only to this server: no inline script, nothing from elsewhere.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors "
                 "'none'");
  res.set_header("Referrer-Policy", "no-referrer");
  // If-None-Match may list several tags (RFC 9110 13.1.2); a match anywhere in it is a 304.
  const std::string inm = req.get_header_value("If-None-Match");
  if (!inm.empty() && (inm == "*" || inm.find(a.etag) != std::string::npos)) {
    res.status = 304;
    return;
  }
  res.status = 200;
  res.set_content(std::string(a.body), std::string(a.content_type));
}

}  // namespace

bool is_web_path(const std::string& path) {
  return path == "/" || path == "/index.html" || std::string_view(path).substr(0, kPrefix.size()) == kPrefix;
}

void add_web_routes(httplib::Server& svr, Routes& routes) {
  const WebAsset* index = find_asset("index.html");
  if (index)
    for (const char* path : {"/", "/index.html"})
      routes.get(svr, path, [index](const httplib::Request& q, httplib::Response& r) { send_asset(*index, q, r); });
  for (const auto& a : web_assets())
    routes.get(svr, std::string(kPrefix) + std::string(a.name),
            [&a](const httplib::Request& q, httplib::Response& r) { send_asset(a, q, r); });
}

}  // namespace graft::server
