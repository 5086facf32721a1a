// LongProc data keys (registry keys relative to a data mirror; see tasks/longproc.cpp).
#pragma once

#include <string>

namespace kvb::tasks {

/// "longproc/<task>/<task>_<len>.json" — the GitHub-layout file (reference loader input);
/// for travel_planning "longproc/travel_planning/travel_planning_all.json" (both lengths).
std::string longproc_github_key(const std::string& task, const std::string& len);
/// "longproc/hf/<task>_<len>.jsonl" — HF rows {id, input_prompt, reference_output, metadata}.
std::string longproc_hf_key(const std::string& task, const std::string& len);
/// "longproc/<task>/prompts.yaml".
std::string longproc_prompts_key(const std::string& task);

}  // namespace kvb::tasks
