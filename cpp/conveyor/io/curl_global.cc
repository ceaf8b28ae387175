#include "conveyor/io/curl_global.h"

#include <curl/curl.h>

#include <mutex>

#include "conveyor/core/error.h"

namespace conveyor {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw Error(ErrorKind::kConfig, "libcurl failed to initialise (curl_global_init)");
    }
  });
}

}  // namespace conveyor
