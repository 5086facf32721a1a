// Reading /proc/<pid>/status (Linux). kvb::peak_rss_bytes (engine/engine.h) is the process's
// own peak RSS: VmHWM of /proc/self/status through parse_vm_hwm, the high-water mark of its own
// address space, which execve starts afresh, so a large parent that launched kvbench does not
// count. Where /proc/self/status is unreadable or lacks the line it falls back to
// getrusage(RUSAGE_SELF).ru_maxrss, which Linux carries across execve and so may be the
// launcher's peak. It never throws; `run` stores it as device_peak_bytes, `generate` and `bench`
// print it (docs/results.md, "Memory of the process").
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kvb {

/// The `VmHWM:` value of a /proc/<pid>/status text ("VmHWM:\t  1234 kB" → 1234 × 1024 bytes): the
/// peak resident set size of the process's own address space, which execve starts afresh. Nullopt
/// when the line is absent or not "<digits> kB", or the bytes overflow size_t. Never throws.
std::optional<size_t> parse_vm_hwm(std::string_view status);

}  // namespace kvb
