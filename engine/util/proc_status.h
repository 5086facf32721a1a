// Reading /proc/<pid>/status (Linux). kvb::peak_rss_bytes (engine/engine.h) reads the process's
// own peak RSS through parse_vm_hwm.
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
