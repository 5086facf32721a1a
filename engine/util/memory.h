// Handing freed heap memory back to the operating system.
#pragma once

namespace kvb {

/// Returns the heap pages freed so far to the OS (glibc malloc_trim(0): whole free pages anywhere
/// in every arena are released; a no-op elsewhere). glibc keeps freed blocks resident, and once
/// its mmap threshold has grown (it follows the largest block freed, up to 32 MiB) it serves
/// multi-megabyte blocks from the heap too, so a large temporary freed between live blocks stays
/// in the resident set for the process's life. Called where a large, short-lived allocation
/// ends: after loading a model (the tokenizer.json document built from GGUF metadata, ~25 MB of
/// small blocks), when the CPU forward releases a prefill chunk's work buffers, when a host KV
/// store is destroyed (one engine per run-grid cell or bench repeat). Costs a walk over the
/// heap's free lists (well under a millisecond after a load of SmolLM2-135M). Never throws.
void release_freed_heap() noexcept;

}  // namespace kvb
