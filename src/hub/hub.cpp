// The Hugging Face Hub client and cache (graft/hub/hub.h).
#include "graft/hub/hub.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "graft/core/error.h"
#include "graft/io/hash.h"

namespace graft::hub {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool is_hex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

void check_repo(const std::string& repo) {
  static const std::regex ok("[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*");
  if (!std::regex_match(repo, ok) || repo.find("--") != std::string::npos || repo.find("..") != std::string::npos)
    fail_as(ErrorKind::kBadRequest, "'", repo, "' is not a Hugging Face repo id (expected ORG/NAME)");
}

void check_relative(const std::string& path, const std::string& repo) {
  const fs::path p(path);
  if (path.empty() || p.is_absolute() || std::any_of(p.begin(), p.end(), [](const fs::path& c) { return c == ".."; }))
    fail_as(ErrorKind::kBadInput, repo, ": file name '", path, "' is not a relative path inside the repo");
}

fs::path repo_dir(const Hub& hub, const std::string& repo) {
  return fs::path(hub.cache) / ("models--" + repo.substr(0, repo.find('/')) + "--" + repo.substr(repo.find('/') + 1));
}

std::string quote(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// "https://host:port/a/b" -> {"https://host:port", "/a/b"}; a path alone keeps `origin`.
std::pair<std::string, std::string> split_url(const std::string& url, const std::string& origin) {
  if (!url.empty() && url[0] == '/') return {origin, url};
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) fail_as(ErrorKind::kIo, "the Hub redirected to '", url, "', not a URL");
  const size_t slash = url.find('/', scheme + 3);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

std::unique_ptr<httplib::Client> client(const Hub& hub, const std::string& origin) {
  auto c = std::make_unique<httplib::Client>(origin);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(60, 0);
  c->set_follow_location(false);
  // The token goes to the Hub only, never to the storage a download is redirected to.
  if (!hub.token.empty() && origin == split_url(hub.endpoint + "/", "").first) c->set_bearer_token_auth(hub.token);
  return c;
}

[[noreturn]] void http_failure(const httplib::Result& r, const std::string& what, const Hub& hub) {
  if (!r)
    fail_as(ErrorKind::kIo, what, ": cannot reach ", hub.endpoint, " (", httplib::to_string(r.error()),
            "); HF_HUB_OFFLINE=1 uses the local cache only");
  if (r->status == 401 || r->status == 403)
    fail_as(ErrorKind::kBadRequest, what, ": access denied (HTTP ", r->status,
            "): a private or gated repo needs a token in HF_TOKEN (or `hf auth login`)");
  if (r->status == 404) {
    const std::string code = r->get_header_value("X-Error-Code");
    fail_as(ErrorKind::kBadRequest, what, ": not found on ", hub.endpoint, code.empty() ? "" : " (" + code + ")");
  }
  fail_as(ErrorKind::kIo, what, ": HTTP ", r->status, " from ", hub.endpoint);
}

struct FileMeta {
  std::string commit, etag, location;
  int64_t size = -1;
};

std::string normalized_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

// HEAD of the resolve route; relative redirects (a renamed repo) are followed, the one to the
// file's storage is not: the Hub's own headers are what identify the file.
FileMeta head(const Hub& hub, const std::string& repo, const std::string& path, const std::string& revision) {
  const std::string what = repo + "/" + path + " at " + revision;
  auto [origin, target] = split_url(hub.endpoint + "/" + repo + "/resolve/" + quote(revision) + "/" + quote(path), "");
  httplib::Headers h{{"Accept-Encoding", "identity"}};
  for (int hop = 0; hop < 5; ++hop) {
    auto r = client(hub, origin)->Head(target.c_str(), h);
    if (!r || r->status >= 400) http_failure(r, what, hub);
    const std::string location = r->get_header_value("Location");
    if (r->status >= 300 && r->status < 400 && !location.empty() && location[0] == '/' &&
        !r->has_header("X-Repo-Commit")) {
      target = location;
      continue;
    }
    FileMeta m;
    m.commit = r->get_header_value("X-Repo-Commit");
    m.etag = normalized_etag(r->has_header("X-Linked-Etag") ? r->get_header_value("X-Linked-Etag") : r->get_header_value("ETag"));
    m.location = location.empty() ? origin + target : (location[0] == '/' ? origin + location : location);
    const std::string size = r->has_header("X-Linked-Size") ? r->get_header_value("X-Linked-Size")
                                                            : (r->status < 300 ? r->get_header_value("Content-Length") : "");
    if (!size.empty()) m.size = std::strtoll(size.c_str(), nullptr, 10);
    if (m.commit.empty() || m.etag.empty() || m.etag.find('/') != std::string::npos)
      fail_as(ErrorKind::kIo, what, ": the Hub's answer lacks X-Repo-Commit or an ETag");
    return m;
  }
  fail_as(ErrorKind::kIo, what, ": too many redirects");
}

// The hash an etag names: the LFS sha256 (64 hex digits) or the git blob sha1 (40) of the bytes.
std::string file_hash(const fs::path& file, size_t hex_digits) {
  const bool git = hex_digits == 40;
  io::Hasher h(git ? io::Hasher::Kind::kSha1 : io::Hasher::Kind::kSha256);
  if (git) {
    const std::string header = "blob " + std::to_string(fs::file_size(file)) + std::string(1, '\0');
    h.update(header.data(), header.size());
  }
  h.update_file(file.string(), "downloaded file");
  const std::vector<uint8_t> d = h.finish();
  return io::to_hex(d.data(), d.size());
}

// An exclusive lock on .locks/<repo dir>/<etag>.lock, the file huggingface_hub locks for the same blob.
class BlobLock {
 public:
  BlobLock(const Hub& hub, const fs::path& repo, const std::string& etag) {
    const fs::path dir = fs::path(hub.cache) / ".locks" / repo.filename();
    fs::create_directories(dir);
    fd_ = ::open((dir / (etag + ".lock")).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

// Downloads the blob into blobs/<etag>.incomplete (resuming what is there), checks size and hash,
// renames it into place.
void fetch_blob(const Hub& hub, const FileMeta& m, const fs::path& blob, const std::string& what) {
  const fs::path part = blob.string() + ".incomplete";
  int64_t have = fs::exists(part) ? static_cast<int64_t>(fs::file_size(part)) : 0;
  if (m.size >= 0 && have > m.size) {
    fs::remove(part);
    have = 0;
  }
  std::ofstream out(part, std::ios::binary | std::ios::app);
  auto [origin, target] = split_url(m.location, "");
  auto c = client(hub, origin);
  c->set_follow_location(true);
  httplib::Headers h{{"Accept-Encoding", "identity"}};
  if (have > 0) h.emplace("Range", "bytes=" + std::to_string(have) + "-");
  int64_t done = have;
  auto r = c->Get(
      target.c_str(), h,
      [&](const httplib::Response& res) {
        if (res.status == 200 && done > 0) {  // the server sends it whole: start over
          out.close();
          out.open(part, std::ios::binary | std::ios::trunc);
          done = 0;
        }
        return res.status == 200 || res.status == 206;
      },
      [&](const char* data, size_t n) {
        out.write(data, static_cast<std::streamsize>(n));
        done += static_cast<int64_t>(n);
        if (hub.progress) hub.progress(what, done, m.size);
        return static_cast<bool>(out);
      });
  out.close();
  const int64_t got = static_cast<int64_t>(fs::file_size(part));
  if ((r && r->status >= 400) || (!r && got == have)) http_failure(r, what, hub);
  if (m.size >= 0 && got != m.size)
    fail_as(ErrorKind::kIo, what, ": the transfer ended after ", got, " of ", m.size,
            " bytes (kept as ", part.string(), "; the next run resumes it)");
  if (!r) http_failure(r, what, hub);
  if (is_hex(m.etag, 64) || is_hex(m.etag, 40)) {
    const std::string hash = file_hash(part, m.etag.size());
    if (hash != m.etag) {
      fs::remove(part);
      fail_as(ErrorKind::kIo, what, ": checksum mismatch (", m.etag.size() == 64 ? "sha256 " : "git sha1 ", hash,
              ", expected ", m.etag, "); the download was discarded");
    }
  }
  fs::rename(part, blob);
}

void link_snapshot(const fs::path& dir, const std::string& commit, const std::string& path, const std::string& etag) {
  const fs::path pointer = dir / "snapshots" / commit / path;
  fs::create_directories(pointer.parent_path());
  const fs::path target = (dir / "blobs" / etag).lexically_relative(pointer.parent_path());
  std::error_code ec;
  fs::remove(pointer, ec);
  fs::create_symlink(target, pointer);
}

void write_ref(const fs::path& dir, const std::string& revision, const std::string& commit) {
  if (revision == commit) return;
  const fs::path ref = dir / "refs" / revision;
  fs::create_directories(ref.parent_path());
  const fs::path tmp = ref.string() + ".tmp";
  std::ofstream(tmp) << commit;
  fs::rename(tmp, ref);
}

// The commit a revision names in the cache (a commit hash names itself), or "" if unknown.
std::string cached_commit(const fs::path& dir, const std::string& revision) {
  if (is_hex(revision, 40)) return revision;
  std::ifstream in(dir / "refs" / revision);
  std::string commit;
  in >> commit;
  return commit;
}

std::string cached_file(const Hub& hub, const std::string& repo, const std::string& path, const std::string& revision) {
  const fs::path dir = repo_dir(hub, repo);
  const std::string commit = cached_commit(dir, revision);
  const fs::path file = dir / "snapshots" / commit / path;
  if (commit.empty() || !fs::exists(file)) return "";
  return file.string();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Hub Hub::from_environment() {
  Hub h;
  if (!env("HF_ENDPOINT").empty()) h.endpoint = env("HF_ENDPOINT");
  while (!h.endpoint.empty() && h.endpoint.back() == '/') h.endpoint.pop_back();
  const std::string home = !env("HF_HOME").empty() ? env("HF_HOME")
                           : !env("XDG_CACHE_HOME").empty() ? env("XDG_CACHE_HOME") + "/huggingface"
                                                            : env("HOME") + "/.cache/huggingface";
  h.cache = !env("HF_HUB_CACHE").empty() ? env("HF_HUB_CACHE") : home + "/hub";
  h.token = !env("HF_TOKEN").empty() ? env("HF_TOKEN") : env("HUGGING_FACE_HUB_TOKEN");
  if (h.token.empty()) {
    std::ifstream in(home + "/token");
    in >> h.token;
  }
  const std::string off = upper(env("HF_HUB_OFFLINE"));
  h.offline = off == "1" || off == "ON" || off == "YES" || off == "TRUE";
  return h;
}

std::string download_file(const Hub& hub, const std::string& repo, const std::string& path, const std::string& revision) {
  check_repo(repo);
  check_relative(path, repo);
  const std::string what = repo + "/" + path + " at " + revision;
  if (hub.offline) {
    std::string file = cached_file(hub, repo, path, revision);
    if (file.empty()) fail_as(ErrorKind::kIo, what, ": not in the cache ", hub.cache, " (HF_HUB_OFFLINE is set)");
    return file;
  }
  FileMeta m;
  try {
    m = head(hub, repo, path, revision);
  } catch (const Error& e) {  // unreachable Hub: a cached copy still serves, as huggingface_hub does
    std::string file = e.kind() == ErrorKind::kIo ? cached_file(hub, repo, path, revision) : "";
    if (file.empty()) throw;
    return file;
  }
  const fs::path dir = repo_dir(hub, repo);
  fs::create_directories(dir / "blobs");
  const fs::path blob = dir / "blobs" / m.etag;
  {
    BlobLock lock(hub, dir, m.etag);
    if (!fs::exists(blob)) fetch_blob(hub, m, blob, what);
  }
  link_snapshot(dir, m.commit, path, m.etag);
  write_ref(dir, revision, m.commit);
  return (dir / "snapshots" / m.commit / path).string();
}

namespace {

// A repo's files at a revision and the commit it names: from the Hub, or (offline, or the Hub
// unreachable with the revision cached) from the cached snapshot. Nothing is written here: refs
// are recorded once a file is cached (download_file, download_snapshot).
struct Listing {
  std::string commit;
  std::vector<std::string> files;
};

Listing listing(const Hub& hub, const std::string& repo, const std::string& revision) {
  check_repo(repo);
  const fs::path dir = repo_dir(hub, repo);
  const auto cached = [&] {
    Listing l{cached_commit(dir, revision), {}};
    const fs::path snap = dir / "snapshots" / l.commit;
    if (l.commit.empty() || !fs::is_directory(snap))
      fail_as(ErrorKind::kIo, repo, " at ", revision, ": not in the cache ", hub.cache,
              hub.offline ? " (HF_HUB_OFFLINE is set)" : "");
    for (const auto& e : fs::recursive_directory_iterator(snap))
      if (!e.is_directory()) l.files.push_back(e.path().lexically_relative(snap).string());
    std::sort(l.files.begin(), l.files.end());
    return l;
  };
  if (hub.offline) return cached();
  const std::string what = repo + " at " + revision;
  auto [origin, target] = split_url(hub.endpoint + "/api/models/" + repo + "/revision/" + quote(revision), "");
  auto r = client(hub, origin)->Get(target.c_str());
  if (!r && cached_commit(dir, revision) != "") return cached();
  if (!r || r->status >= 400) http_failure(r, what, hub);
  Listing l;
  try {
    const auto j = nlohmann::json::parse(r->body);
    for (const auto& s : j.at("siblings")) l.files.push_back(s.at("rfilename").get<std::string>());
    l.commit = j.at("sha").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail_as(ErrorKind::kIo, what, ": the Hub's file list is not what was expected (", e.what(), ")");
  }
  return l;
}

}  // namespace

std::vector<std::string> list_files(const Hub& hub, const std::string& repo, const std::string& revision) {
  return listing(hub, repo, revision).files;
}

std::string download_snapshot(const Hub& hub, const std::string& repo, const std::string& revision,
                              const std::function<bool(const std::string&)>& keep) {
  const Listing l = listing(hub, repo, revision);
  size_t kept = 0;
  for (const auto& f : l.files)
    if (keep(f)) {
      download_file(hub, repo, f, l.commit);  // every file from the one commit listed
      ++kept;
    }
  if (kept == 0) fail_as(ErrorKind::kBadRequest, repo, " at ", revision, ": none of its ", l.files.size(), " files is one graft reads");
  const fs::path dir = repo_dir(hub, repo);
  if (!hub.offline) write_ref(dir, revision, l.commit);
  return (dir / "snapshots" / l.commit).string();
}

std::string pick_gguf(const std::vector<std::string>& files, const std::string& tag, const std::string& repo) {
  std::vector<std::string> gguf;
  for (const auto& f : files)
    if (ends_with(upper(f), ".GGUF") && upper(f).find("MMPROJ") == std::string::npos) gguf.push_back(f);
  std::string list;
  for (const auto& g : gguf) list += (list.empty() ? "" : ", ") + g;
  const std::string want = upper(tag.empty() ? "Q4_K_M" : tag);
  std::vector<std::string> hits;
  for (const auto& g : gguf) {
    const std::string u = upper(g);
    const size_t at = u.rfind(want);
    // The tag as a whole part of the name: "Q4_K" does not pick "Q4_K_M".
    if (at != std::string::npos && (u.compare(at + want.size(), 5, ".GGUF") == 0 || u.compare(at + want.size(), 1, "-") == 0))
      hits.push_back(g);
  }
  std::erase_if(hits, [](const std::string& g) { return g.find("-of-") != std::string::npos && g.find("-00001-of-") == std::string::npos; });
  if (tag.empty() && hits.empty() && gguf.size() == 1) return gguf[0];
  if (hits.size() == 1) return hits[0];
  if (gguf.empty()) fail_as(ErrorKind::kBadRequest, repo, " has no GGUF file");
  fail_as(ErrorKind::kBadRequest, repo, ": ", hits.empty() ? "no" : "more than one", " GGUF file for '", want,
          "' (name one with :QUANT or --hf-file; its GGUF files: ", list, ")");
}

std::string resolve_model(const Hub& hub, const std::string& spec, const std::string& file, const std::string& revision) {
  const size_t colon = spec.find(':');
  const std::string repo = spec.substr(0, colon);
  const std::string tag = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const std::string rev = revision.empty() ? "main" : revision;
  if (!file.empty()) return download_file(hub, repo, file, rev);
  const std::vector<std::string> files = list_files(hub, repo, rev);
  if (std::any_of(files.begin(), files.end(), [](const std::string& f) { return ends_with(upper(f), ".GGUF"); }))
    return download_file(hub, repo, pick_gguf(files, tag, repo), rev);
  if (!tag.empty()) fail_as(ErrorKind::kBadRequest, repo, " has no GGUF file, so no ':", tag, "' to choose");
  return download_snapshot(hub, repo, rev, [](const std::string& f) {
    return ends_with(f, ".json") || ends_with(f, ".safetensors") || ends_with(f, ".jinja") || f == "tokenizer.model";
  });
}

std::optional<HfRef> parse_hf_ref(const std::string& path_or_hf) {
  if (path_or_hf.rfind("hf:", 0) != 0) return std::nullopt;
  HfRef r{path_or_hf.substr(3), "main"};
  if (const size_t at = r.repo.find('@'); at != std::string::npos) {
    r.revision = r.repo.substr(at + 1);
    r.repo = r.repo.substr(0, at);
  }
  return r;
}

std::string resolve_adapter(const Hub& hub, const std::string& path_or_hf) {
  const auto ref = parse_hf_ref(path_or_hf);
  if (!ref) return path_or_hf;
  return download_snapshot(hub, ref->repo, ref->revision, [](const std::string& f) {
    return ends_with(f, ".json") || ends_with(f, ".safetensors") || ends_with(f, ".gguf");
  });
}

}  // namespace graft::hub
