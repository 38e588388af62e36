#include "comm/file_store.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "comm/error.h"

namespace ntp::comm {

namespace fs = std::filesystem;

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw_bad_input("open_store", "file store needs a directory (file:/path)");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw_bad_input("open_store", "file store directory '" + dir_ + "' cannot be created: " + ec.message());
  }
  if (::access(dir_.c_str(), W_OK) != 0) {
    throw_bad_input("open_store", "file store directory '" + dir_ + "' is not writable");
  }
}

// Keys contain '/', which would need directories; escape them to one flat name.
std::string FileStore::path_of(const std::string& key) const { return dir_ + "/" + file_name_of(key); }

std::string FileStore::file_name_of(const std::string& key) {
  std::string name;
  name.reserve(key.size() + 8);
  for (char c : key) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    if (plain) {
      name += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(c));
      name += hex;
    }
  }
  return name;
}

namespace {

// Temporary names must differ between hosts sharing the directory, not only
// between processes and threads of one host: create() relies on each caller
// linking its own file.
const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return std::string("host");
    return std::string(buf);
  }();
  return name;
}

}  // namespace

std::string FileStore::write_temp(const std::string& final_path, const std::vector<char>& value,
                                  const char* op) const {
  static std::atomic<unsigned> counter{0};
  std::ostringstream tmp;
  tmp << final_path << ".tmp." << host_name() << "." << ::getpid() << "." << std::this_thread::get_id() << "."
      << counter++;
  std::ofstream out(tmp.str(), std::ios::binary | std::ios::trunc);
  out.write(value.data(), static_cast<std::streamsize>(value.size()));
  out.close();
  if (!out) throw_bad_input(op, "cannot write " + tmp.str() + ": " + std::strerror(errno));
  return tmp.str();
}

void FileStore::set(const std::string& key, const std::vector<char>& value) {
  const std::string final_path = path_of(key);
  const std::string tmp = write_temp(final_path, value, "store.set");
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) throw_bad_input("store.set", "cannot rename into " + final_path + ": " + ec.message());
}

// link() never replaces an existing name, so of racing callers exactly one
// succeeds. Over NFS a retransmitted link() can report an error although the
// first attempt succeeded; the temporary file's link count (2) tells.
bool FileStore::create(const std::string& key, const std::vector<char>& value) {
  const std::string final_path = path_of(key);
  const std::string tmp = write_temp(final_path, value, "store.create");
  const int rc = ::link(tmp.c_str(), final_path.c_str());
  const int link_errno = errno;
  struct stat st {};
  const bool linked = rc == 0 || (::stat(tmp.c_str(), &st) == 0 && st.st_nlink == 2);
  ::unlink(tmp.c_str());
  if (linked) return true;
  if (link_errno == EEXIST) return false;
  throw_bad_input("store.create", "cannot create key " + key + " (link " + tmp + " to " + final_path +
                                      "): " + std::strerror(link_errno));
}

std::optional<std::vector<char>> FileStore::try_get(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void FileStore::erase(const std::string& key) {
  std::error_code ec;
  fs::remove(path_of(key), ec);
}

// The escaping maps a key prefix to a file-name prefix, so one scan finds
// them; a temporary file of a key being written goes too, harmlessly.
void FileStore::erase_prefix(const std::string& prefix) {
  const std::string name_prefix = file_name_of(prefix);
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename().string().rfind(name_prefix, 0) == 0) doomed.push_back(entry.path());
  }
  for (const auto& path : doomed) fs::remove(path, ec);
}

}  // namespace ntp::comm
