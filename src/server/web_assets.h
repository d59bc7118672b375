// The web page of graft serve (src/server/web/), compiled into the binary by
// cmake/embed_files.cmake: no files to install, no CDN, nothing fetched at run time.
#pragma once
#include <httplib.h>

#include <span>
#include <string_view>

namespace graft::server {

class Routes;  // state.h

struct WebAsset {
  std::string_view name;          // file name in src/server/web/, e.g. "app.js"
  std::string_view content_type;  // from the extension
  std::string_view body;
  std::string_view etag;          // quoted, from the file's SHA-256
};

// Every file of src/server/web/, sorted by name (generated web_assets.cpp).
std::span<const WebAsset> web_assets();

// True for the paths the page is served at: "/", "/index.html" and "/web/<file>". These need no
// API key and answer while the model loads (the page itself waits for /health and asks for a key).
bool is_web_path(const std::string& path);

// GET "/" and "/index.html" (index.html) and "/web/<file>", with ETag / If-None-Match (304) and
// Cache-Control: no-cache (revalidate each time: the paths are stable, the contents change with
// the binary). Not registered under --no-webui.
void add_web_routes(httplib::Server& svr, Routes& routes);

}  // namespace graft::server
