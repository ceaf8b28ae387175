#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "conveyor/core/error.h"
#include "conveyor/io/coco.h"
#include "conveyor/io/idx_source.h"
#include "conveyor/io/source.h"
#include "conveyor/io/tar_shards.h"
#include "conveyor/ops/raw_tensor_transform.h"
#include "python_source.h"

namespace nb = nanobind;

namespace conveyor::bindings {

namespace {

nb::bytes to_bytes(const Bytes& bytes) { return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()); }

// PythonSource takes part in Python's garbage collection: its dataset may
// refer back to it (e.g. through a module's globals), a cycle that would
// otherwise never be freed.
int python_source_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PythonSource>(self)->dataset().ptr());
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
  nb::class_<Source>(m, "Source")
      .def("__len__", &Source::size)
      .def("key", &Source::key, nb::arg("index"))
      .def(
          "read",
          [](const Source& source, int64_t index) {
            Record record;
            {
              nb::gil_scoped_release release;
              record = source.read(index);
            }
            return nb::make_tuple(to_bytes(record.data), record.label, record.key);
          },
          nb::arg("index"), "Reads one sample: (bytes, label, key).");
  using BoxTuple = std::tuple<float, float, float, float, int64_t>;
  nb::class_<FileSource, Source>(m, "FileSource")
      .def(
          "__init__",
          [](FileSource* self, std::vector<std::string> paths, std::vector<int64_t> labels,
             const std::vector<std::vector<BoxTuple>>& boxes) {
            std::vector<std::vector<BoundingBox>> converted(boxes.size());
            for (size_t i = 0; i < boxes.size(); ++i) {
              for (const auto& [x, y, w, h, category] : boxes[i]) converted[i].push_back({x, y, w, h, category});
            }
            new (self) FileSource(std::move(paths), std::move(labels), std::move(converted));
          },
          nb::arg("paths"), nb::arg("labels") = std::vector<int64_t>{},
          nb::arg("boxes") = std::vector<std::vector<BoxTuple>>{},
          "boxes: per path, its objects as (x, y, width, height, category) tuples.");

  nb::class_<TarShardSource, Source>(m, "TarShardSource")
      .def(nb::init<std::vector<std::string>>(), nb::arg("shards"), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("shards", &TarShardSource::shards)
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
      .def(nb::init<std::string, std::string>(), nb::arg("images_path"), nb::arg("labels_path"),
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("sample_shape", &IdxSource::sample_shape);

  // Constructed and destroyed with the GIL held; read() takes the GIL itself.
  nb::class_<PythonSource, Source>(m, "PythonSource", nb::type_slots(python_source_slots))
      .def(nb::init<nb::object>(), nb::arg("dataset"))
      .def_prop_ro("dataset", &PythonSource::dataset);

  m.def(
      "read_coco",
      [](const std::string& path) {
        CocoDataset coco;
        {
          nb::gil_scoped_release release;
          coco = read_coco(path);
        }
        nb::list images;
        for (const CocoImage& image : coco.images) {
          nb::list boxes, category_ids, annotation_ids, iscrowd, area;
          for (const CocoAnnotation& a : image.annotations) {
            boxes.append(nb::make_tuple(a.bbox[0], a.bbox[1], a.bbox[2], a.bbox[3]));
            category_ids.append(a.category_id);
            annotation_ids.append(a.id);
            iscrowd.append(a.iscrowd);
            area.append(a.area);
          }
          nb::dict d;
          d["id"] = image.id;
          d["file_name"] = image.file_name;
          d["width"] = image.width;
          d["height"] = image.height;
          d["boxes"] = boxes;
          d["category_ids"] = category_ids;
          d["annotation_ids"] = annotation_ids;
          d["iscrowd"] = iscrowd;
          d["area"] = area;
          images.append(d);
        }
        nb::list categories;
        for (const CocoCategory& c : coco.categories) {
          nb::dict d;
          d["id"] = c.id;
          d["name"] = c.name;
          d["supercategory"] = c.supercategory;
          categories.append(d);
        }
        return nb::make_tuple(images, categories);
      },
      nb::arg("path"), "Parses a COCO instances file: (images sorted by id, categories), as dicts.");

  // The transform of raw-pixel sources (ops layer, bound here beside the
  // sources that need it).
  nb::class_<RawTensorTransform, SampleTransform>(m, "RawTensorTransform")
      .def(
          "__init__",
          [](RawTensorTransform* self, int64_t height, int64_t width, int64_t channels, const std::string& dtype,
             bool channels_first, std::vector<float> mean, std::vector<float> std) {
            RawTensorSpec spec;
            spec.height = height;
            spec.width = width;
            spec.channels = channels;
            spec.dtype = parse_dtype(dtype);
            spec.channels_first = channels_first;
            spec.mean = std::move(mean);
            spec.std = std::move(std);
            new (self) RawTensorTransform(std::move(spec));
          },
          nb::arg("height"), nb::arg("width"), nb::kw_only(), nb::arg("channels") = 1, nb::arg("dtype") = "uint8",
          nb::arg("channels_first") = true, nb::arg("mean") = std::vector<float>{},
          nb::arg("std") = std::vector<float>{});
}

}  // namespace conveyor::bindings
