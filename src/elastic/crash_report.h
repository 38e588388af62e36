#pragma once

// A worker that dies of a fatal signal or an uncaught exception says where
// in its log (stderr) before it goes: the signal or the exception's message,
// and a backtrace of the thread that died. Without it a rank "killed by
// signal 6" leaves nothing to go on.

namespace ntp::elastic {

// Installs the handlers for the life of the process (SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGABRT, and std::terminate). `rank` names a worker in
// what is written; -1 (any other ntp process) names it by pid only. A second
// call (a worker, after main's) only renames the process.
void install_crash_report(int rank = -1);

}  // namespace ntp::elastic
