#include "conveyor/io/mix_source.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "conveyor/core/checked_size.h"
#include "conveyor/core/error.h"
#include "conveyor/core/number_format.h"
#include "conveyor/core/rng.h"

namespace conveyor {

namespace {

// Seeds of the mixture's own random orders, apart from the loader's
// (seed, epoch) shuffle and from each other.
constexpr uint64_t kInterleaveStream = 0x6d69782d6f726465ULL;  // "mix-orde"
uint64_t part_seed(uint64_t seed, size_t part) { return mix64(seed ^ mix64(kInterleaveStream + 1 + part)); }

// Largest-remainder rounding of total x shares (which sum to 1): integers
// summing to `total`, ties to the lower part index.
std::vector<int64_t> apportion(int64_t total, const std::vector<double>& shares) {
  std::vector<int64_t> counts(shares.size());
  std::vector<double> remainders(shares.size());
  int64_t assigned = 0;
  for (size_t k = 0; k < shares.size(); ++k) {
    const double exact = static_cast<double>(total) * shares[k];
    counts[k] = static_cast<int64_t>(std::floor(exact));
    remainders[k] = exact - static_cast<double>(counts[k]);
    assigned += counts[k];
  }
  std::vector<size_t> by_remainder(shares.size());
  std::iota(by_remainder.begin(), by_remainder.end(), size_t{0});
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [&](size_t a, size_t b) { return remainders[a] > remainders[b]; });
  for (size_t i = 0; assigned < total; ++i, ++assigned) ++counts[by_remainder[i % by_remainder.size()]];
  return counts;
}

}  // namespace

MixSource::MixSource(std::vector<std::shared_ptr<const Source>> parts, std::vector<double> weights, MixStop stop,
                     int64_t epoch_size, std::vector<int64_t> label_offsets)
    : parts_(std::move(parts)), label_offsets_(std::move(label_offsets)) {
  check_config(!parts_.empty(), "Mix: needs at least one source");
  check_config(weights.size() == parts_.size(), "Mix: weights must have one value per source, got " +
                                                    std::to_string(weights.size()) + " for " +
                                                    std::to_string(parts_.size()) + " sources");
  check_config(label_offsets_.empty() || label_offsets_.size() == parts_.size(),
               "Mix: label_offsets must have one value per source, got " + std::to_string(label_offsets_.size()));
  if (label_offsets_.empty()) label_offsets_.assign(parts_.size(), 0);
  double total_weight = 0;
  for (size_t k = 0; k < parts_.size(); ++k) {
    check_config(parts_[k] != nullptr, "Mix: source " + std::to_string(k) + " is null");
    check_config(parts_[k]->size() > 0, "Mix: source " + std::to_string(k) + " has no samples");
    check_config(std::isfinite(weights[k]) && weights[k] > 0,
                 "Mix: the weight of source " + std::to_string(k) + " must be positive and finite");
    check_config(label_offsets_[k] >= 0, "Mix: label offsets must be >= 0");
    const std::optional<int64_t> largest = parts_[k]->max_label();
    if (largest && *largest > 0 && label_offsets_[k] > std::numeric_limits<int64_t>::max() - *largest) {
      throw Error(ErrorKind::kConfig, "Mix: label_offsets[" + std::to_string(k) + "] (" +
                                          std::to_string(label_offsets_[k]) + ") plus the largest label of sources[" +
                                          std::to_string(k) + "] (" + std::to_string(*largest) + ") is beyond int64 (" +
                                          std::to_string(std::numeric_limits<int64_t>::max()) + ")");
    }
    total_weight += weights[k];
    sizes_.push_back(parts_[k]->size());
  }
  std::vector<double> shares(weights.size());
  for (size_t k = 0; k < weights.size(); ++k) shares[k] = weights[k] / total_weight;

  // The epoch's length: where the stop rule ends it if each part is drawn
  // exactly its share.
  double length = 0;
  size_t deciding = 0;  // The part whose exhaustion ends the epoch.
  switch (stop) {
    case MixStop::kNever:
      check_config(epoch_size > 0, "Mix: stop='never' needs epoch_size > 0");
      length = static_cast<double>(epoch_size);
      break;
    case MixStop::kFirstExhausted:
    case MixStop::kAllExhausted: {
      check_config(epoch_size == 0, "Mix: epoch_size is only for stop='never' (the other rules derive it)");
      const bool first = stop == MixStop::kFirstExhausted;
      length = first ? std::numeric_limits<double>::infinity() : 0.0;
      for (size_t k = 0; k < parts_.size(); ++k) {
        // floor / ceil: part k's draws round(length x share) stay <= / >= its size.
        const double until_exhausted = static_cast<double>(parts_[k]->size()) / shares[k];
        const double rounded = first ? std::floor(until_exhausted + 1e-9) : std::ceil(until_exhausted - 1e-9);
        if (k == 0 || (first ? rounded < length : rounded > length)) {
          length = rounded;
          deciding = k;
        }
      }
      check_config(length < 0x1p62,
                   std::string("Mix: stop='") + (first ? "first_exhausted" : "all_exhausted") +
                       "' would draw more than 2^62 samples before sources[" + std::to_string(deciding) + "] (" +
                       std::to_string(parts_[deciding]->size()) + " samples, a share of " +
                       format_general(shares[deciding], 3) +
                       " of the draws) runs out: raise its weight, or use stop='never' with an epoch_size");
      break;
    }
  }
  check_config(length >= 1 && length < 0x1p62, "Mix: the epoch's length is out of range");
  epoch_size_ = static_cast<int64_t>(length);
  draws_ = apportion(epoch_size_, shares);
  offsets_.push_back(0);
  for (size_t k = 0; k < parts_.size(); ++k) {
    const int64_t cycles = std::max<int64_t>(1, draws_[k] / sizes_[k] + (draws_[k] % sizes_[k] != 0 ? 1 : 0));
    offsets_.push_back(checked_add(offsets_.back(), checked_mul(cycles, sizes_[k], "Mix: the sources' total size"),
                                   "Mix: the sources' total size"));
  }
}

