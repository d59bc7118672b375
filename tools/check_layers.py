#!/usr/bin/env python3
"""The layer rules of docs/ARCHITECTURE.md as a test (ctest `check_layers`).

1. An include never points up the layer order. Which layer may use which is read from the
   `graft_layer(<name> DEPS ...)` lines of CMakeLists.txt (the link graph is the one source of truth;
   cli links server), closed transitively.
2. A header private to a folder (src/<layer>/*.h, *.inc: included as "<layer>/x.h") is included only
   from that folder and from its tests (tests/<layer>/); public headers live in include/graft/<layer>/.
3. The C++ namespace of a file follows its folder: src/<layer>/ and include/graft/<layer>/ declare
   graft::<layer> (nested namespaces and anonymous ones inside are free). A file may reopen a lower
   layer's namespace only to forward-declare its types. core/ is the project's vocabulary (Tensor,
   DType, Error) and lives in `graft` itself.

Known violations still to fix would be listed in KNOWN below (empty since the tests of compute's
private headers moved to tests/compute/); each is reported as known, a listed one that no longer
occurs fails the check too, so the list only shrinks.

Usage: check_layers.py [ROOT]      exit 1 and one line per violation, or exit 0
       check_layers.py --self-test plants one violation of each rule in a scratch tree and fails
                                   unless each is reported (the check can fail)
"""
import os
import re
import shutil
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
NAMESPACE = re.compile(r"^\s*namespace\s+([A-Za-z_][\w:]*)\s*\{", re.M)
LAYER_LINE = re.compile(r"graft_layer\((\w+)\s+DEPS\s+([^)]*)\)")
SOURCES = (".cpp", ".h", ".inc")

# (path prefix, message prefix) of violations known and scheduled to be fixed; none today.
KNOWN = []


def layer_graph(root):
    """{layer: set of layers it may include}, transitively, from CMakeLists.txt."""
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        text = f.read()
    direct = {}
    for name, deps in LAYER_LINE.findall(text):
        direct[name] = {d[len("graft_"):] for d in deps.split() if d.startswith("graft_")}
    # The Python module (pybind11_add_module(_graft ...) in CMakeLists.txt) sits on the commands.
    direct["python"] = {"cli"}
    closed = {}

    def close(layer, seen=()):
        if layer in closed:
            return closed[layer]
        if layer in seen:
            raise SystemExit(f"CMakeLists.txt: the layers form a cycle through {layer}")
        out = set()
        for d in direct.get(layer, ()):
            out |= {d} | close(d, seen + (layer,))
        closed[layer] = out
        return out

    for layer in direct:
        close(layer)
    return closed


def files_under(root, rel):
    base = os.path.join(root, rel)
    for dirpath, _, names in os.walk(base):
        for n in sorted(names):
            if n.endswith(SOURCES):
                yield os.path.relpath(os.path.join(dirpath, n), root)


def owner(path):
    """(kind, layer) of a file: kind is 'src', 'include' or 'tests'."""
    parts = path.split(os.sep)
    if parts[0] == "include" and len(parts) > 3:
        return "include", parts[2]
    if parts[0] in ("src", "tests") and len(parts) > 2:
        return parts[0], parts[1]
    return None, None


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def check_file(root, path, graph, layers):
    kind, layer = owner(path)
    if kind is None:
        return []
    with open(os.path.join(root, path), encoding="utf-8") as f:
        text = f.read()
    code = strip_comments(text)
    errors = []
    allowed = graph.get(layer, set()) | {layer}
    for inc in INCLUDE.findall(code):
        parts = inc.split("/")
        if parts[0] == "graft" and len(parts) > 2:  # public header of a layer
            target = parts[1]
            if kind != "tests" and target in layers and target not in allowed:
                errors.append(f"{path}: includes {inc}: {layer}/ may not use {target}/ (up the layer order)")
        elif parts[0] in layers and len(parts) > 1 and not os.path.exists(os.path.join(root, "src", inc)):
            if kind == "tests" and os.path.exists(os.path.join(root, "tests", inc)) and parts[0] != layer:
                errors.append(f"{path}: includes tests/{inc}: a helper shared across test folders lives in tests/support/")
        elif parts[0] in layers and len(parts) > 1:  # a folder's private header
            target = parts[0]
            if kind == "include":
                errors.append(f"{path}: public header includes the private header {inc}")
            elif target != layer:
                errors.append(f"{path}: includes {inc}, private to src/{target}/ "
                              f"(only src/{target}/ and tests/{target}/ may; make it public in include/graft/{target}/)")
            elif kind != "tests" and target not in allowed:
                errors.append(f"{path}: includes {inc}: up the layer order")
    if kind == "tests":
        return errors
    expected = "graft" if layer == "core" else f"graft::{layer}"
    for ns in NAMESPACE.findall(code):
        if ns != "graft" and not ns.startswith("graft::"):
            continue  # namespaces nested inside (detail, fs aliases) or third-party
        if ns == expected or ns.startswith(expected + "::"):
            continue
        other = ns.split("::")[1] if ns.count("::") else "core"
        if other in graph.get(layer, set()) and forward_only(code, ns):
            continue
        errors.append(f"{path}: namespace {ns}: files in {kind}/{'graft/' if kind == 'include' else ''}{layer}/ "
                      f"declare {expected}")
    return errors


