#pragma once
// FileStore: one file per key in a directory (local disk or a shared file
// system). Writes go to a temporary file and are renamed into place, so a
// reader sees either no key or the whole value; create() links the temporary
// file to the key's name instead, which fails with EEXIST atomically (also on
// NFS) when the key exists.
#include "comm/store.h"

namespace ntp::comm {

class FileStore : public Store {
 public:
  // Creates the directory if needed; throws CommError(kBadInput) if it cannot.
  explicit FileStore(std::string dir);

  void set(const std::string& key, const std::vector<char>& value) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  // The key's file goes to DIR/.expiring/ with its mtime set to the wall time
  // at which it expires; a read finds it there after the plain keys and takes
  // it for absent from then on. Readers on other hosts of a shared file
  // system need clocks in sync (as heartbeats do); one host needs nothing.
  void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) override;
  std::optional<std::vector<char>> try_get(const std::string& key) override;
  void erase(const std::string& key) override;
  // Scans the directory: O(keys of the whole store), fine for one host.
  void erase_prefix(const std::string& prefix) override;
  std::string describe() const override { return "file:" + dir_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string expiring_path_of(const std::string& key) const;
  std::optional<std::vector<char>> try_get_expiring(const std::string& key) const;
  static std::string file_name_of(const std::string& key);
  // Writes `value` to a fresh temporary file next to `final_path`; returns its path.
  std::string write_temp(const std::string& final_path, const std::vector<char>& value, const char* op) const;
  std::string dir_;
};

}  // namespace ntp::comm
