#pragma once

#include <string>

namespace conveyor {

/// Numbers for messages, formatted like printf without its buffers or format
/// strings. Thread-safety: pure functions.

/// `value` with `significant` significant digits, like printf("%.*g"):
/// format_general(0.25) is "0.25", format_general(1e-9, 17) is "1.0000000000000001e-09".
std::string format_general(double value, int significant = 6);

/// `value` with `decimals` digits after the point, like printf("%.*f"):
/// format_fixed(1.25, 1) is "1.2", format_fixed(1500, 0) is "1500".
std::string format_fixed(double value, int decimals);

/// A size in bytes with a binary unit, one decimal unless whole:
/// human_bytes(768) is "768 bytes", 1.5 * 2**30 gives "1.5 GiB".
std::string human_bytes(double bytes);

/// The shortest text that reads back as `value` (17 significant digits at
/// most), as Python's repr: format_shortest(0.1) is "0.1", 1e-9 gives "1e-09".
std::string format_shortest(double value);

}  // namespace conveyor