bool MixSource::local_reads() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const auto& part) { return part->local_reads(); });
}

bool MixSource::network_reads() const {
  return std::any_of(parts_.begin(), parts_.end(), [](const auto& part) { return part->network_reads(); });
}

int MixSource::part_of(int64_t index) const {
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  return static_cast<int>(it - offsets_.begin()) - 1;
}

std::optional<int64_t> MixSource::max_label() const {
  int64_t largest = -1;
  for (size_t k = 0; k < parts_.size(); ++k) {
    const std::optional<int64_t> part = parts_[k]->max_label();
    if (!part) return std::nullopt;
    largest = std::max(largest, *part >= 0 ? *part + label_offsets_[k] : *part);  // Checked at construction.
  }
  return largest;
}

std::pair<int, int64_t> MixSource::locate(int64_t index) const {
  check_config(index >= 0 && index < size(),
               "sample index " + std::to_string(index) + " is out of range [0, " + std::to_string(size()) + ")");
  const int k = part_of(index);
  const auto part = static_cast<size_t>(k);
  return {k, (index - offsets_[part]) % sizes_[part]};
}

bool MixSource::read_is_at_hand(int64_t index, ReadPlan* /*plan*/) const {
  // A mixture makes no plan: none of its parts' is given here.
  const auto [k, local] = locate(index);
  return parts_[static_cast<size_t>(k)]->read_is_at_hand(local, nullptr);
}

Record MixSource::read(int64_t index) const {
  const auto [k, local] = locate(index);
  const auto part = static_cast<size_t>(k);
  Record record = parts_[part]->read(local);
  if (record.label >= 0) {
    const int64_t offset = label_offsets_[part];
    if (record.label > std::numeric_limits<int64_t>::max() - offset) {
      throw Error(ErrorKind::kRead,
                  "label " + std::to_string(record.label) + " plus label_offsets[" + std::to_string(k) + "] (" +
                      std::to_string(offset) + ") is beyond int64 (" +
                      std::to_string(std::numeric_limits<int64_t>::max()) + ")",
                  record.key);
    }
    record.label += offset;
  }
  return record;
}

std::string MixSource::key(int64_t index) const {
  const auto [k, local] = locate(index);
  return parts_[static_cast<size_t>(k)]->key(local);
}

std::vector<int64_t> MixSource::epoch_order(uint64_t seed, uint64_t epoch, bool shuffle) const {
  // The epoch's draws, part by part: part k's j-th draw takes its sample
  // order[j mod size] (its own order, shuffled per epoch when asked) in
  // cycle j / size ...
  std::vector<int64_t> draws;
  draws.reserve(static_cast<size_t>(epoch_size_));
  for (size_t k = 0; k < parts_.size(); ++k) {
    const int64_t n = parts_[k]->size();
    std::vector<int64_t> order;
    if (shuffle) {
      order = random_permutation(n, part_seed(seed, k), epoch);
    } else {
      order.resize(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), int64_t{0});
    }
    for (int64_t j = 0; j < draws_[k]; ++j)
      draws.push_back(offsets_[k] + j / n * n + order[static_cast<size_t>(j % n)]);
  }
  // ... then interleaved: position p takes draw interleave[p]. Always random
  // (else a mixture would be one part after the other), from (seed, epoch).
  const std::vector<int64_t> interleave = random_permutation(epoch_size_, mix64(seed ^ kInterleaveStream), epoch);
  std::vector<int64_t> out(static_cast<size_t>(epoch_size_));
  for (size_t p = 0; p < out.size(); ++p) out[p] = draws[static_cast<size_t>(interleave[p])];
  return out;
}

}  // namespace conveyor
