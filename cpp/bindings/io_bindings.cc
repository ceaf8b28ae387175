#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "conveyor/core/cancellation.h"
#include "conveyor/core/error.h"
#include "conveyor/core/geometry.h"
#include "conveyor/io/array_source.h"
#include "conveyor/io/coco.h"
#include "conveyor/io/given_order_source.h"
#include "conveyor/io/http_store.h"
#include "conveyor/io/idx_source.h"
#include "conveyor/io/image_formats.h"
#include "conveyor/io/mix_source.h"
#include "conveyor/io/regular_file.h"
#include "conveyor/io/remote.h"
#include "conveyor/io/remote_cache.h"
#include "conveyor/io/source.h"
#include "conveyor/io/tar_shards.h"
#include "python_remote_store.h"
#include "python_source.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

nb::bytes to_bytes(const Bytes& bytes) { return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()); }

// Paths cross as the OS gives them: Python passes os.fsencode(path) (bytes),
// C++ keeps the raw bytes, and paths or keys come back through os.fsdecode's
// inverse, so a name that is not UTF-8 (b"caf\xe9.jpg") round-trips.
std::string from_path(const nb::bytes& path) { return std::string(path.c_str(), path.size()); }

std::vector<std::string> from_paths(const std::vector<nb::bytes>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const nb::bytes& path : paths) out.push_back(from_path(path));
  return out;
}

nb::str to_path(const std::string& path) {
  return nb::steal<nb::str>(PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
}

// The remote access of a source: none without a store.
std::shared_ptr<const RemoteAccess> remote_access(std::shared_ptr<RemoteStore> store, const RetryPolicy& retry) {
  if (store == nullptr) return nullptr;
  return std::make_shared<RemoteAccess>(RemoteAccess{std::move(store), retry});
}

nb::list to_paths(const std::vector<std::string>& paths) {
  nb::list out;
  for (const std::string& path : paths) out.append(to_path(path));
  return out;
}

// PythonSource takes part in Python's garbage collection: its dataset may
// refer back to it (e.g. through a module's globals), a cycle that would
// otherwise never be freed.
int python_source_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PythonSource>(self)->dataset().ptr());
  Py_VISIT(nb::inst_ptr<PythonSource>(self)->encode().ptr());
  return 0;
}

int python_source_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<PythonSource>(self)->clear();
  return 0;
}

PyType_Slot python_source_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(python_source_traverse)},
                                     {Py_tp_clear, reinterpret_cast<void*>(python_source_clear)},
                                     {0, nullptr}};

}  // namespace

