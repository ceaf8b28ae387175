#include "conveyor/io/connection_limit.h"

#include <algorithm>

namespace conveyor {

ConnectionLimit::ConnectionLimit(int initial, int max, Clock::duration cooldown)
    : value_(std::clamp(initial, 1, std::max(1, max))), max_(std::max(1, max)), cooldown_(cooldown) {}

bool ConnectionLimit::record(bool overloaded, bool queued, Clock::time_point now) {
  if (overloaded) {
    if (overloaded_once_ && now - last_cut_ < cooldown_) return false;
    value_ = std::max(1, value_ / 2);
    last_cut_ = now;
    overloaded_once_ = true;
    successes_ = 0;
    return true;
  }
  if (queued && value_ < max_ && (!overloaded_once_ || ++successes_ >= value_)) {
    ++value_;
    successes_ = 0;
  }
  return false;
}

}  // namespace conveyor
