#include "comm/gloo_group.h"

#include <csignal>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include <gloo/allgather.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo_mesh.h"
#include "comm/rendezvous.h"
#include "comm/signal_thread.h"

// GlooGroup's life cycle and error policy; the operations are in
// gloo_collectives.cpp and gloo_p2p.cpp.
namespace ntp::comm {

namespace {

std::shared_ptr<gloo::transport::Device> make_device(const GroupOptions& opts) {
  gloo::transport::tcp::attr attr;
  if (!opts.interface.empty()) {
    attr.iface = opts.interface;
  } else {
    attr.hostname = opts.hostname;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw group_error(opts, CommErrorKind::kBadInput, "create_group",
                      "cannot use " + (opts.interface.empty() ? "host '" + opts.hostname : "interface '" + opts.interface) +
                          "' for TCP: " + e.what());
  }
}

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) == "1";
}

bool contains(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

// The calls whose Gloo algorithms talk only to the peers of a sparse mesh
// (mesh_peers): the ring all-reduce and all-gather, the dissemination barrier;
// and point-to-point, whose peers exchange() checks.
bool runs_on_sparse_mesh(std::string_view op) {
  return op == "all_reduce" || op == "all_gather" || op == "barrier" || op == "exchange";
}

}  // namespace

GlooGroup::GlooGroup(std::shared_ptr<Store> store, GroupOptions opts)
    : GroupBase(std::move(store), std::move(opts)),
      prefix_(group_prefix(opts_.epoch, opts_.name)),
      check_every_call_(opts_.check_every_call || env_flag("NTP_COMM_CHECK_EVERY_CALL")) {
  ignore_sigpipe();  // a peer that dies while we write to it is an error, not death
  try {
    std::vector<std::vector<char>> peer_addresses;
    auto join = [&] { join_group(*store_, prefix_, opts_, connect_timeout()); };
    auto context = connect_mesh(*store_, prefix_, opts_, rank_, make_device(opts_), connect_timeout(), join,
                                peer_addresses);
    context->setTimeout(opts_.timeout);
    context_ = std::move(context);
    map_peer_addresses(peer_addresses);
  } catch (const CommError& e) {
    if (!e.group().empty()) throw;
    fail(e.kind(), "create_group", e.detail());
  } catch (const std::exception& e) {
    throw translate("create_group", e);
  }
}

GlooGroup::~GlooGroup() {
  unlist();
  executor_.drain();
}

// Gloo names a failed peer by its address; remember which group rank that is.
void GlooGroup::map_peer_addresses(const std::vector<std::vector<char>>& peer_addresses) {
  for (int i = 0; i < size(); ++i) {
    if (peer_addresses[static_cast<std::size_t>(i)].empty()) continue;  // itself, or not a peer of a sparse mesh
    try {
      std::string text = gloo::transport::tcp::Address(peer_addresses[static_cast<std::size_t>(i)]).str();
      // Drop a trailing sequence number ("$3"): messages may print it or not.
      if (auto dollar = text.find('$'); dollar != std::string::npos) text.resize(dollar);
      peer_by_address_[text] = i;
    } catch (const std::exception&) {
      // Unknown address format: errors will just not name the peer.
    }
  }
}

void GlooGroup::fail(CommErrorKind kind, const char* op, const std::string& detail, int peer_group_rank) {
  const bool known = peer_group_rank >= 0 && peer_group_rank < size();
  throw group_error(opts_, kind, op, detail, known ? opts_.ranks[static_cast<std::size_t>(peer_group_rank)] : -1);
}

