#include "graft/io/json_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace graft::io {

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_as(ErrorKind::kIo, what, " '", path, "': cannot open: ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_as(ErrorKind::kIo, what, " '", path, "': cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(what, " '", path, "' is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    fail_as(ErrorKind::kLimit, what, " '", path, "' is ", st.st_size, " bytes; the limit is ", max_bytes);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_as(ErrorKind::kIo, what, " '", path, "': read failed: ", std::strerror(errno));
    if (n == 0) break;  // the file shrank while being read
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

void check_json_nesting(std::string_view text, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        fail_as(ErrorKind::kLimit, "'", where, "': JSON nested more than ", kMaxJsonDepth, " levels deep (at byte ", i,
                ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string excerpt(std::string_view s, size_t max_chars) {
  if (s.size() <= max_chars) return std::string(s);
  size_t cut = max_chars > 3 ? max_chars - 3 : 0;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return std::string(s.substr(0, cut)) + "...";
}

namespace {
template <typename Json>
std::string excerpt_of(const Json& v, size_t max_chars) {
  // Values come from depth-checked parses, so dump's recursion is bounded; invalid UTF-8 is
  // replaced rather than thrown.
  return excerpt(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), max_chars);
}
}  // namespace

std::string json_excerpt(const nlohmann::json& v, size_t max_chars) { return excerpt_of(v, max_chars); }
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_chars) { return excerpt_of(v, max_chars); }

}  // namespace graft::io
