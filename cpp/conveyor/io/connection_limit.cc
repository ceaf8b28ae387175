#include "conveyor/io/connection_limit.h"

#include <algorithm>

namespace conveyor {

ConnectionLimit::ConnectionLimit(int initial, int max, Clock::duration cooldown)
    : value_(std::clamp(initial, 1, std::max(1, max))), max_(std::max(1, max)), cooldown_(cooldown) {}

bool ConnectionLimit::connected(bool queued) {
  if (overloaded_once_) return false;
  ++connections_not_counted_;
  return queued && waiting();
}

bool ConnectionLimit::waiting() {
  if (overloaded_once_ || connections_not_counted_ == 0 || value_ >= max_) return false;
  value_ = std::min(max_, value_ + connections_not_counted_);
  connections_not_counted_ = 0;
  return true;
}

bool ConnectionLimit::record(bool overloaded, bool queued, Clock::time_point now, Clock::time_point started,
                             int in_flight_at_start) {
  if (overloaded) {
    if (started < last_cut_) return false;
    value_ = std::max(1, std::min(value_, in_flight_at_start) / 2);
    last_cut_ = last_change_ = now;
    overloaded_once_ = true;
    successes_ = 0;
    connections_not_counted_ = 0;
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
