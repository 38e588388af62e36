#include "comm/job_store.h"

#include <cctype>
#include <cstring>
#include <random>

#include "comm/error.h"

namespace ntp::comm {

namespace {

constexpr const char* kRecordKey = "ntp/job";

void check_job_id(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64;
  for (char c : id) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  if (!ok) throw_bad_input("job", "job id '" + id + "' is malformed (want 1-64 of A-Z a-z 0-9 - _)");
}

std::shared_ptr<Store> job_view(std::shared_ptr<Store> store, const std::string& id) {
  check_job_id(id);
  if (!store) throw_bad_input("job", "no store given");
  return std::make_shared<PrefixStore>(std::move(store), "job/" + id + "/");
}

}  // namespace

std::string new_job_id() {
  std::random_device device;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string id;
  for (int i = 0; i < 16; ++i) id += "0123456789abcdef"[digit(device)];
  return id;
}

std::shared_ptr<Store> create_job(std::shared_ptr<Store> store, const std::string& job_id) {
  auto job = job_view(std::move(store), job_id);
  if (!job->create(kRecordKey, to_bytes(job_id))) {
    throw_bad_input("job", "job id '" + job_id + "' is already in use on " + job->describe() +
                               " (a new job needs a new id)");
  }
  return job;
}

std::shared_ptr<Store> join_job(std::shared_ptr<Store> store, const std::string& job_id,
                                std::chrono::milliseconds wait) {
  auto job = job_view(std::move(store), job_id);
  try {
    job->wait({kRecordKey}, wait);
  } catch (const CommError& e) {
    if (e.kind() != CommErrorKind::kTimeout) throw;
    throw_bad_input("job", "no job '" + job_id + "' on " + job->describe() + " within " +
                               std::to_string(wait.count()) +
                               " ms: the job id is wrong (every node must be given the id the job printed at "
                               "start) or the job has not started");
  }
  return job;
}

namespace {

constexpr const char* kJobMark = "?job=";

}  // namespace

std::string job_of(const std::string& spec) {
  const auto mark = spec.rfind(kJobMark);
  return mark == std::string::npos ? "" : spec.substr(mark + std::strlen(kJobMark));
}

std::string without_job(const std::string& spec) { return spec.substr(0, spec.rfind(kJobMark)); }

std::string start_job(const std::string& spec) {
  std::string id = job_of(spec);
  if (id.empty()) id = new_job_id();
  create_job(open_store(without_job(spec)), id);
  return without_job(spec) + kJobMark + id;
}

PrefixStore::PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
    : inner_(std::move(inner)), prefix_(std::move(prefix)) {}

void PrefixStore::set(const std::string& k, const std::vector<char>& value) { inner_->set(key(k), value); }
bool PrefixStore::create(const std::string& k, const std::vector<char>& value) { return inner_->create(key(k), value); }
std::optional<std::vector<char>> PrefixStore::try_get(const std::string& k) { return inner_->try_get(key(k)); }
void PrefixStore::set_expiring(const std::string& k, const std::vector<char>& value, std::chrono::milliseconds ttl) {
  inner_->set_expiring(key(k), value, ttl);
}
void PrefixStore::erase(const std::string& k) { inner_->erase(key(k)); }
std::string PrefixStore::describe() const { return inner_->describe() + " (" + prefix_ + ")"; }
std::size_t PrefixStore::append(const std::string& k, const std::vector<char>& item) {
  return inner_->append(key(k), item);
}
std::vector<std::vector<char>> PrefixStore::items(const std::string& k, std::size_t from) {
  return inner_->items(key(k), from);
}
std::optional<std::vector<char>> PrefixStore::wait_first(const std::string& k, std::chrono::milliseconds timeout) {
  return inner_->wait_first(key(k), timeout);
}
std::vector<std::optional<std::vector<char>>> PrefixStore::get_many(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(key(k));
  return inner_->get_many(full);
}
std::vector<std::optional<std::vector<char>>> PrefixStore::get_slices(const std::vector<Slice>& slices) {
  std::vector<Slice> full = slices;
  for (auto& slice : full) slice.key = key(slice.key);
  return inner_->get_slices(full);
}
void PrefixStore::erase_prefix(const std::string& prefix) { inner_->erase_prefix(key(prefix)); }

}  // namespace ntp::comm
