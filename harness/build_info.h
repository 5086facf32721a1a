// What the running binary was built from: recorded in every result row (RunInfo::git_sha) and
// printed by `kvbench --version`.
#pragma once

namespace kvb {

/// The commit the binary was built from, `git rev-parse --short=12 HEAD` at build time (not at
/// CMake configure time), with "+dirty" when tracked files differed from that commit, "unknown"
/// when the sources were not a git checkout. Generated into the build tree by cmake/git_sha.cmake.
extern const char* const kGitSha;

}  // namespace kvb
