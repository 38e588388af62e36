#include "comm/error.h"

#include <sstream>

namespace ntp::comm {

const char* to_string(CommErrorKind kind) {
  switch (kind) {
    case CommErrorKind::kTimeout: return "timeout";
    case CommErrorKind::kConnectionClosed: return "connection closed";
    case CommErrorKind::kPeerError: return "peer error";
    case CommErrorKind::kBadInput: return "bad input";
    case CommErrorKind::kBroken: return "group broken";
  }
  return "unknown";
}

namespace {

std::string format_message(const CommErrorInfo& info) {
  std::ostringstream out;
  out << "comm " << to_string(info.kind);
  if (!info.op.empty()) out << " in " << info.op;
  if (!info.group.empty()) out << " on group '" << info.group << "' epoch " << info.epoch;
  if (info.rank >= 0) out << " (rank " << info.rank << ")";
  if (info.peer >= 0) out << " peer rank " << info.peer;
  if (!info.detail.empty()) out << ": " << info.detail;
  return out.str();
}

}  // namespace

CommError::CommError(CommErrorInfo info)
    : std::runtime_error(format_message(info)), info_(std::move(info)) {}

void throw_bad_input(const std::string& op, const std::string& detail) {
  CommErrorInfo info;
  info.kind = CommErrorKind::kBadInput;
  info.op = op;
  info.detail = detail;
  throw CommError(std::move(info));
}

}  // namespace ntp::comm
