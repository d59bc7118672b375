"""A loopback stand-in for the Hugging Face Hub's file routes, for tests/cli/test_hub.py: what both
graft and the real huggingface_hub client download from.

Routes, as the Hub answers them (huggingface_hub's file_download.py and hf_api.py are the contract):
  HEAD/GET /ORG/NAME/resolve/REV/PATH    X-Repo-Commit; small files: ETag = git blob sha1, served
                                         here; large ones (LFS): X-Linked-Etag = sha256, X-Linked-Size
                                         and a 302 to /cdn/SHA256 (another "host" as far as a client
                                         knows: no token goes there)
  GET /cdn/SHA256                        (on a second port) the bytes, with Range (206) for resumed downloads
  GET /api/models/ORG/NAME/revision/REV  {"id", "sha", "siblings": [{"rfilename"}]}
  404 with X-Error-Code (RepoNotFound, EntryNotFound, RevisionNotFound); 401 for a private repo
  without "Authorization: Bearer <token>".
`fault` makes the next /cdn transfer fail: "truncate" (half the bytes, then the connection closes)
or "corrupt" (one byte changed). `log` records (method, path, Range) of every request.
"""
import hashlib
import http.server
import json
import os
import threading

LFS_MIN = 1024  # files at least this large are LFS files (as *.safetensors and *.gguf are on the Hub)


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, commit=None, private=False):
        """files: {path in repo: bytes or a local file's path}."""
        self.files = {p: (open(v, "rb").read() if isinstance(v, str) else v) for p, v in files.items()}
        self.commit = commit or hashlib.sha1(json.dumps(sorted(self.files)).encode()).hexdigest()
        self.private = private


class HubStandIn:
    def __init__(self, repos, token="secret-token"):
        self.repos, self.token = repos, token
        self.fault = None
        self.log = []
        self.blobs = {}
        for repo in repos.values():
            for data in repo.files.values():
                self.blobs[hashlib.sha256(data).hexdigest()] = data
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.answer(self, head=True)

            def do_GET(self):
                hub.answer(self, head=False)

        # The Hub and its file storage on two ports: two origins, as huggingface.co and its CDN are
        # (a client follows redirects within the Hub's origin, and sends its token nowhere else).
        self.servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
        self.url, self.cdn_url = (f"http://127.0.0.1:{s.server_port}" for s in self.servers)
        for s in self.servers:
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()

    # ---- answers ----
    def send(self, h, status, headers=(), body=b"", head=False):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        if not any(k.lower() == "content-length" for k, _ in headers):
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def error(self, h, status, code, head):
        self.send(h, status, [("X-Error-Code", code), ("Content-Type", "application/json")],
                  json.dumps({"error": code}).encode(), head)

    def answer(self, h, head):
        self.log.append((h.command, h.path, h.headers.get("Range")))
        parts = h.path.split("?")[0].split("/")
        if parts[1] == "cdn":
            return self.cdn(h, parts[2], head)
        if parts[1:3] == ["api", "models"]:  # /api/models/ORG/NAME/revision/REV
            repo_id, rev = "/".join(parts[3:5]), parts[6] if len(parts) > 6 else "main"
            return self.revision(h, repo_id, rev, head)
        repo_id = "/".join(parts[1:3])
        if len(parts) < 6 or parts[3] != "resolve":
            return self.error(h, 404, "EntryNotFound", head)
        self.resolve(h, repo_id, parts[4], "/".join(parts[5:]), head)

    def repo_for(self, h, repo_id, rev, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            self.error(h, 404, "RepoNotFound", head)
            return None
        if repo.private and h.headers.get("Authorization") != f"Bearer {self.token}":
            self.error(h, 401, "GatedRepo", head)
            return None
        if rev not in ("main", repo.commit):
            self.error(h, 404, "RevisionNotFound", head)
            return None
        return repo

    def revision(self, h, repo_id, rev, head):
        repo = self.repo_for(h, repo_id, rev, head)
        if repo:
            body = json.dumps({"id": repo_id, "sha": repo.commit,
                               "siblings": [{"rfilename": p} for p in sorted(repo.files)]}).encode()
            self.send(h, 200, [("Content-Type", "application/json")], body, head)

    def resolve(self, h, repo_id, rev, path, head):
        repo = self.repo_for(h, repo_id, rev, head)
        if not repo:
            return
        data = repo.files.get(path)
        if data is None:
            return self.error(h, 404, "EntryNotFound", head)
        common = [("X-Repo-Commit", repo.commit)]
        if len(data) >= LFS_MIN:
            sha = hashlib.sha256(data).hexdigest()
            self.send(h, 302, common + [("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data))),
                                        ("ETag", f'"{git_blob_sha1(data)}"'), ("Location", f"{self.cdn_url}/cdn/{sha}")],
                      head=head)
        else:
            self.send(h, 200, common + [("ETag", f'"{git_blob_sha1(data)}"')], data, head)

    def cdn(self, h, sha, head):
        data = self.blobs.get(sha)
        if data is None:
            return self.error(h, 404, "EntryNotFound", head)
        start, status, headers = 0, 200, []
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start, status = int(rng[6:-1]), 206
            headers.append(("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}"))
        body = data[start:]
        fault, self.fault = self.fault, None
        if fault == "corrupt":
            body = bytes([body[0] ^ 1]) + body[1:]
        if fault == "truncate":  # promise it all, send half, hang up
            h.send_response(status)
            for k, v in headers + [("Content-Length", str(len(body)))]:
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        self.send(h, status, headers, body, head)


def cache_files(cache):
    """Every file and link under a hub cache, relative (for 'nothing was cached' checks)."""
    out = []
    for root, dirs, files in os.walk(cache):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            out.append(os.path.relpath(os.path.join(root, name), cache))
    return sorted(out)
