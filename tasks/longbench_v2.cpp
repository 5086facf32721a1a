#include "tasks/families.h"
namespace kvb::tasks {
TaskFactory longbench_v2_factory() { return {}; }
}  // namespace kvb::tasks
