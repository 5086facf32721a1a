// Registry entries of every policy, one function per policy file (docs/architecture.md, Policies and the policy driver).
// The entry's `params` list is the single source of each parameter's default: the policy reads
// its values through kvb::PolicyParams from the same list that `kvbench policies` prints.
#pragma once

#include "engine/policies/policy.h"

namespace kvb {

PolicyInfo streamingllm_policy_info();        ///< streamingllm.cpp
PolicyInfo random_policy_info();              ///< random.cpp
PolicyInfo h2o_policy_info();                 ///< h2o.cpp
PolicyInfo snapkv_policy_info();              ///< snapkv.cpp
PolicyInfo pyramidkv_policy_info();           ///< pyramidkv.cpp
PolicyInfo rkv_policy_info();                 ///< rkv.cpp
PolicyInfo keydiff_policy_info();             ///< keydiff.cpp
PolicyInfo gkv_policy_info();                 ///< gkv.cpp
PolicyInfo trimkv_policy_info();              ///< trimkv.cpp
PolicyInfo wgkv_policy_info();                ///< wgkv.cpp
PolicyInfo foresightkv_policy_info();         ///< foresightkv.cpp
PolicyInfo oracle_policy_info();              ///< oracle.cpp (two-pass; see oracle.h)
PolicyInfo tova_policy_info();                ///< tova.cpp
PolicyInfo knorm_policy_info();               ///< knorm.cpp
PolicyInfo expected_attention_policy_info();  ///< expected_attention.cpp
PolicyInfo adakv_policy_info();               ///< adakv.cpp
PolicyInfo duoattention_policy_info();        ///< duoattention.cpp
PolicyInfo morphkv_policy_info();             ///< morphkv.cpp
PolicyInfo cake_policy_info();                ///< cake.cpp
PolicyInfo quest_policy_info();               ///< quest.cpp
PolicyInfo locret_policy_info();              ///< locret.cpp
PolicyInfo seerattn_r_policy_info();          ///< seerattn_r.cpp

/// CAKE's layer-budget adjustment (cake.cpp; antgroup/cakekv cake/utils.py adjust_budgets): the
/// float budgets truncated to integers, each capped at `seq_len` with the excess spread evenly over
/// the layers below it, then the difference to `total` spread the same way (remainders to the first
/// layers; a deficit taken only from layers above 1). Returns one budget per layer.
std::vector<int64_t> cake_adjust_budgets(const std::vector<double>& budgets, int64_t total, int64_t seq_len);

}  // namespace kvb
