// Registry entries of every policy, one function per policy file (DESIGN.md, Engine / Policy).
// The entry's `params` list is the single source of each parameter's default: the policy reads
// its values through kvb::PolicyParams from the same list that `kvbench policies` prints.
#pragma once

#include "engine/policies/policy.h"

namespace kvb {

PolicyInfo streamingllm_policy_info();  ///< streamingllm.cpp
PolicyInfo random_policy_info();        ///< random.cpp
PolicyInfo h2o_policy_info();           ///< h2o.cpp
PolicyInfo snapkv_policy_info();        ///< snapkv.cpp
PolicyInfo pyramidkv_policy_info();     ///< pyramidkv.cpp
PolicyInfo rkv_policy_info();           ///< rkv.cpp
PolicyInfo keydiff_policy_info();       ///< keydiff.cpp
PolicyInfo gkv_policy_info();           ///< gkv.cpp
PolicyInfo trimkv_policy_info();        ///< trimkv.cpp
PolicyInfo wgkv_policy_info();          ///< wgkv.cpp
PolicyInfo foresightkv_policy_info();    ///< foresightkv.cpp
PolicyInfo oracle_policy_info();         ///< oracle.cpp (two-pass; see oracle.h)

}  // namespace kvb
