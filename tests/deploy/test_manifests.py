"""Static checks of the Kubernetes manifests in deploy/ (docs/DEPLOY.md).

No cluster is involved: every YAML document must parse, the InferencePool must carry the fields its
v1 CRD requires, and the objects must agree with each other and with graft (pool selector = pod
labels, targetPorts = container port = --port, readiness probe = GET /health, only real
`graft serve` flags, the EPP's metric names = the ones graft exports).

    python -m pytest -q tests/deploy
"""
import glob
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
FILES = sorted(glob.glob(os.path.join(DEPLOY, "*.yaml")))

POOL_API = "inference.networking.k8s.io/v1"

# `graft serve` options (docs/SERVER.md, and the runtime-LoRA options --allow-runtime-lora,
# --lora-root, --lora-dir, --max-loras-resident, --lora-memory). A flag in a manifest that is not
# here is a typo or an option graft does not have: the pod would exit at start with a CLI error.
# test_flags_are_registered_by_the_cli checks the same flags against src/cli.
GRAFT_SERVE_FLAGS = {
    # server
    "--host", "--port", "--parallel", "--batch-size", "-b", "--queue-size", "--api-key", "--alias",
    "--timeout", "--body-limit", "--metrics",
    # KV-cache events
    "--kv-events", "--kv-events-replay", "--kv-events-topic", "--kv-block-size",
    # model
    "-m", "--model", "--threads", "-t", "--ctx-size", "-c", "--cache-type", "--dtype", "--q-bits",
    "--q-group-size", "--no-mmap", "--merge-policy", "--fuse-dense", "--fuse-requantize", "--lora-dtype",
    # adapters at startup
    "--lora", "--adapter", "--lora-scaled", "--lora-init-without-apply", "--lora-fuse",
    # adapters at fleet scale
    "--allow-runtime-lora", "--lora-root", "--lora-dir", "--max-loras-resident", "--lora-memory",
}
GRAFT_SWITCHES = {"--metrics", "--allow-runtime-lora", "--lora-init-without-apply", "--lora-fuse",
                  "--no-mmap", "--fuse-dense", "--fuse-requantize"}

# What the EPP's core-metrics-extractor must read, per the Gateway API Inference Extension
# model-server protocol, and the names graft exports for them (docs/SERVER.md "Metrics").
EXPECTED_METRICS = {
    "queuedRequestsSpec": "vllm:num_requests_waiting",
    "runningRequestsSpec": "vllm:num_requests_running",
    "kvUsageSpec": "vllm:kv_cache_usage_perc",
    "loraSpec": "vllm:lora_requests_info",
}
# The same mapping as the (deprecated) EPP command-line flags, kept in comments of the manifests.
LEGACY_FLAGS = {
    "--total-queued-requests-metric": "vllm:num_requests_waiting",
    "--total-running-requests-metric": "vllm:num_requests_running",
    "--kv-cache-usage-percentage-metric": "vllm:kv_cache_usage_perc",
    "--lora-info-metric": "vllm:lora_requests_info",
}
# Residency metrics for the lora-load-state scorer (commented in the manifests until the EPP has it).
RESIDENCY_METRICS = {
    "loraLoadedSpec": "vllm:lora_adapter_loaded",
    "loraGPULoadedSpec": "vllm:num_gpu_loaded_lora_adapters",
    "loraGPUSlotsSpec": "vllm:max_gpu_lora_adapters",
}


# ---------------------------------------------------------------------------------------------
# loading and lookups (pure functions of a document list, so the checks can be run on broken copies)

def load_docs(paths=FILES):
    docs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:
                    docs.append((f"{os.path.basename(path)}#{i}", doc))
    return docs


def raw_text(paths=FILES):
    return "\n".join(open(p, encoding="utf-8").read() for p in paths)


def objects(docs, kind, api_version=None):
    return [d for _, d in docs
            if d.get("kind") == kind and (api_version is None or d.get("apiVersion") == api_version)]


