// Models and adapters from the Hugging Face Hub by name, kept in the Hugging Face cache layout, so
// what transformers or `hf download` fetched is used here offline and what graft fetches is
// visible to them:
//
//   $HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME default ~/.cache/huggingface)
//     models--ORG--NAME/blobs/<etag>                    the file's bytes (etag: its LFS sha256, or
//                                                       the git blob sha1 of a small file)
//     models--ORG--NAME/snapshots/<commit>/<path>       a relative symlink to ../../blobs/<etag>
//     models--ORG--NAME/refs/<revision>                 the commit a branch or tag pointed to
//
// The Hub's routes (the ones huggingface_hub uses): HEAD/GET ENDPOINT/ORG/NAME/resolve/REV/PATH
// (headers X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size, a redirect to the file's storage)
// and GET ENDPOINT/api/models/ORG/NAME/revision/REV (the commit and its files). A download goes to
// blobs/<etag>.incomplete (resumed with a Range request), is checked against its size and etag
// hash, and only then renamed into place and linked: nothing half written is ever where a whole
// file is expected. Environment: HF_ENDPOINT, HF_TOKEN (else $HF_HOME/token), HF_HOME,
// HF_HUB_CACHE, HF_HUB_OFFLINE=1 (the cache only, no network).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace graft::hub {

struct Hub {
  std::string endpoint = "https://huggingface.co";
  std::string token;
  std::string cache;  // the hub cache directory
  bool offline = false;
  // Called while a file downloads: bytes so far and in all (the file's name is in `label`).
  std::function<void(const std::string& label, int64_t done, int64_t total)> progress;

  static Hub from_environment();
};

// The snapshot path of one file of a model repo at `revision`, downloaded when missing.
std::string download_file(const Hub& hub, const std::string& repo, const std::string& path,
                          const std::string& revision = "main");

// The snapshot directory of a repo at `revision`, with every file `keep` accepts downloaded (those
// missing; offline: as cached).
std::string download_snapshot(const Hub& hub, const std::string& repo, const std::string& revision,
                              const std::function<bool(const std::string& path)>& keep);

// The file names of a repo at `revision` (offline: those of its cached snapshot).
std::vector<std::string> list_files(const Hub& hub, const std::string& repo, const std::string& revision);

// The GGUF file of `files` for a quantization tag (":Q4_K_M" in -hf ORG/NAME:Q4_K_M; matched in
// the file name, any case); without a tag the Q4_K_M file, else the only GGUF. The first shard of
// a split file. Throws kBadRequest listing the GGUF files when none or several match.
std::string pick_gguf(const std::vector<std::string>& files, const std::string& tag, const std::string& repo);

// -hf ORG/NAME[:QUANT] (with --hf-file FILE, --revision REV): a GGUF repo gives its file for QUANT,
// a safetensors repo its snapshot directory (config, tokenizer and weight files). The local path.
std::string resolve_model(const Hub& hub, const std::string& spec, const std::string& file, const std::string& revision);

// hf:ORG/NAME[@REV] as its repo and revision (default main); nullopt for anything else.
struct HfRef {
  std::string repo, revision;
  std::string name() const { return repo.substr(repo.find('/') + 1); }  // NAME
};
std::optional<HfRef> parse_hf_ref(const std::string& path_or_hf);

// hf:ORG/NAME[@REV] (an adapter on the Hub): the snapshot directory with its adapter files (JSON,
// safetensors, GGUF). Other strings are returned unchanged.
std::string resolve_adapter(const Hub& hub, const std::string& path_or_hf);

}  // namespace graft::hub
