#include "tasks/families.h"
namespace kvb::tasks {
TaskFactory longmemeval_factory() { return {}; }
}  // namespace kvb::tasks