def one(docs, kind, name=None, api_version=None):
    found = [d for d in objects(docs, kind, api_version) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(found)}"
    return found[0]


def pool(docs):
    return one(docs, "InferencePool", api_version=POOL_API)


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def graft_deployment(docs):
    """The Deployment whose pods the InferencePool selects."""
    sel = pool(docs)["spec"]["selector"]["matchLabels"]
    found = [d for d in objects(docs, "Deployment")
             if selects(sel, d["spec"]["template"]["metadata"].get("labels", {}))]
    assert len(found) == 1, f"the pool selector {sel} matches {len(found)} Deployments' pod templates"
    return found[0]


def graft_container(docs):
    containers = graft_deployment(docs)["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if "serve" in (c.get("command", []) + c.get("args", []))]
    assert len(found) == 1, "expected one container running `graft serve`"
    return found[0]


def serve_args(container):
    """Tokens after `serve` in command + args."""
    argv = [str(a) for a in container.get("command", []) + container.get("args", [])]
    return argv[argv.index("serve") + 1:]


def parse_flags(args):
    """{flag: value or None} from `--flag value`, `--flag=value` and switches; errors on strays."""
    flags, i = {}, 0
    while i < len(args):
        tok = args[i]
        assert tok.startswith("-"), f"stray argument {tok!r} (graft serve takes no positionals)"
        if "=" in tok:
            name, value = tok.split("=", 1)
            i += 1
        elif tok in GRAFT_SWITCHES:
            name, value = tok, None
            i += 1
        else:
            assert i + 1 < len(args), f"{tok} has no value"
            name, value = tok, args[i + 1]
            i += 2
        assert name not in flags or name == "--lora", f"{name} given twice"
        flags[name] = value
    return flags


def container_ports(container):
    return {p["containerPort"]: p.get("name") for p in container.get("ports", [])}


def probe_port_number(container, port):
    if isinstance(port, int):
        return port
    by_name = {name: num for num, name in container_ports(container).items() if name}
    assert port in by_name, f"probe port {port!r} is not a named container port"
    return by_name[port]


def epp_config(docs):
    """The EndpointPickerConfig embedded in a ConfigMap."""
    found = []
    for cm in objects(docs, "ConfigMap"):
        for key, text in (cm.get("data") or {}).items():
            if key.endswith((".yaml", ".yml")):
                doc = yaml.safe_load(text)
                if isinstance(doc, dict) and doc.get("kind") == "EndpointPickerConfig":
                    found.append((cm["metadata"]["name"], key, doc))
    assert len(found) == 1, f"expected one EndpointPickerConfig in a ConfigMap, found {len(found)}"
    return found[0]


def plugin(cfg, type_):
    found = [p for p in cfg["plugins"] if p["type"] == type_]
    assert len(found) == 1, f"expected one {type_} plugin, found {len(found)}"
    return found[0]


def epp_deployment(docs):
    cm_name, _, _ = epp_config(docs)
    found = [d for d in objects(docs, "Deployment")
             if any((v.get("configMap") or {}).get("name") == cm_name
                    for v in d["spec"]["template"]["spec"].get("volumes", []))]
    assert len(found) == 1, f"expected one Deployment mounting ConfigMap {cm_name}"
    return found[0]


def arg_value(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# ---------------------------------------------------------------------------------------------
# the checks, each a function of the documents so that test_checks_can_fail can feed it broken ones

def check_documents(docs):
    assert docs, "no YAML documents under deploy/"
    for where, d in docs:
        assert isinstance(d, dict), f"{where}: not a mapping"
        assert d.get("apiVersion"), f"{where}: no apiVersion"
        assert d.get("kind"), f"{where}: no kind"
        assert (d.get("metadata") or {}).get("name"), f"{where}: no metadata.name"


def check_pool_crd_fields(docs):
    spec = pool(docs)["spec"]
    sel = spec.get("selector", {}).get("matchLabels")
    assert isinstance(sel, dict) and 1 <= len(sel) <= 64, "spec.selector.matchLabels: 1..64 labels"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in sel.items()), "label values must be strings"
    ports = spec.get("targetPorts")
    assert isinstance(ports, list) and 1 <= len(ports) <= 8, "spec.targetPorts: 1..8 items"
    numbers = [p.get("number") for p in ports]
    assert all(type(n) is int and 1 <= n <= 65535 for n in numbers), f"targetPorts numbers {numbers}"
    assert len(set(numbers)) == len(numbers), "targetPorts numbers must be unique"
    ref = spec.get("endpointPickerRef")
    assert isinstance(ref, dict) and ref.get("name"), "spec.endpointPickerRef.name"
    if ref.get("kind", "Service") == "Service":
        assert type((ref.get("port") or {}).get("number")) is int, "endpointPickerRef.port.number (kind Service)"
    assert ref.get("failureMode", "FailClose") in ("FailOpen", "FailClose")
    assert spec.get("appProtocol", "http") in ("http", "kubernetes.io/h2c")


def check_selector_matches_pods(docs):
    dep = graft_deployment(docs)  # exactly one Deployment's pod template carries the selector
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selects(dep["spec"]["selector"]["matchLabels"], pod_labels), "Deployment selector vs its pod labels"


def check_graft_flags(docs):
    flags = parse_flags(serve_args(graft_container(docs)))
    unknown = sorted(set(flags) - GRAFT_SERVE_FLAGS)
    assert not unknown, f"not graft serve flags: {unknown}"
    assert flags.get("-m") or flags.get("--model"), "no model (-m)"
    assert flags.get("--host") == "0.0.0.0", "--host 0.0.0.0 (the default 127.0.0.1 is unreachable from the pod IP)"
    assert "--metrics" in flags, "--metrics: the EPP scrapes GET /metrics"
    if "--allow-runtime-lora" in flags:
        assert flags.get("--lora-root"), "--allow-runtime-lora requires --lora-root (graft exits 2)"
        assert "--lora-fuse" not in flags, "--allow-runtime-lora excludes --lora-fuse"
    for name in ("--port", "--parallel", "--max-loras-resident", "--threads"):
        if name in flags:
            assert re.fullmatch(r"\d+", flags[name]), f"{name} {flags[name]!r} is not an integer"


def check_paths_mounted(docs):
    c = graft_container(docs)
    flags = parse_flags(serve_args(c))
    mounts = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
    for name in ("-m", "--model", "--lora-root", "--lora-dir"):
        path = flags.get(name)
        if path:
            assert any(path == m or path.startswith(m + "/") for m in mounts), f"{name} {path} is on no volume"


def check_ports_and_probe(docs):
    c = graft_container(docs)
    flags = parse_flags(serve_args(c))
    port = int(flags.get("--port", 8080))
    assert port in container_ports(c), f"--port {port} is not a containerPort"
    targets = {p["number"] for p in pool(docs)["spec"]["targetPorts"]}
    assert targets == {port}, f"InferencePool targetPorts {targets} != graft's port {port}"
    ready = (c.get("readinessProbe") or {}).get("httpGet")
    assert ready, "readinessProbe must be an httpGet"
    assert ready.get("path") == "/health", "readinessProbe path must be /health"
    assert ready.get("scheme", "HTTP") == "HTTP"
    assert probe_port_number(c, ready["port"]) == port, "readinessProbe port != graft's port"
    assert c.get("livenessProbe"), "no livenessProbe"
    res = c.get("resources", {}).get("requests", {})
    assert res.get("cpu") and res.get("memory"), "resources.requests cpu and memory"
    for route in objects(docs, "HTTPRoute"):
        for rule in route["spec"]["rules"]:
            for b in rule.get("backendRefs", []):
                if b.get("kind") == "InferencePool" and "port" in b:
                    assert b["port"] == port, f"HTTPRoute backendRef port {b['port']} != {port}"


def check_epp_wiring(docs):
    p = pool(docs)
    ref = p["spec"]["endpointPickerRef"]
    svc = one(docs, "Service", ref["name"])
    assert ref["port"]["number"] in [sp["port"] for sp in svc["spec"]["ports"]], "EPP Service lacks the ref's port"
    dep = epp_deployment(docs)
    assert selects(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"]), \
        "EPP Service does not select the EPP pods"
    epp = dep["spec"]["template"]["spec"]["containers"][0]
    args = [str(a) for a in epp.get("args", [])]
    assert arg_value(args, "--pool-name") == p["metadata"]["name"], "EPP --pool-name != the InferencePool"
    group = arg_value(args, "--pool-group")
    assert group in (None, "inference.networking.k8s.io"), f"--pool-group {group}"
    for flag in LEGACY_FLAGS:
        assert arg_value(args, flag) is None, f"{flag} is refused by llm-d-router (use engineConfigs)"
    grpc = arg_value(args, "--grpc-port")
    assert int(grpc or 9002) == ref["port"]["number"], "EPP --grpc-port != endpointPickerRef port"
    _, key, _ = epp_config(docs)
    cfg_path = arg_value(args, "--config-file")
    mounts = {m["name"]: m["mountPath"].rstrip("/") for m in epp.get("volumeMounts", [])}
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    cm_mounts = [mounts[n] for n, v in vols.items() if "configMap" in v and n in mounts]
    assert cfg_path in [m + "/" + key for m in cm_mounts], f"--config-file {cfg_path} is not the ConfigMap's {key}"
    gateways = {g["metadata"]["name"] for g in objects(docs, "Gateway")}
    routed = False
    for route in objects(docs, "HTTPRoute"):
        for parent in route["spec"]["parentRefs"]:
            assert parent["name"] in gateways, f"HTTPRoute parent {parent['name']} is not a Gateway here"
        for rule in route["spec"]["rules"]:
            for b in rule.get("backendRefs", []):
                if b.get("kind") == "InferencePool":
                    assert b.get("group") == "inference.networking.k8s.io"
                    assert b["name"] == p["metadata"]["name"], f"HTTPRoute to unknown pool {b['name']}"
                    routed = True
    assert routed, "no HTTPRoute sends traffic to the InferencePool"
    for kind in ("InferenceObjective", "InferenceModelRewrite"):
        for o in objects(docs, kind):
            assert o["spec"]["poolRef"]["name"] == p["metadata"]["name"], f"{kind} {o['metadata']['name']} poolRef"


def check_metric_mapping(docs):
    _, _, cfg = epp_config(docs)
    params = plugin(cfg, "core-metrics-extractor").get("parameters") or {}
    engines = {e["name"]: e for e in params.get("engineConfigs", [])}
    engine_label = graft_deployment(docs)["spec"]["template"]["metadata"]["labels"].get(
        params.get("engineLabelKey", "llm-d.ai/engine-type"))
    assert engine_label in engines, f"pod engine-type label {engine_label!r} has no engineConfigs entry"
    assert params.get("defaultEngine", "vllm") in engines or params.get("defaultEngine", "vllm") == "vllm"
    graft = engines[engine_label]
    for key, name in EXPECTED_METRICS.items():
        assert graft.get(key) == name, f"engineConfigs {engine_label}.{key} = {graft.get(key)!r}, graft exports {name}"
    assert graft.get("cacheInfoSpec", None) == "vllm:cache_config_info", "cacheInfoSpec: graft's vllm:cache_config_info"
    for key, name in RESIDENCY_METRICS.items():
        assert graft.get(key, name) == name, f"engineConfigs {engine_label}.{key}"
    source = plugin(cfg, "metrics-data-source").get("parameters") or {}
    assert source.get("path", "/metrics") == "/metrics" and source.get("scheme", "http") == "http"


def check_scheduling_profile(docs):
    _, _, cfg = epp_config(docs)
    names = {p.get("name", p["type"]) for p in cfg["plugins"]}
    refs = [r["pluginRef"] for prof in cfg["schedulingProfiles"] for r in prof["plugins"]]
    for src in (cfg.get("dataLayer") or {}).get("sources", []):
        refs += [src["pluginRef"]] + [e["pluginRef"] for e in src.get("extractors", [])]
    missing = sorted(set(refs) - names)
    assert not missing, f"pluginRefs without a plugin: {missing}"
    assert "lora-affinity-scorer" in refs, "the LoRA affinity scorer is not in a scheduling profile"


def check_commented_mapping(text):
    """The metric names quoted in comments (legacy flags, residency keys) agree too."""
    for flag, name in LEGACY_FLAGS.items():
        values = re.findall(re.escape(flag) + r'[= ]"?([^"\s]+)', text)
        assert values, f"{flag} not documented in deploy/"
        assert set(values) == {name}, f"{flag} given as {values}, graft exports {name}"
    for key, name in RESIDENCY_METRICS.items():
        values = re.findall(re.escape(key) + r':\s*"?([^"\s]+)', text)
        assert set(values) <= {name}, f"{key} given as {values}, graft exports {name}"


CHECKS = [check_documents, check_pool_crd_fields, check_selector_matches_pods, check_graft_flags,
          check_paths_mounted, check_ports_and_probe, check_epp_wiring, check_metric_mapping,
          check_scheduling_profile]


# ---------------------------------------------------------------------------------------------
# tests

def test_manifest_files_exist():
    names = {os.path.basename(p) for p in FILES}
    assert {"graft-deployment.yaml", "inferencepool.yaml"} <= names


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_manifests(check):
    check(load_docs())


def test_commented_mapping():
    check_commented_mapping(raw_text())


def test_metric_names_are_graft_s():
    """Every metric name the EPP is told to read is one graft documents and its source writes."""
    server_md = open(os.path.join(ROOT, "docs", "SERVER.md"), encoding="utf-8").read()
    metrics_src = "\n".join(open(p, encoding="utf-8").read()
                            for p in glob.glob(os.path.join(ROOT, "src", "server", "*.cpp")))
    for name in EXPECTED_METRICS.values():
        assert name in server_md, f"{name} is not in docs/SERVER.md"
        assert f'"{name}' in metrics_src, f"{name} is not written by src/server"
    for name in RESIDENCY_METRICS.values():
        assert f'"{name}' in metrics_src, f"{name} is not written by src/server"


def cli_flags():
    """Every option name registered with CLI11 in src/cli (add_option/add_flag)."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "src", "cli", "*.cpp")):
        text = open(path, encoding="utf-8").read()
        for spec in re.findall(r'add_(?:option|flag)\(\s*"([^"]+)"', text):
            names.update(n for n in spec.split(",") if n.startswith("-"))
    return names


def test_flags_are_registered_by_the_cli():
    registered = cli_flags()
    if "--allow-runtime-lora" not in registered:
        pytest.skip("src/cli does not register the runtime-LoRA options yet")
    flags = parse_flags(serve_args(graft_container(load_docs())))
    missing = sorted(set(flags) - registered)
    assert not missing, f"flags no add_option/add_flag in src/cli registers: {missing}"


def break_doc(docs, kind, mutate):
    """A deep copy of docs with one object of `kind` ("Kind" or "Kind/name") changed by mutate(obj)."""
    import copy
    out = copy.deepcopy(docs)
    kind, _, name = kind.partition("/")
    for _, d in out:
        if d.get("kind") == kind and (not name or d["metadata"]["name"] == name):
            mutate(d)
            return out
    raise AssertionError(f"no {kind} to break")


def _set_args(obj, fn):
    c = [c for c in obj["spec"]["template"]["spec"]["containers"]][0]
    c["args"] = fn([str(a) for a in c["args"]])


def _epp_cfg(mutate):
    def go(cm):
        key = next(iter(cm["data"]))
        cfg = yaml.safe_load(cm["data"][key])
        mutate(cfg)
        cm["data"][key] = yaml.safe_dump(cfg)
    return go


def _extractor(cfg):
    return [p for p in cfg["plugins"] if p["type"] == "core-metrics-extractor"][0]["parameters"]["engineConfigs"][0]


BREAKAGES = [
    (check_documents, "Service", lambda d: d["metadata"].pop("name")),
    (check_pool_crd_fields, "InferencePool", lambda d: d["spec"]["selector"].__setitem__("matchLabels", {})),
    (check_pool_crd_fields, "InferencePool", lambda d: d["spec"]["targetPorts"][0].__setitem__("number", "8000")),
    (check_pool_crd_fields, "InferencePool", lambda d: d["spec"]["endpointPickerRef"].pop("name")),
    (check_pool_crd_fields, "InferencePool", lambda d: d["spec"]["endpointPickerRef"].pop("port")),
    (check_selector_matches_pods, "InferencePool", lambda d: d["spec"]["selector"]["matchLabels"].__setitem__("app", "vllm")),
    (check_graft_flags, "Deployment/graft", lambda d: _set_args(d, lambda a: a + ["--max-loras", "8"])),
    (check_graft_flags, "Deployment/graft", lambda d: _set_args(d, lambda a: [x for x in a if x != "--metrics"])),
    (check_graft_flags, "Deployment/graft", lambda d: _set_args(d, lambda a: [x for x in a if x != "0.0.0.0" and x != "--host"])),
    (check_graft_flags, "Deployment/graft", lambda d: _set_args(d, lambda a: a[:a.index("--lora-root")] + a[a.index("--lora-root") + 2:])),
    (check_paths_mounted, "Deployment/graft", lambda d: _set_args(d, lambda a: [x.replace("/adapters", "/srv/adapters") for x in a])),
    (check_ports_and_probe, "InferencePool", lambda d: d["spec"]["targetPorts"][0].__setitem__("number", 8080)),
    (check_ports_and_probe, "Deployment/graft", lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"].__setitem__("path", "/healthz")),
    (check_ports_and_probe, "Deployment/graft", lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"].__setitem__("port", 9000)),
    (check_ports_and_probe, "Deployment/graft", lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("livenessProbe")),
    (check_epp_wiring, "InferencePool", lambda d: d["spec"]["endpointPickerRef"].__setitem__("name", "epp")),
    (check_epp_wiring, "HTTPRoute", lambda d: d["spec"]["rules"][0]["backendRefs"][0].__setitem__("name", "other-pool")),
    (check_epp_wiring, "InferencePool", lambda d: d["metadata"].__setitem__("name", "renamed-pool")),
    (check_metric_mapping, "ConfigMap", _epp_cfg(lambda c: _extractor(c).__setitem__("loraSpec", "llamacpp:lora_info"))),
    (check_metric_mapping, "ConfigMap", _epp_cfg(lambda c: _extractor(c).__setitem__("kvUsageSpec", "llamacpp:kv_cache_usage_ratio"))),
    (check_metric_mapping, "ConfigMap", _epp_cfg(lambda c: _extractor(c).__setitem__("name", "vllm2"))),
    (check_metric_mapping, "ConfigMap", _epp_cfg(lambda c: _extractor(c).__setitem__("cacheInfoSpec", ""))),
    (check_scheduling_profile, "ConfigMap", _epp_cfg(lambda c: c["schedulingProfiles"][0]["plugins"].pop())),
]


@pytest.mark.parametrize("check,kind,mutate", BREAKAGES,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(BREAKAGES)])
def test_checks_can_fail(check, kind, mutate):
    """Each check rejects a manifest broken in the way it guards against."""
    docs = load_docs()
    check(docs)  # passes on the real manifests
    with pytest.raises(AssertionError):
        check(break_doc(docs, kind, mutate))


def test_commented_mapping_can_fail():
    text = raw_text()
    with pytest.raises(AssertionError):
        check_commented_mapping(text.replace("--lora-info-metric=vllm:lora_requests_info",
                                             "--lora-info-metric=vllm:lora_info"))
