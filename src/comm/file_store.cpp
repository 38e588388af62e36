#include "comm/file_store.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

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
std::string FileStore::path_of(const std::string& key) const {
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
  return dir_ + "/" + name;
}

void FileStore::set(const std::string& key, const std::vector<char>& value) {
  static std::atomic<unsigned> counter{0};
  const std::string final_path = path_of(key);
  std::ostringstream tmp;
  tmp << final_path << ".tmp." << ::getpid() << "." << std::this_thread::get_id() << "." << counter++;
  {
    std::ofstream out(tmp.str(), std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) throw_bad_input("store.set", "cannot write " + tmp.str() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp.str(), final_path, ec);
  if (ec) throw_bad_input("store.set", "cannot rename into " + final_path + ": " + ec.message());
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

}  // namespace ntp::comm
