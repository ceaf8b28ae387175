#include "conveyor/io/connection_limit.h"

#include <algorithm>

namespace conveyor {

ConnectionLimit::ConnectionLimit(int initial, int max, Clock::duration cooldown)
    : value_(std::clamp(initial, 1, std::max(1, max))), max_(std::max(1, max)), cooldown_(cooldown) {}

void ConnectionLimit::connected() {
  if (counting_connections_) ++connections_not_spent_;
}

bool ConnectionLimit::waiting() {
  if (connections_not_spent_ == 0 || value_ >= max_) return false;
  value_ = std::min(max_, value_ + connections_not_spent_);
  connections_not_spent_ = 0;
  return true;
}

bool ConnectionLimit::record(bool overloaded, bool queued, Clock::time_point now, Clock::time_point started,
                             int in_flight_at_start) {
  counting_connections_ = false;
  if (overloaded) {
    connections_not_spent_ = 0;
    if (started < last_cut_) return false;
    value_ = std::max(1, std::min(value_, in_flight_at_start) / 2);
    last_cut_ = last_change_ = now;
    overloaded_once_ = true;
    successes_ = 0;
    return true;
  }
  if (!queued || value_ >= max_) return false;
  if (!overloaded_once_) {
    ++value_;
  } else if (++successes_ >= value_ && now - last_change_ >= cooldown_) {
    // Once overloaded, one more per round and per cooldown: an overload shows
    // up to a second late (a retransmitted SYN), so faster growth would
    // overshoot before the signal arrives.
    ++value_;
    successes_ = 0;
    last_change_ = now;
  }
  return false;
}

}  // namespace conveyor