void bind_io(nb::module_& m) {
  nb::class_<RetryPolicy>(m, "RetryPolicy")
      .def(
          "__init__",
          [](RetryPolicy* self, int attempts, double initial_backoff, double max_backoff, double timeout) {
            new (self) RetryPolicy{attempts, initial_backoff, max_backoff, timeout};
            self->validate();
          },
          nb::arg("attempts") = RetryPolicy{}.attempts, nb::arg("initial_backoff") = RetryPolicy{}.initial_backoff,
          nb::arg("max_backoff") = RetryPolicy{}.max_backoff, nb::arg("timeout") = RetryPolicy{}.timeout)
      .def_ro("attempts", &RetryPolicy::attempts)
      .def_ro("initial_backoff", &RetryPolicy::initial_backoff)
      .def_ro("max_backoff", &RetryPolicy::max_backoff)
      .def_ro("timeout", &RetryPolicy::timeout);
  nb::class_<RemoteStore>(m, "RemoteStore");
  // Constructed and destroyed with the GIL held; its reads take the GIL themselves.
  nb::class_<PythonRemoteStore, RemoteStore>(m, "PythonRemoteStore").def(nb::init<nb::object>(), nb::arg("store"));
  m.attr("S3_OPTION_NAMES") = s3_option_names();
  m.attr("HTTP_CONNECT_TIMEOUT") = HttpStoreOptions{}.connect_timeout;
  m.attr("HTTP_READ_TIMEOUT") = HttpStoreOptions{}.read_timeout;
  nb::class_<HttpStore, RemoteStore>(m, "HttpStore")
      .def(
          "__init__",
          [](HttpStore* self, std::vector<std::pair<std::string, std::string>> headers,
             std::optional<std::map<std::string, std::string>> s3_options,
             std::optional<std::map<std::string, std::string>> gcs_options, std::optional<double> connect_timeout,
             std::optional<double> read_timeout, std::optional<int64_t> max_read_bytes) {
            HttpStoreOptions options;
            options.headers = std::move(headers);
            if (s3_options) options.s3 = resolve_s3_config(*s3_options);
            if (gcs_options) options.gcs = gcs_config(*gcs_options);
            if (connect_timeout) options.connect_timeout = *connect_timeout;
            if (read_timeout) options.read_timeout = *read_timeout;
            if (max_read_bytes) options.max_read_bytes = *max_read_bytes;
            new (self) HttpStore(std::move(options));
          },
          nb::arg("headers") = std::vector<std::pair<std::string, std::string>>{},
          nb::arg("s3_options").none() = nb::none(), nb::arg("gcs_options").none() = nb::none(),
          nb::arg("connect_timeout").none() = nb::none(), nb::arg("read_timeout").none() = nb::none(),
          nb::arg("max_read_bytes").none() = nb::none(),
          "The native store for http(s)://, s3:// and gs:// URLs. s3_options: storage_options for s3:// "
          "(S3_OPTION_NAMES), resolved with the environment and ~/.aws; None: no s3:// URLs. gcs_options: key, "
          "secret (an HMAC key), endpoint_url, region for gs:// through GCS's XML API; None: no gs:// URLs. None "
          "for a timeout or the cap: the engine's default.")
      .def_prop_ro(
          "s3",
          [](const HttpStore& store) -> std::optional<std::string> {
            const auto& s3 = store.options().s3;
            return s3 ? std::optional(s3->describe()) : std::nullopt;
          },
          "Which S3 endpoint, region and credentials source s3:// URLs use (never a secret); None without.")
      .def_prop_ro("connect_timeout", [](const HttpStore& store) { return store.options().connect_timeout; })
      .def_prop_ro("read_timeout", [](const HttpStore& store) { return store.options().read_timeout; })
      .def(
          "counters",
          [](const HttpStore& store) {
            const HttpStoreCounters c = store.counters();
            nb::dict out;
            out["requests"] = c.requests;
            out["connections"] = c.connections;
            out["bytes"] = c.bytes;
            out["overloaded"] = c.overloaded;
            out["connections_per_host"] = c.connections_per_host;
            out["queued"] = c.queued;
            return out;
          },
          "What the store has done: requests, connections opened, body bytes, times a host's limit was halved, "
          "the largest per-host limit now, and the requests waiting now for a slot under their host's limit.");
  nb::class_<CachingStore, RemoteStore>(m, "CachingStore")
      .def(
          "__init__",
          [](CachingStore* self, std::shared_ptr<RemoteStore> store, const nb::bytes& directory, int64_t budget_bytes) {
            new (self) CachingStore(std::move(store), from_path(directory), budget_bytes);
          },
          nb::arg("store"), nb::arg("directory"), nb::arg("budget_bytes") = 0,
          "Whole objects of `store` kept in `directory` (os.fsencode() of it); budget_bytes 0: 80 % of its free "
          "space.")
      .def_prop_ro("directory", [](const CachingStore& store) { return to_path(store.directory()); })
      .def_prop_ro("budget_bytes", &CachingStore::budget_bytes)
      .def(
          "counters",
          [](const CachingStore& store) {
            const RemoteCacheCounters c = store.counters();
            nb::dict out;
            out["hits"] = c.hits;
            out["misses"] = c.misses;
            out["read_through"] = c.read_through;
            out["validations"] = c.validations;
            out["evictions"] = c.evictions;
            out["write_errors"] = c.write_errors;
            return out;
          },
          "Reads served from the folder (hits), objects fetched (misses), reads sent on while another fetched, "
          "checks of cached objects, objects evicted, and objects that could not be written.");
  m.def(
      "list_remote",
      [](std::shared_ptr<RemoteStore> store, const RetryPolicy& retry, const std::string& prefix) {
        std::vector<RemoteObject> objects;
        {
          nb::gil_scoped_release release;
          objects = RemoteAccess{store, retry}.list(prefix, prefix);
        }
        std::vector<std::pair<std::string, uint64_t>> out;
        out.reserve(objects.size());
        for (RemoteObject& object : objects) out.emplace_back(std::move(object.url), object.size);
        return out;
      },
      nb::arg("store"), nb::arg("retry"), nb::arg("prefix"),
      "[(url, size)] of every object under `prefix` (s3://bucket/prefix), in the store's order; ReadError naming "
      "the prefix.");
  m.def(
      "is_url", [](const nb::bytes& path) { return is_url(std::string_view(path.c_str(), path.size())); },
      nb::arg("path"), "Whether `path` (os.fsencode() of it) is a URL (scheme://...), read through a remote store.");
  m.def("_read_cancelled", &cancellation_requested,
        "Whether the read running on this io thread was cancelled (its loader stopped); False elsewhere.");

  nb::class_<Source>(m, "Source")
      .def("__len__", &Source::size)
      .def(
          "key", [](const Source& source, int64_t index) { return to_path(source.key(index)); }, nb::arg("index"))
      .def(
          "read",
          [](const Source& source, int64_t index) {
            Record record;
            {
              nb::gil_scoped_release release;
              record = source.read(index);
            }
            return nb::make_tuple(to_bytes(record.data), record.label, to_path(record.key));
          },
          nb::arg("index"), "Reads one sample: (bytes, label, key).")
      .def_prop_ro("epoch_size", &Source::epoch_size)
      .def("epoch_order", &Source::epoch_order, nb::arg("seed"), nb::arg("epoch"), nb::arg("shuffle"),
           nb::call_guard<nb::gil_scoped_release>(),
           "The epoch's order for a source that defines it (a mixture); else empty.")
      .def_prop_ro("parts", &Source::parts)
      .def("part_of", &Source::part_of, nb::arg("index"))
      .def_prop_ro("max_label", &Source::max_label,
                   "The largest label read() can return (-1: none has one); None when only known once read.");
  nb::enum_<MixStop>(m, "MixStop")
      .value("FIRST_EXHAUSTED", MixStop::kFirstExhausted)
      .value("ALL_EXHAUSTED", MixStop::kAllExhausted)
      .value("NEVER", MixStop::kNever);
  nb::class_<MixSource, Source>(m, "MixSource")
      .def(
          "__init__",
          [](MixSource* self, const std::vector<std::shared_ptr<Source>>& parts, std::vector<double> weights,
             MixStop stop, int64_t epoch_size, std::vector<int64_t> label_offsets) {
            new (self)
                MixSource({parts.begin(), parts.end()}, std::move(weights), stop, epoch_size, std::move(label_offsets));
          },
          nb::arg("parts"), nb::arg("weights"), nb::arg("stop"), nb::arg("epoch_size") = 0,
          nb::arg("label_offsets") = std::vector<int64_t>{})
      .def_prop_ro("draws", &MixSource::draws)
      .def("locate", &MixSource::locate, nb::arg("index"), "(part, index within the part) of sample `index`.");
  nb::class_<GivenOrderSource, Source>(m, "GivenOrderSource",
                                       "conveyor::GivenOrderSource (io/given_order_source.h): a source whose "
                                       "epochs follow a sampler's indices.")
      .def(nb::init<std::shared_ptr<const Source>, int64_t>(), nb::arg("inner"), nb::arg("epoch_size"))
      .def("set_order", &GivenOrderSource::set_order, nb::arg("epoch"), nb::arg("order"));
  nb::class_<FileSource, Source>(m, "FileSource")
      .def(
          "__init__",
          [](FileSource* self, const std::vector<nb::bytes>& paths, std::vector<int64_t> labels,
             std::vector<std::vector<BoundingBox>> boxes, std::shared_ptr<RemoteStore> remote,
             const RetryPolicy& retry) {
            new (self) FileSource(from_paths(paths), std::move(labels), std::move(boxes),
                                  remote_access(std::move(remote), retry));
          },
          nb::arg("paths"), nb::arg("labels") = std::vector<int64_t>{},
          nb::arg("boxes") = std::vector<std::vector<BoundingBox>>{}, nb::arg("remote").none() = nb::none(),
          nb::arg("retry") = RetryPolicy{},
          "paths: os.fsencode() of each path. boxes: per path, its objects (BoundingBox). remote: the store "
          "that reads the paths that are URLs, with `retry`.");

  nb::class_<TarShardSource, Source>(m, "TarShardSource")
      .def(
          "__init__",
          [](TarShardSource* self, const std::vector<nb::bytes>& shards, std::shared_ptr<RemoteStore> remote,
             const RetryPolicy& retry, const std::vector<std::optional<std::pair<uint64_t, bool>>>& listed) {
            std::vector<std::string> paths = from_paths(shards);
            std::vector<std::optional<TarShardSource::Listed>> listings;
            for (const auto& each : listed) {
              listings.push_back(each ? std::optional(TarShardSource::Listed{each->first, each->second})
                                      : std::nullopt);
            }
            // `access` keeps a reference until the GIL is back: the store's last
            // reference (when construction fails) is released with the GIL held.
            const std::shared_ptr<const RemoteAccess> access = remote_access(std::move(remote), retry);
            nb::gil_scoped_release release;
            new (self) TarShardSource(std::move(paths), access, std::move(listings));
          },
          nb::arg("shards"), nb::arg("remote").none() = nb::none(), nb::arg("retry") = RetryPolicy{},
          nb::arg("listed") = std::vector<std::optional<std::pair<uint64_t, bool>>>{},
          "shards: os.fsencode() of each path. remote: the store that reads the shards that are URLs, with "
          "`retry`. listed: empty, or per shard (size, has_index) from a listing of its prefix, or None.")
      .def_prop_ro("shards", [](const TarShardSource& source) { return to_paths(source.shards()); })
      .def_static(
          "shard_index",
          [](const nb::bytes& path) {
            std::string shard = from_path(path);
            nb::gil_scoped_release release;
            return TarShardSource::shard_index(shard);
          },
          nb::arg("path"), "The JSON index of the local shard at os.fsencode(path).")
      .def("fields", &TarShardSource::fields, nb::arg("index"))
      .def(
          "field",
          [](const TarShardSource& source, int64_t index, const std::string& name) {
            Bytes bytes;
            {
              nb::gil_scoped_release release;
              bytes = source.field(index, name);
            }
            return to_bytes(bytes);
          },
          nb::arg("index"), nb::arg("name"), "The bytes of one field (e.g. 'json') of a sample.");

  nb::class_<IdxSource, Source>(m, "IdxSource")
      .def(
          "__init__",
          [](IdxSource* self, const nb::bytes& images_path, const nb::bytes& labels_path) {
            std::string images = from_path(images_path), labels = from_path(labels_path);
            nb::gil_scoped_release release;
            new (self) IdxSource(std::move(images), std::move(labels));
          },
          nb::arg("images_path"), nb::arg("labels_path"), "Paths as os.fsencode() gives them.")
      .def_prop_ro("sample_shape", &IdxSource::sample_shape);

  // In memory: the array is kept alive by the Python object (keep_alive), and
  // the engine holds that object while it reads; noconvert, so a copy made
  // by the conversion can never be what the records point into.
  nb::class_<ArraySource, Source>(m, "ArraySource")
      .def(
          "__init__",
          [](ArraySource* self, const nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& data,
             int64_t sample_bytes, std::vector<int64_t> labels, const nb::bytes& name) {
            new (self)
                ArraySource(nullptr, {data.data(), data.size()}, sample_bytes, std::move(labels), from_path(name));
          },
          nb::arg("data").noconvert(), nb::arg("sample_bytes"), nb::arg("labels"), nb::arg("name"),
          nb::keep_alive<1, 2>(), "data: the samples' bytes, 1-D uint8 C-contiguous; name: os.fsencode()d.")
      .def_static(
          "from_file",
          [](const nb::bytes& path, int64_t offset, int64_t count, int64_t sample_bytes, std::vector<int64_t> labels) {
            std::string file = from_path(path);
            nb::gil_scoped_release release;
            return ArraySource::from_file(file, offset, count, sample_bytes, std::move(labels));
          },
          nb::arg("path"), nb::arg("offset"), nb::arg("count"), nb::arg("sample_bytes"), nb::arg("labels"),
          "Samples read with pread from the file os.fsencode(path) at offset.");

  // Constructed and destroyed with the GIL held; read() takes the GIL itself.
  nb::class_<PythonSource, Source>(m, "PythonSource", nb::type_slots(python_source_slots))
      .def(nb::init<nb::object, nb::object>(), nb::arg("dataset"), nb::arg("encode") = nb::none())
      .def_prop_ro("dataset", &PythonSource::dataset);

  nb::class_<CocoAnnotation>(m, "CocoAnnotation")
      .def_ro("id", &CocoAnnotation::id)
      .def_ro("category_id", &CocoAnnotation::category_id)
      .def_ro("bbox", &CocoAnnotation::bbox)
      .def_ro("area", &CocoAnnotation::area)
      .def_ro("iscrowd", &CocoAnnotation::iscrowd);
  nb::class_<CocoImage>(m, "CocoImage")
      .def_ro("id", &CocoImage::id)
      .def_ro("file_name", &CocoImage::file_name)
      .def_ro("width", &CocoImage::width)
      .def_ro("height", &CocoImage::height)
      .def_ro("annotations", &CocoImage::annotations);
  nb::class_<CocoCategory>(m, "CocoCategory")
      .def_ro("id", &CocoCategory::id)
      .def_ro("name", &CocoCategory::name)
      .def_ro("supercategory", &CocoCategory::supercategory);
  nb::class_<CocoDataset>(m, "CocoDataset")
      .def_ro("images", &CocoDataset::images)
      .def_ro("categories", &CocoDataset::categories);
  m.def(
      "read_coco",
      [](const nb::bytes& path) {
        std::string file = from_path(path);
        nb::gil_scoped_release release;
        return read_coco(file);
      },
      nb::arg("path"), "Parses a COCO instances file (path: os.fsencode() of it); images sorted by id.");

  m.def(
      "check_path", [](const nb::bytes& path, const std::string& what) { check_path(from_path(path), what); },
      nb::arg("path"), nb::arg("what"),
      "ConfigError naming `what` when the path (os.fsencode() of it) holds a NUL byte, which the system would "
      "take as its end.");
  m.def(
      "open_regular_file",
      [](const nb::bytes& path) {
        const std::string file = from_path(path);
        nb::gil_scoped_release release;
        return RegularFile(file).release();
      },
      nb::arg("path"),
      "A new descriptor (the caller closes it) of the regular file os.fsencode(path) open for reading, checked as "
      "read_file checks: ReadError naming it otherwise (a FIFO is refused, never waited on).");
  m.def(
      "read_file",
      [](const nb::bytes& path) {
        Bytes bytes;
        {
          std::string file = from_path(path);
          nb::gil_scoped_release release;
          bytes = read_file(file);
        }
        return to_bytes(bytes);
      },
      nb::arg("path"),
      "The content of a regular file (path: os.fsencode() of it); ReadError naming it otherwise (a FIFO is "
      "refused, never waited on).");

  nb::list extensions;
  for (std::string_view extension : kImageExtensions) extensions.append(nb::str(extension.data(), extension.size()));
  m.attr("IMAGE_EXTENSIONS") = nb::tuple(extensions);
  m.attr("MAX_REMOTE_READ_BYTES") = kMaxRemoteReadBytes;
  m.attr("SHARD_INDEX_SUFFIX") = std::string(kShardIndexSuffix);
}

}  // namespace conveyor::bindings