CommError GlooGroup::translate(const char* op, const std::exception& e) const {
  const std::string message = e.what();
  CommErrorInfo info = group_error(opts_, CommErrorKind::kPeerError, op, message).info();
  if (contains(message, "Timed out") || contains(message, "timed out") || contains(message, "Timeout")) {
    info.kind = CommErrorKind::kTimeout;
  } else if (contains(message, "closed") || contains(message, "reset") || contains(message, "Broken pipe") ||
             contains(message, "Connection refused")) {
    info.kind = CommErrorKind::kConnectionClosed;
  } else {
    info.kind = CommErrorKind::kPeerError;
  }
  for (const auto& [address, group_rank] : peer_by_address_) {
    if (contains(message, address.c_str())) info.peer = opts_.ranks[static_cast<std::size_t>(group_rank)];
  }
  return CommError(std::move(info));
}

// Closing our connections turns a peer's wait on us into an immediate
// "connection closed", so one failure reaches every member well within the
// deadline instead of each timing out on its own.
bool GlooGroup::break_group(const CommError& error) {
  if (!mark_broken(error.what())) return false;
  if (context_) fail_connections(*context_);
  notify_failure(error);
  return true;
}

// Marking the group broken first makes the failure that wakes a call in
// flight report kBroken with this reason, not as a transport error. A group
// broken earlier has closed its connections and has no call in flight.
void GlooGroup::abort(const std::string& reason) {
  if (!mark_broken("aborted: " + reason)) return;
  if (context_) fail_connections(*context_);
}

// A call that fails because abort() broke the group meanwhile reports kBroken
// with the abort's reason rather than the transport error it woke up with.
void GlooGroup::guarded(const char* op, const std::function<void()>& body) {
  if (opts_.sparse && !runs_on_sparse_mesh(op)) {
    fail(CommErrorKind::kBadInput, op,
         "a sparse group (GroupOptions::sparse) has no connections for it; only all_reduce, all_gather, "
         "barrier and point-to-point between connected members");
  }
  executor_.run([&] {
    throw_if_broken(op);
    try {
      body();
    } catch (const CommError& e) {
      if (e.kind() == CommErrorKind::kBadInput) throw;
      if (!break_group(e)) throw_if_broken(op);
      throw;
    } catch (const std::exception& e) {
      CommError error = translate(op, e);
      if (!break_group(error)) throw_if_broken(op);
      throw error;
    }
  });
}

// Descriptors are exchanged for the first call of each shape only: a shape
// every member agreed on is remembered by all of them alike (the agreed calls
// are the same sequence on every rank), so they skip its next exchange
// together. A call that differs after its shape was agreed is then undefined,
// as with checks off; check_every_call (or NTP_COMM_CHECK_EVERY_CALL=1) keeps
// the exchange on every call for debugging.
bool GlooGroup::check_call(const CallDescriptor& call, const std::string& local_problem) {
  const char* op = to_string(call.op);
  if (!opts_.check_inputs || size() == 1) {
    if (!local_problem.empty()) fail(CommErrorKind::kBadInput, op, local_problem);
    return false;
  }
  CallDescriptor mine = call;
  mine.local_ok = local_problem.empty();
  std::vector<std::int64_t> words = encode(mine, size());
  const std::string shape(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(std::int64_t));
  if (mine.local_ok && !check_every_call_ && checked_shapes_.count(shape) != 0) return false;
  std::vector<std::int64_t> gathered(words.size() * static_cast<std::size_t>(size()));
  gloo::AllgatherOptions o(context_);
  o.setInput(words.data(), words.size());
  o.setOutput(gathered.data(), gathered.size());
  o.setTag(next_tag());
  o.setTimeout(deadline());
  gloo::allgather(o);
  if (!local_problem.empty()) fail(CommErrorKind::kBadInput, op, local_problem);
  const Mismatch mismatch = find_mismatch(gathered, size());
  if (!mismatch.detail.empty()) fail(CommErrorKind::kBadInput, op, mismatch.detail, mismatch.rank);
  if (checked_shapes_.size() >= kMaxCheckedShapes) checked_shapes_.clear();  // same on every rank
  checked_shapes_.insert(shape);
  return true;
}

}  // namespace ntp::comm
