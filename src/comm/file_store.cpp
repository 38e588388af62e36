#include "comm/file_store.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <fcntl.h>
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

std::string FileStore::expiring_path_of(const std::string& key) const {
  return dir_ + "/.expiring/" + file_name_of(key);
}

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

// Written into place like set(), with the expiry as the file's mtime (set on
// the temporary file, so the key never appears without it).
void FileStore::set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0) throw_bad_input("store.set_expiring", "ttl must be positive for key " + key);
  const std::string final_path = expiring_path_of(key);
  std::error_code ec;
  fs::create_directories(dir_ + "/.expiring", ec);
  const std::string tmp = write_temp(final_path, value, "store.set_expiring");
  const auto expires = std::chrono::system_clock::now().time_since_epoch() + ttl;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(expires).count();
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;  // atime as it is
  times[1].tv_sec = static_cast<time_t>(ns / 1000000000);
  times[1].tv_nsec = static_cast<long>(ns % 1000000000);
  if (::utimensat(AT_FDCWD, tmp.c_str(), times, 0) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_bad_input("store.set_expiring", "cannot set the expiry of " + tmp + ": " + std::strerror(err));
  }
  fs::rename(tmp, final_path, ec);
  if (ec) throw_bad_input("store.set_expiring", "cannot rename into " + final_path + ": " + ec.message());
}

// An expiring key past its mtime reads as absent. It is not removed here: a
// renewal may have replaced the file since it was read.
std::optional<std::vector<char>> FileStore::try_get_expiring(const std::string& key) const {
  const int fd = ::open(expiring_path_of(key).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::vector<char>> out;
  if (::fstat(fd, &st) == 0) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const auto mtime = std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
    if (mtime > now) {
      std::vector<char> value(static_cast<std::size_t>(st.st_size));
      std::size_t got = 0;
      while (got < value.size()) {
        const ssize_t n = ::read(fd, value.data() + got, value.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      value.resize(got);
      out = std::move(value);
    }
  }
  ::close(fd);
  return out;
}

std::optional<std::vector<char>> FileStore::try_get(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return try_get_expiring(key);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void FileStore::erase(const std::string& key) {
  std::error_code ec;
  fs::remove(path_of(key), ec);
  fs::remove(expiring_path_of(key), ec);
}

// The escaping maps a key prefix to a file-name prefix, so one scan finds
// them; a temporary file of a key being written goes too, harmlessly.
void FileStore::erase_prefix(const std::string& prefix) {
  const std::string name_prefix = file_name_of(prefix);
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const std::string& dir : {dir_, dir_ + "/.expiring"}) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().filename().string().rfind(name_prefix, 0) == 0) doomed.push_back(entry.path());
    }
  }
  for (const auto& path : doomed) fs::remove(path, ec);
}

}  // namespace ntp::comm