def forward_only(code, ns):
    """True if every block `namespace ns { ... }` holds only forward declarations."""
    for m in re.finditer(r"namespace\s+" + re.escape(ns) + r"\s*\{([^{}]*)\}", code):
        body = [s.strip() for s in m.group(1).split(";") if s.strip()]
        if not all(re.fullmatch(r"(struct|class|enum class|enum)\s+\w+(\s*:\s*\w+)?", s) for s in body):
            return False
    return True


def violations(root):
    graph = layer_graph(root)
    errors = []
    for rel in ("src", "include/graft", "tests"):
        for path in files_under(root, rel):
            errors += check_file(root, path, graph, set(graph))
    return graph, errors


def is_known(error, known):
    return any(error.startswith(p) and error.split(": ", 1)[1].startswith(m) for p, m in known)


def check(root, known):
    graph, errors = violations(root)
    new = [e for e in errors if not is_known(e, known)]
    stale = [k for k in known if not any(is_known(e, [k]) for e in errors)]
    for e in new:
        print(e)
    for p, m in stale:
        print(f"{p}: the known violation '{m}' is gone: remove it from KNOWN in tools/check_layers.py")
    n_known = len(errors) - len(new)
    if new or stale:
        print(f"check_layers: {len(new)} violation(s) of the layer rules (docs/ARCHITECTURE.md)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(graph)} layers in order ({n_known} known violations left in KNOWN)")
    return 0


PLANTED = {
    "CMakeLists.txt": "graft_layer(core DEPS Threads::Threads)\ngraft_layer(io DEPS graft_core)\n"
                      "graft_layer(compute DEPS graft_core)\ngraft_layer(engine DEPS graft_io graft_compute)\n"
                      "graft_layer(server DEPS graft_engine)\n",
    "src/io/up.cpp": '#include "graft/engine/engine.h"\nnamespace graft::io {}\n',
    "src/server/reach.cpp": '#include "compute/private.h"\nnamespace graft::server {}\n',
    "src/compute/private.h": "namespace graft::compute {}\n",
    "src/engine/wrong_ns.cpp": "namespace graft::server {\nint f() { return 1; }\n}\n",
    "src/engine/forward.h": "namespace graft::io {\nstruct File;\n}\nnamespace graft::engine {}\n",
}
PLANTED_EXPECT = ["src/io/up.cpp: includes graft/engine/engine.h", "src/server/reach.cpp: includes compute/private.h",
                  "src/engine/wrong_ns.cpp: namespace graft::server"]


def self_test():
    """Plants one violation of each rule (and one allowed forward declaration) and checks the report."""
    tmp = tempfile.mkdtemp(prefix="check_layers_")
    try:
        for rel, text in PLANTED.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)) or tmp, exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        _, errors = violations(tmp)
        missing = [x for x in PLANTED_EXPECT if not any(e.startswith(x) for e in errors)]
        extra = [e for e in errors if not any(e.startswith(x) for x in PLANTED_EXPECT)]
        for m in missing:
            print(f"self-test: the planted violation '{m}' was not reported")
        for e in extra:
            print(f"self-test: reported what is allowed: {e}")
        if missing or extra:
            return 1
        print(f"check_layers --self-test: {len(PLANTED_EXPECT)} planted violations reported, nothing else")
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    if sys.argv[1:2] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    return check(root, KNOWN)


if __name__ == "__main__":
    sys.exit(main())
