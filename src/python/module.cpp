// graft._graft: the C++ half of the Python package (python/graft/__init__.py is the other). The
// engine runs with the GIL released; graft::Error becomes the package's exception for its kind
// (the classes are registered by __init__.py, one per CLI exit code); logits come back as a numpy
// array over the engine's own buffer (no copy).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>

#include "graft/cli/commands.h"
#include "graft/core/error.h"
#include "python/model.h"

namespace py = pybind11;

namespace graft::python {

namespace {

// The package's exception class per ErrorKind (set once by __init__.py; kept for the process).
std::array<PyObject*, 6> g_error_classes{};

void register_errors(const py::dict& classes) {
  for (const auto& [kind, cls] : classes) {
    const int k = kind.cast<int>();
    if (k < 0 || k >= static_cast<int>(g_error_classes.size())) throw py::value_error("error kind out of range");
    g_error_classes[static_cast<size_t>(k)] = cls.ptr();
    Py_INCREF(cls.ptr());
  }
}

// Every C++ exception but pybind11's own becomes the package's class for the CLI's kind.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::exception& e) {
    const cli::Failure f = cli::failure_of(e);
    PyObject* cls = g_error_classes[static_cast<size_t>(f.kind)];
    PyErr_SetString(cls ? cls : PyExc_RuntimeError, f.message.c_str());
  }
}

engine::SequenceParams sequence_params(const Model& m, const py::dict& o) {
  engine::SequenceParams p;
  auto& s = p.sampling;
  p.max_tokens = o["max_tokens"].cast<int64_t>();
  s.temperature = o["temperature"].cast<float>();
  s.top_k = o["top_k"].cast<int32_t>();
  s.top_p = o["top_p"].cast<float>();
  s.min_p = o["min_p"].cast<float>();
  s.repeat_penalty = o["repeat_penalty"].cast<float>();
  s.presence_penalty = o["presence_penalty"].cast<float>();
  s.frequency_penalty = o["frequency_penalty"].cast<float>();
  s.seed = o["seed"].is_none() ? std::random_device{}() : o["seed"].cast<uint64_t>();
  runtime::validate(s);
  p.stop = o["stop"].cast<std::vector<std::string>>();
  if (!o["ignore_eos"].cast<bool>()) p.eos_ids = m.eos_ids();
  return p;
}

py::array_t<float> logits_array(std::vector<float> rows, int64_t n, int64_t vocab) {
  auto* owned = new std::vector<float>(std::move(rows));
  py::capsule free_when_done(owned, [](void* v) { delete static_cast<std::vector<float>*>(v); });
  return py::array_t<float>({n, vocab}, owned->data(), free_when_done);
}

void bind_model(py::module_& m) {
  py::class_<Generation, std::shared_ptr<Generation>>(m, "Generation")
      .def("next", &Generation::next, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("tokens", &Generation::tokens)
      .def_property_readonly("text", &Generation::text)
      .def_property_readonly("finish_reason", &Generation::finish_reason)
      .def_property_readonly("prompt_tokens", &Generation::prompt_tokens);

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def(py::init<const std::vector<std::string>&, const std::vector<std::string>&, bool>(),
           py::call_guard<py::gil_scoped_release>())
      .def("tokenize",
           [](const Model& self, const std::string& text, std::optional<bool> add_special, bool parse_special) {
             return self.tokenizer().encode(text, parse_special, add_special);
           })
      .def("detokenize", [](const Model& self, const std::vector<int32_t>& ids, bool skip_special) {
        return self.tokenizer().decode(ids, skip_special);
      })
      .def("chat_render", &Model::chat_render)
      .def("chat_encode", &Model::chat_encode)
      .def_property_readonly("context", &Model::context)
      .def_property_readonly("vocab_size", &Model::vocab_size)
      .def("logits",
           [](Model& self, const std::vector<int32_t>& tokens, const LoraScales& lora) {
             std::vector<float> rows;
             {
               py::gil_scoped_release release;
               rows = self.logits(tokens, lora);
             }
             return logits_array(std::move(rows), static_cast<int64_t>(tokens.size()), self.vocab_size());
           })
      .def("start",
           [](std::shared_ptr<Model> self, std::vector<int32_t> prompt, const py::dict& options, const LoraScales& lora) {
             engine::SequenceParams p = sequence_params(*self, options);
             py::gil_scoped_release release;
             p.adapters = self->adapters(lora);
             return std::make_shared<Generation>(self, std::move(prompt), std::move(p));
           })
      .def("load_lora", &Model::load_lora, py::call_guard<py::gil_scoped_release>())
      .def("unload_lora", &Model::unload_lora, py::call_guard<py::gil_scoped_release>())
      .def("loras", [](const Model& self) {
        py::list out;
        for (const auto& a : self.loras())
          out.append(py::dict(py::arg("id") = a.id, py::arg("name") = a.name, py::arg("path") = a.path,
                              py::arg("scale") = a.scale, py::arg("rank") = a.rank, py::arg("resident") = a.resident));
        return out;
      });
}

}  // namespace

PYBIND11_MODULE(_graft, m) {
  m.doc() = "graft's engine (use the graft package, not this module)";
  m.def("_register_errors", &register_errors);
  py::register_exception_translator(&translate);
  bind_model(m);
  // The command line in process: graft.fuse, graft.convert, graft.quantize, graft.inspect run it.
  m.def(
      "run_command", &cli::run_command,
      py::call_guard<py::gil_scoped_release>());
  m.def("resolve_adapter", &cli::resolve_adapter_path, py::call_guard<py::gil_scoped_release>());
  m.def(
      "inspect_json",
      [](const std::string& adapter, const std::string& base) { return cli::inspect_json(adapter, base).dump(); },
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace graft::python
