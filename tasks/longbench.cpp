#include "tasks/families.h"
namespace kvb::tasks {
TaskFactory longbench_factory() { return {}; }
}  // namespace kvb::tasks
