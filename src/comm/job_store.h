#pragma once
// Job isolation on a shared store. Every key of a job lives under
// "job/<id>/", and the job's record ("job/<id>/ntp/job") is created once, by
// compare-and-set, by whoever starts the job; a process that joins must name
// the same id and finds the record, so a process of another job, a stale one
// of an earlier run, or one with a mistyped id is refused at once with a
// clear error instead of registering, voting or receiving state.
//
//   const std::string id = new_job_id();                  // printed at start
//   auto job = create_job(open_store(spec), id);          // the first node
//   auto same = join_job(open_store(spec), id, 10s);      // every other process
//   auto also = open_store(spec + "?job=" + id);          // the same, from a spec
#include <chrono>
#include <memory>
#include <string>

#include "comm/store.h"

namespace ntp::comm {

// 16 random hex digits.
std::string new_job_id();

// Starts job `job_id` on `store`; throws CommError(kBadInput) when the id is
// malformed (want 1-64 of [A-Za-z0-9_-]) or already in use there.
std::shared_ptr<Store> create_job(std::shared_ptr<Store> store, const std::string& job_id);

// Joins job `job_id`, waiting up to `wait` for its record (its starter may
// be a moment behind); throws CommError(kBadInput) naming the id and the store
// when there is no such job.
std::shared_ptr<Store> join_job(std::shared_ptr<Store> store, const std::string& job_id,
                                std::chrono::milliseconds wait);

// A store spec may name its job: "<spec>?job=<id>" (e.g.
// "redis://10.0.0.1:6379/team?job=3f9c..."); open_store() then joins that job
// (join_job, waiting up to 10 s for its record), so the id travels with the
// spec to every process of the job. job_of() reads the id (empty for none);
// without_job() strips it.
std::string job_of(const std::string& spec);
std::string without_job(const std::string& spec);

// For the process that starts a job on a shared store: claims the job the
// spec names, or a new id when it names none, and returns the spec with its
// job, to hand to every other process (and to print).
std::string start_job(const std::string& spec);

// Every key under `prefix` of `inner`.
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix);

  void set(const std::string& key, const std::vector<char>& value) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  void set_expiring(const std::string& key, const std::vector<char>& value, std::chrono::milliseconds ttl) override;
  std::optional<std::vector<char>> try_get(const std::string& key) override;
  void erase(const std::string& key) override;
  std::string describe() const override;
  std::size_t append(const std::string& key, const std::vector<char>& item) override;
  std::vector<std::vector<char>> items(const std::string& key, std::size_t from = 0) override;
  std::optional<std::vector<char>> wait_first(const std::string& key, std::chrono::milliseconds timeout) override;
  std::vector<std::optional<std::vector<char>>> get_many(const std::vector<std::string>& keys) override;
  std::vector<std::optional<std::vector<char>>> get_slices(const std::vector<Slice>& slices) override;
  void erase_prefix(const std::string& prefix) override;

 private:
  std::string key(const std::string& k) const { return prefix_ + k; }
  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace ntp::comm
