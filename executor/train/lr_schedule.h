#pragma once
// The learning-rate schedules (spec/lr_schedule.h), their names brought into the executor's
// namespace.
#include "spec/lr_schedule.h"

namespace cpt::exec {

using spec::LrSchedule;
using spec::LrScheduleKind;

}  // namespace cpt::exec
