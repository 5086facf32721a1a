// The one parser of `name[:key=value,key=value,...]` specs: policy specs (`rkv:window=8,buffer=16`,
// engine/policies/policy.h PolicySpec::parse) and task specs (`gsm8k:template=rkv`,
// tasks/task.h parse_task_spec) both go through it, so the two cannot disagree.
#pragma once

#include <map>
#include <string>

namespace kvb {

/// A parsed `name[:key=value,...]` spec: the name and its parameters (sorted by key).
struct NamedSpec {
  std::string name;
  std::map<std::string, std::string> params;
};

/// Parses `text` as `name[:key=value,key=value,...]`. Values may be empty (`gates=`) and may
/// contain '=' and ':' (everything after a key's first '='); commas always separate parameters.
/// A bare `name:` has no parameters. `what` names the kind of spec in messages ("policy spec",
/// "task spec"). Throws kvb::Error (exit code 2), quoting the whole spec, on: an empty name; a
/// parameter without '=' or with an empty key; an empty parameter (a stray comma); a key given twice.
NamedSpec parse_named_spec(const std::string& text, const char* what);

}  // namespace kvb
