#pragma once

namespace conveyor {

/// Initialises libcurl once per process (curl_global_init; thread-safe).
/// Every libcurl user of the io layer calls it first. Throws Error{kConfig}
/// when libcurl cannot initialise.
void init_curl_once();

}  // namespace conveyor
