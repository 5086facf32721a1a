#include "tasks/families.h"
namespace kvb::tasks {
TaskFactory scbench_factory() { return {}; }
}  // namespace kvb::tasks
