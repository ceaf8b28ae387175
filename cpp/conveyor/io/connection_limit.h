#pragma once

#include <chrono>

namespace conveyor {

/// How many requests one host is sent at once: a pure controller, shaped as
/// TCP's congestion window. While requests queue for the host it grows by
/// one per success (doubling each round), and before the first answer by one
/// per new connection the host took at once (connected()), until the host
/// first shows overload (a refused or reset connection, a connect that
/// waited for a retransmitted SYN, HTTP 429 or 503); then it halves the requests that were in flight
/// when the overloaded one started (once for all the requests started
/// before the cut), and afterwards grows by one per round (`value()`
/// successes) and at most once per `cooldown` (the overload signal arrives
/// up to a second late). A modest server (Python's
/// http.server, with a listen queue of 5) is so read at the rate it can
/// give, and a fast one (nginx, S3) reaches the most reads in flight.
///
/// Thread-safety: none; HttpStore's event-loop thread owns one per host.
class ConnectionLimit {
 public:
  using Clock = std::chrono::steady_clock;

  /// Starts at min(initial, max); never leaves [1, max].
  ConnectionLimit(int initial, int max, Clock::duration cooldown = std::chrono::seconds(1));

  int value() const { return value_; }
  /// Whether the limit was ever halved.
  bool overloaded_once() const { return overloaded_once_; }

  /// Whether connected() still counts: before the host's first answer and
  /// first overload.
  bool counts_connections() const { return counting_connections_; }
  /// A new connection to the host was ready (TCP and TLS done) sooner than a
  /// connect that shows overload. Before the host's first answer (and
  /// overload), each such connection raises the limit by one once requests
  /// wait for the host (waiting()): the host takes connections at once, and
  /// its first answers, a whole latency away (100 ms from a far or busy
  /// store), would otherwise pace the start, a round of that latency per
  /// doubling. From the first answer on, answers pace it (record()).
  void connected();
  /// Requests wait for the host: the connections counted and not yet spent
  /// raise the limit now. Returns whether it grew.
  bool waiting();

  /// One request ended at `now`. `overloaded`: it showed the host overloaded.
  /// `queued`: requests were waiting for the limit (only then can more help).
  /// `started`: when it started, and `in_flight_at_start`: the requests in
  /// flight to the host then (it included). An overload halves that, not the
  /// limit now, which may have grown while the signal was on its way (TCP's
  /// flight size); an overload of a request started before the last cut is
  /// already answered by it and ignored (TCP's recovery). Returns whether the
  /// limit was cut.
  bool record(bool overloaded, bool queued, Clock::time_point now, Clock::time_point started, int in_flight_at_start);

 private:
  int value_;
  int max_;
  Clock::duration cooldown_;
  int successes_ = 0;  // Since the limit last grew, once overloaded.
  bool counting_connections_ = true;
  int connections_not_spent_ = 0;  // Counted by connected(), not yet added by waiting().
  bool overloaded_once_ = false;
  Clock::time_point last_cut_ = Clock::time_point::min();
  Clock::time_point last_change_{};  // The last cut or growth, once overloaded.
};

}  // namespace conveyor
