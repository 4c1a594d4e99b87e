"""Real `helm lint` of charts/contentserver-operator (Helm's Go code via e2e/lib/helm_native.py).

Lints with default values and with every optional part enabled, and proves the lint can fail:
a typo key, a wrong type, a broken template and a template `fail` are all reported.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from lib import helm_native

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "contentserver-operator"
ALL_ENABLED = CHART / "ci" / "all-enabled-values.yaml"


@pytest.fixture(scope="module", autouse=True)
def helm_library() -> None:
    # Downloads the pinned wheel on a fresh machine (scripts/deps.sh does it too).
    helm_native.ensure()
    assert helm_native.version().startswith("helm-sdkpy-")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def describe(res: helm_native.LintResult) -> str:
    msgs = ", ".join(f"{m.severity}:{m.path}" for m in res.messages)
    return f"messages=[{msgs}] errors={res.error_count} log={res.log}"


def test_lint_default_values() -> None:
    res = helm_native.lint(CHART)
    assert res.charts_linted == 1
    assert res.ok, describe(res)


def test_lint_every_optional_part_enabled() -> None:
    values = load(ALL_ENABLED)
    # The file really switches every optional part on.
    assert values["serviceMonitor"]["enabled"] is True
    assert values["serviceMonitor"]["labels"].get("release")
    assert values["prometheusRule"]["enabled"] is True
    assert values["dashboards"]["enabled"] is True
    assert values["networkPolicy"]["enabled"] is True
    assert values["networkPolicy"]["egress"]["enabled"] is True
    assert values["networkPolicy"]["metricsFrom"]
    assert values["metrics"]["service"]["enabled"] is True
    assert values["prometheusAdapter"]["rules"]["enabled"] is True
    assert values["watchNamespaces"], "namespaced RBAC (Role per namespace) must be linted too"
    res = helm_native.lint_with_values(CHART, values)
    assert res.ok, describe(res)


def test_lint_cluster_wide_with_optional_parts() -> None:
    values = load(ALL_ENABLED)
    values["watchNamespaces"] = []
    res = helm_native.lint_with_values(CHART, values)
    assert res.ok, describe(res)


@pytest.mark.parametrize(
    "broken",
    [
        {"serviceMonitr": {"enabled": True}},  # typo at the top level
        {"serviceMonitor": {"enabled": True, "lables": {"release": "x"}}},  # nested typo
        {"dashboards": {"label": {"grafana_dashboard": "1"}}},
        {"replicaCount": "two"},  # wrong type
        {"metrics": {"service": {"type": "Ingress"}}},  # not in the enum
        {"watchNamespaces": ["Not_A_Namespace"]},
        {"prometheusAdapter": {"rules": {"enable": True}}},
        {"prometheusAdapter": {"rules": {"enabled": True, "namespace": "Monitoring"}}},
        {"image": {"tag": "sha256:" + "a" * 64}},  # a digest is not a tag
        {"image": {"digest": "sha256:short"}},
        {"fullnameOverride": "BadName"},  # not a DNS-1123 label: every object would be refused
        {"nameOverride": "bad_name"},
        {"networkPolicy": {"enabled": True, "egress": {"enabled": True, "apiServerCIDRs": ["not-a-cidr"]}}},
        {"networkPolicy": {"enabled": True, "egress": {"enabled": True, "apiServerCIDRs": ["10.0.0.1"]}}},
    ],
    ids=["top-level-typo", "nested-typo", "dashboards-typo", "wrong-type", "bad-enum", "bad-ns",
         "adapter-typo", "adapter-bad-ns", "digest-as-tag", "bad-digest", "bad-fullname", "bad-name",
         "bad-cidr", "cidr-without-prefix"],
)
def test_lint_rejects_values_the_schema_forbids(broken: dict) -> None:
    res = helm_native.lint_with_values(CHART, broken)
    assert not res.ok
    assert res.error_count >= 1, describe(res)
    assert any(m.severity == "ERROR" and m.path == "values.yaml" for m in res.messages), describe(res)


def test_lint_reports_template_fail() -> None:
    # A ServiceMonitor without the Service it selects is refused by the template itself.
    res = helm_native.lint_with_values(
        CHART, {"serviceMonitor": {"enabled": True}, "metrics": {"service": {"enabled": False}}}
    )
    assert not res.ok
    assert any("serviceMonitor.enabled needs metrics.service.enabled" in line for line in res.template_failures)


@pytest.mark.parametrize("arg,value", [("--lease-name=other", "fullnameOverride"),
                                       ("--metrics-listen=0.0.0.0:9999", "metrics.address"),
                                       ("--namespaces", "watchNamespaces"),
                                       ("--allow-host-path", "allowHostPath"),
                                       ("--lease-namespace=ops", "the release namespace")])
def test_lint_refuses_extra_args_the_chart_sets_itself(arg: str, value: str) -> None:
    """The operator refuses a flag given twice, and a --lease-name of its own would miss the
    Role's resourceNames: the template names the value to use instead."""
    res = helm_native.lint_with_values(CHART, {"extraArgs": [arg]})
    assert not res.ok
    flag = arg.split("=", 1)[0]
    assert any(f"extraArgs: {flag} is set by the chart; use {value}" in line
               for line in res.template_failures), describe(res)
    assert helm_native.lint_with_values(CHART, {"extraArgs": ["--namespaces-x=ops"]}).ok


@pytest.mark.parametrize("interval,timeout,ok", [("30s", "10s", True), ("30s", "30s", True),
                                                 ("30s", "31s", False), ("1m", "59s999ms", True),
                                                 ("1m", "1m1ms", False), ("1h", "2m", True),
                                                 ("500ms", "1s", False), ("0", "10s", False),
                                                 ("010s", "9s", True), ("90s", "1m30s", True),
                                                 ("08s", "9s", False)])
def test_lint_refuses_a_scrape_timeout_longer_than_the_interval(interval: str, timeout: str, ok: bool) -> None:
    """Prometheus refuses a scrape config whose timeout exceeds its interval."""
    res = helm_native.lint_with_values(CHART, {"serviceMonitor": {
        "enabled": True, "interval": interval, "scrapeTimeout": timeout}})
    assert res.ok == ok, describe(res)
    if not ok:
        assert any(f"serviceMonitor.scrapeTimeout ({timeout}) is longer than serviceMonitor.interval ({interval})"
                   in line for line in res.template_failures), describe(res)
    if interval == "0":
        assert any("leave interval empty for Prometheus' global interval" in line
                   for line in res.template_failures), describe(res)
    # An empty interval is Prometheus' global one: not checked.
    assert helm_native.lint_with_values(CHART, {"serviceMonitor": {
        "enabled": True, "interval": "", "scrapeTimeout": timeout}}).ok


def test_lint_fails_on_a_broken_template(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    dep = copy / "templates" / "deployment.yaml"
    text = dep.read_text()
    action = "{{ include \"cso.fullname\" . | quote }}"
    assert action in text
    dep.write_text(text.replace(action, action[:-2], 1))  # an action left open
    res = helm_native.lint(copy)
    assert not res.ok
    assert any(m.severity == "ERROR" and m.path.startswith("templates") for m in res.messages), describe(res)


def test_lint_fails_when_a_dashboard_copy_is_missing(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    shutil.rmtree(copy / "files" / "dashboards")
    res = helm_native.lint(copy)
    assert not res.ok
    assert any("run scripts/sync-chart.sh" in line for line in res.template_failures), describe(res)


def test_lint_fails_when_the_adapter_rules_copy_is_missing(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    (copy / "files" / "prometheus-adapter.yaml").unlink()
    res = helm_native.lint_with_values(copy, {"prometheusAdapter": {"rules": {"enabled": True}}})
    assert not res.ok
    assert any("run scripts/sync-chart.sh" in line for line in res.template_failures), describe(res)


def test_lint_fails_when_the_rbac_rules_file_is_broken(tmp_path: Path) -> None:
    copy = tmp_path / CHART.name
    shutil.copytree(CHART, copy)
    rules = copy / "files" / "rbac-rules.yaml"
    rules.write_text(rules.read_text().replace("watchedNamespaces:", "watchedNamespace:"))
    res = helm_native.lint(copy)
    assert not res.ok
    assert any("missing key watchedNamespaces" in line for line in res.template_failures), describe(res)


def schema_paths(schema: dict, prefix: str = "") -> set[str]:
    """Dotted paths of every fixed-key object property of the values schema."""
    out: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        if sub.get("type") == "object" and sub.get("additionalProperties") is False:
            out |= schema_paths(sub, path + ".")
    return out


def value_paths(values: dict, schema: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, v in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        sub = (schema.get("properties") or {}).get(key, {})
        if isinstance(v, dict) and sub.get("additionalProperties") is False:
            out |= value_paths(v, sub, path + ".")
    return out


def test_values_schema_is_strict_and_matches_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = load(CHART / "values.yaml")
    jsonschema.validate(defaults, schema)
    jsonschema.validate(load(ALL_ENABLED), schema)

    # Every fixed-key object forbids unknown keys, so a typo anywhere is an error.
    def walk(s: dict, where: str) -> None:
        if "properties" in s:
            assert s.get("additionalProperties") is False, f"{where} accepts unknown keys"
            for k, sub in s["properties"].items():
                walk(sub, f"{where}.{k}")

    walk(schema, "values")
    # The operator's metrics address: `*`, IPv4 or bare IPv6; a host name cannot be bound.
    for good in ["*", "0.0.0.0", "::", "fd00::1"]:
        jsonschema.validate({**defaults, "metrics": {**defaults["metrics"], "address": good}}, schema)
    for bad in ["localhost", "", "[::]", "*:8080"]:
        try:
            jsonschema.validate({**defaults, "metrics": {**defaults["metrics"], "address": bad}}, schema)
        except jsonschema.ValidationError:
            continue
        raise AssertionError(f"metrics.address {bad!r} passed the schema")
    # values.yaml documents a default for every key the schema knows, and nothing else.
    assert schema_paths(schema) == value_paths(defaults, schema)


def test_readme_values_reference_lists_every_top_level_value() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "<!-- packaging:helm -->" not in readme, "README Helm section not written"
    section = readme.split("## Install with Helm", 1)[1].split("\n## ", 1)[0]
    for key in load(CHART / "values.yaml"):
        assert f"`{key}" in section, f"README values reference misses {key}"
    assert "kubectl apply --server-side -f crds/" in section


# ---------------------------------------------------------------------------------------------
# Rendered manifests: Helm's real install action against e2e/lib/fake_kube.py records exactly
# the objects Helm sends to a cluster.

NS = "contentserver-system"
RELEASE = "csop"
FULLNAME = f"{RELEASE}-contentserver-operator"


def render(values: dict) -> list[dict]:
    return helm_native.render(CHART, values, namespace=NS, release=RELEASE)


def by_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[dict], kind: str) -> dict:
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, got {[m['metadata']['name'] for m in found]}"
    return found[0]


def rbac_rules() -> dict:
    return load(CHART / "files" / "rbac-rules.yaml")


@pytest.fixture(scope="module")
def default_manifests() -> list[dict]:
    return render({})


@pytest.fixture(scope="module")
def full_manifests() -> list[dict]:
    return render(load(ALL_ENABLED))


def test_default_install_creates_only_the_core_objects(default_manifests: list[dict]) -> None:
    kinds = sorted(m["kind"] for m in default_manifests)
    assert kinds == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
         "Deployment"] + ["ConfigMap"] * len(list((CHART / "files" / "dashboards").glob("*.json")))
    )
    for m in default_manifests:
        if m["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert m["metadata"].get("namespace", NS) == NS


def test_image_by_tag_appversion_or_digest(default_manifests: list[dict]) -> None:
    def image(manifests: list[dict]) -> str:
        return one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]

    repo = load(CHART / "values.yaml")["image"]["repository"]
    app = load(CHART / "Chart.yaml")["appVersion"]
    assert image(default_manifests) == f"{repo}:{app}"
    assert image(render({"image": {"tag": "v9.1"}})) == f"{repo}:v9.1"
    digest = "sha256:" + "0123456789abcdef" * 4
    assert image(render({"image": {"tag": "v9.1", "digest": digest}})) == f"{repo}@{digest}"


def test_operator_pod_is_locked_down(default_manifests: list[dict]) -> None:
    dep = one(default_manifests, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run" and not any(a.startswith("--namespaces") for a in args)
    assert f"--metrics-listen=*:{load(CHART / 'values.yaml')['metrics']['port']}" in args
    # Another address: an IPv6 one gets its brackets, a bad one is refused by the schema.
    for addr, flag in [("::", "--metrics-listen=[::]:8080"), ("10.0.0.1", "--metrics-listen=10.0.0.1:8080")]:
        dep = one(render({"metrics": {"address": addr}}), "Deployment")
        assert flag in dep["spec"]["template"]["spec"]["containers"][0]["args"], addr
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["serviceAccountName"] == one(default_manifests, "ServiceAccount")["metadata"]["name"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    chart = load(CHART / "Chart.yaml")
    assert c["image"] == f"ghcr.io/content-platform/content-operator:{chart['appVersion']}"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["resources"]["limits"]["memory"]
    port_names = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] in port_names, probe
    svc = one(default_manifests, "Service")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] in port_names


def test_cluster_wide_rbac_is_exactly_the_rules_file(default_manifests: list[dict]) -> None:
    rules = rbac_rules()
    role = one(default_manifests, "ClusterRole")
    assert role["rules"] == (rules["clusterScoped"] or []) + rules["watchedNamespaces"]
    binding = one(default_manifests, "ClusterRoleBinding")
    sa = one(default_manifests, "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NS}]
    self_role = one(default_manifests, "Role")
    assert self_role["metadata"]["namespace"] == NS
    # The Lease rules name the operator's own Lease: the --lease-name the chart passes.
    args = one(default_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    assert lease == FULLNAME
    named = [dict(r, resourceNames=[lease]) if r.get("resourceNames") == ["LEASE_NAME"] else r
             for r in rules["operatorNamespace"]]
    assert named != rules["operatorNamespace"], "the Lease's get/update must be limited to its name"
    assert self_role["rules"] == named
    assert not any("create" in r["verbs"] and r.get("resourceNames") for r in self_role["rules"]), \
        "create cannot be limited by resourceNames: the Lease could never be created"
    for m in by_kind(default_manifests, "ClusterRole") + by_kind(default_manifests, "Role"):
        for rule in m["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule


def test_namespaced_rbac_has_one_role_per_watched_namespace(full_manifests: list[dict]) -> None:
    values = load(ALL_ENABLED)
    rules = rbac_rules()
    roles = {m["metadata"]["namespace"]: m for m in by_kind(full_manifests, "Role")
             if m["metadata"]["name"] == FULLNAME}
    assert sorted(roles) == sorted(values["watchNamespaces"])
    for role in roles.values():
        assert role["rules"] == rules["watchedNamespaces"]
    bindings = {m["metadata"]["namespace"] for m in by_kind(full_manifests, "RoleBinding")
                if m["metadata"]["name"] == FULLNAME}
    assert bindings == set(values["watchNamespaces"])
    # Nothing cluster-wide unless the operator needs cluster-scoped resources.
    cluster_roles = by_kind(full_manifests, "ClusterRole")
    if rules["clusterScoped"]:
        assert [r["rules"] for r in cluster_roles] == [rules["clusterScoped"]]
    else:
        assert cluster_roles == [] and by_kind(full_manifests, "ClusterRoleBinding") == []
    args = one(full_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run"
    assert f"--namespaces={','.join(values['watchNamespaces'])}" in args, args
    assert "--allow-host-path" in args, args


def test_host_path_volumes_are_off_unless_the_chart_allows_them(default_manifests: list[dict]) -> None:
    """hostPath volumes are the cluster admin's choice: the operator refuses them (InvalidSpec)
    unless it runs with --allow-host-path, which only allowHostPath: true passes."""
    def args(manifests: list[dict]) -> list[str]:
        return one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert load(CHART / "values.yaml")["allowHostPath"] is False
    assert "--allow-host-path" not in args(default_manifests)
    assert "--allow-host-path" in args(render({"allowHostPath": True}))
    assert "--allow-host-path" in operator_cli_flags()
    res = helm_native.lint_with_values(CHART, {"allowHostPath": "yes"})
    assert not res.ok, "the values schema wants a boolean"


def test_service_monitor_selects_the_metrics_service(full_manifests: list[dict]) -> None:
    sm = one(full_manifests, "ServiceMonitor")
    svc = one(full_manifests, "Service")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["metadata"]["namespace"] == "monitoring"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert ep["interval"] == "15s" and ep["scrapeTimeout"] == "5s"


def test_prometheus_rule_carries_the_alerts_file(full_manifests: list[dict]) -> None:
    rule = one(full_manifests, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == load(ROOT / "dashboards" / "alerts.yaml")["groups"]


def dashboard_configmaps(manifests: list[dict]) -> list[dict]:
    return [cm for cm in by_kind(manifests, "ConfigMap") if "-dashboard-" in cm["metadata"]["name"]]


# The prometheus-adapter rule of the autoscaling contract (COORDINATION: issue 15).
ADAPTER_RULE = {
    "seriesQuery": 'contentserver_pool_busy_seconds_total{namespace!="",pod!=""}',
    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
    "name": {"matches": "^contentserver_pool_busy_seconds_total$", "as": "contentserver_pool_utilization"},
    "metricsQuery": "max by (<<.GroupBy>>) (clamp_max(sum by (namespace, pod, volume) "
                    "(rate(contentserver_pool_busy_seconds_total{<<.LabelMatchers>>}[2m]))"
                    " / sum by (namespace, pod, volume) (contentserver_pool_threads{<<.LabelMatchers>>}), 1))",
}


def test_prometheus_adapter_rules_configmap(default_manifests: list[dict], full_manifests: list[dict]) -> None:
    source = (ROOT / "dashboards" / "prometheus-adapter.yaml").read_text()
    assert load(ROOT / "dashboards" / "prometheus-adapter.yaml")["rules"] == [ADAPTER_RULE]
    assert [cm for cm in by_kind(default_manifests, "ConfigMap") if "adapter" in cm["metadata"]["name"]] == []
    values = load(ALL_ENABLED)["prometheusAdapter"]["rules"]
    (cm,) = [cm for cm in by_kind(full_manifests, "ConfigMap") if cm["metadata"]["name"] == values["name"]]
    assert cm["metadata"]["namespace"] == values["namespace"]
    assert cm["metadata"]["labels"]["team"] == "media"
    assert list(cm["data"]) == ["config.yaml"]
    assert cm["data"]["config.yaml"].strip() == source.strip()
    assert yaml.safe_load(cm["data"]["config.yaml"])["rules"] == [ADAPTER_RULE]
    (default_name,) = [cm for cm in render({"prometheusAdapter": {"rules": {"enabled": True}}})
                       if cm["kind"] == "ConfigMap" and "adapter" in cm["metadata"]["name"]]
    assert default_name["metadata"]["name"] == f"{FULLNAME}-adapter-rules"
    assert default_name["metadata"]["namespace"] == NS


def test_dashboards_are_configmaps_with_the_sidecar_label(
    default_manifests: list[dict], full_manifests: list[dict]
) -> None:
    sources = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert sources, "dashboards/*.json missing"
    for manifests in (default_manifests, full_manifests):
        cms = dashboard_configmaps(manifests)
        data = {}
        for cm in cms:
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
            data.update(cm["data"])
        assert set(data) == set(sources)
        for name, text in data.items():
            assert json.loads(text) == json.loads(sources[name]), name
    for cm in dashboard_configmaps(full_manifests):
        assert cm["metadata"]["annotations"]["grafana_folder"] == "Content platform"
    custom = render({"dashboards": {"labels": {"grafana_dashboard": None, "dashboards": "media"}}})
    for cm in dashboard_configmaps(custom):
        assert cm["metadata"]["labels"]["dashboards"] == "media"
        assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert by_kind(render({"dashboards": {"enabled": False}}), "ConfigMap") == []


def test_network_policy_opens_only_the_metrics_port(full_manifests: list[dict]) -> None:
    np_ = one(full_manifests, "NetworkPolicy")
    dep = one(full_manifests, "Deployment")
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert sorted(np_["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    (ingress,) = np_["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
    assert ingress["from"] == load(ALL_ENABLED)["networkPolicy"]["metricsFrom"]
    egress_ports = sorted(p["port"] for rule in np_["spec"]["egress"] for p in rule["ports"])
    assert egress_ports == [53, 53, 443, 6443]
    cidrs = [t["ipBlock"]["cidr"] for rule in np_["spec"]["egress"] for t in rule.get("to", [])]
    assert cidrs == load(ALL_ENABLED)["networkPolicy"]["egress"]["apiServerCIDRs"]


def operator_cli_flags() -> set[str]:
    """Long flags of `content-operator run`, from the clap fields of operator/src/main.rs."""
    text = (ROOT / "operator" / "src" / "main.rs").read_text()
    body = text.split("struct RunArgs", 1)[1].split("\n}", 1)[0]
    flags = set()
    for attr, field in re.findall(r"#\[arg\(([^]]*?)\)\]\s*(?:///[^\n]*\n\s*)*(\w+)\s*:", body, re.S):
        if re.search(r"\blong\b", attr):
            m = re.search(r'long\s*=\s*"([^"]+)"', attr)
            flags.add("--" + (m.group(1) if m else field.replace("_", "-")))
    return flags


def test_chart_passes_only_flags_the_operator_has(default_manifests: list[dict], full_manifests: list[dict]) -> None:
    flags = operator_cli_flags()
    assert {"--namespaces", "--metrics-listen", "--lease-name"} <= flags, flags
    assert "Run(RunArgs)" in (ROOT / "operator" / "src" / "main.rs").read_text()
    extra = set(load(ALL_ENABLED)["extraArgs"])
    for manifests in (default_manifests, full_manifests):
        args = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "run"
        for a in args[1:]:
            if a in extra:
                continue
            assert a.split("=", 1)[0] in flags, f"{a} is not a content-operator run flag"


@pytest.mark.parametrize("release", ["edge-platform-europe-west-prod-01", "a" * 53, "media-cdn-operator-prod"])
def test_dashboard_configmap_names_stay_distinct_for_long_release_names(release: str) -> None:
    """The dashboard ConfigMaps are named <fullname>-dashboard-<file>, cut to 63 characters: the
    fullname is cut, not the suffix, so two dashboards never get the same name."""
    manifests = helm_native.render(CHART, {}, namespace=NS, release=release)
    names = [cm["metadata"]["name"] for cm in dashboard_configmaps(manifests)]
    files = sorted(p.stem for p in (CHART / "files" / "dashboards").glob("*.json"))
    assert len(names) == len(files) == len(set(names)), names
    for name in names:
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert sorted(n.rsplit("-dashboard-", 1)[1] for n in names) == files


# Kinds whose names are DNS labels (63 characters); the RBAC kinds take up to 253.
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.mark.parametrize("release", ["a" * 33, "edge-platform-europe-west-prod-01", "b" * 53])
def test_every_object_name_fits_its_kind_for_long_release_names(release: str) -> None:
    """Every rendered object (all features enabled) gets a name its kind accepts: suffixed names
    (<fullname>-metrics, -adapter-rules, -dashboard-<file>) cut the fullname, not the suffix."""
    values = load(ALL_ENABLED)
    values["prometheusAdapter"]["rules"]["name"] = ""  # the default, derived from the fullname
    manifests = helm_native.render(CHART, values, namespace=NS, release=release)
    kinds = {m["kind"] for m in manifests}
    assert {"Service", "ConfigMap", "Deployment", "ServiceMonitor"} <= kinds, kinds
    names = set()
    for m in manifests:
        name, kind = m["metadata"]["name"], m["kind"]
        limit = 253 if kind in RBAC_KINDS else 63
        assert len(name) <= limit, f"{kind} {name}: {len(name)} > {limit}"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), f"{kind} {name}"
        names.add((kind, m["metadata"].get("namespace"), name))
    assert len(names) == len(manifests), "two objects got the same name"
    service = one(manifests, "Service")["metadata"]["name"]
    assert service.endswith("-metrics") and service.startswith(release[:40]), service
    adapter = [cm["metadata"]["name"] for cm in by_kind(manifests, "ConfigMap")
               if cm["metadata"]["name"].endswith("-adapter-rules")]
    assert len(adapter) == 1, [cm["metadata"]["name"] for cm in by_kind(manifests, "ConfigMap")]


@pytest.mark.parametrize("release", ["2024", "true", "on", "1e3", "null"])
def test_a_release_name_yaml_reads_as_a_scalar_stays_a_string(release: str) -> None:
    """A release named like a YAML number, bool or null renders: its instance label is the string
    (in every object's labels, the Deployment's selector and its pod labels, the Service's
    selector), not a number."""
    values = load(ALL_ENABLED)
    if release[0].isdigit():
        values["fullnameOverride"] = "media-operator"  # see the next test
    manifests = helm_native.render(CHART, values, namespace=NS, release=release)
    dep = one(manifests, "Deployment")
    svc = one(manifests, "Service")
    for labels in [m["metadata"]["labels"] for m in manifests if m["metadata"].get("labels")] + [
        dep["spec"]["selector"]["matchLabels"],
        dep["spec"]["template"]["metadata"]["labels"],
        svc["spec"]["selector"],
    ]:
        assert labels["app.kubernetes.io/instance"] == release, labels
    assert dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "contentserver-operator"


@pytest.mark.parametrize("release", ["2024", "1e3", "9-media"])
def test_a_release_name_starting_with_a_digit_fails_with_a_way_out(release: str) -> None:
    """A Service name is a DNS-1035 label (a letter first): the apiserver would refuse
    <release>-contentserver-operator-metrics at install time, after the other objects were
    created. The chart says so at render time and names the way out; with fullnameOverride or
    without the metrics Service the release installs."""
    with pytest.raises(helm_native.HelmNativeError) as failed:
        helm_native.render(CHART, {}, namespace=NS, release=release)
    assert "must start with a letter" in str(failed.value) and "fullnameOverride" in str(failed.value)
    # Set by fullnameOverride, the message names it (not the release name).
    with pytest.raises(helm_native.HelmNativeError) as failed:
        helm_native.render(CHART, {"fullnameOverride": "9abc"}, namespace=NS, release="csop")
    assert 'fullnameOverride "9abc" starts with a digit' in str(failed.value), failed.value
    assert '"csop"' not in str(failed.value), failed.value
    named = helm_native.render(CHART, {"fullnameOverride": "media-operator"}, namespace=NS, release=release)
    assert one(named, "Service")["metadata"]["name"] == "media-operator-metrics"
    no_service = helm_native.render(CHART, {"metrics": {"service": {"enabled": False}}}, namespace=NS,
                                    release=release)
    assert by_kind(no_service, "Service") == []
    assert one(no_service, "Deployment")["metadata"]["labels"]["app.kubernetes.io/instance"] == release


def test_pod_labels_cannot_override_the_selector_labels() -> None:
    """podLabels add labels to the pod but never change the selector's: the apiserver refuses a
    Deployment whose selector does not match its template."""
    dep = one(render({"podLabels": {"app.kubernetes.io/name": "x", "app.kubernetes.io/instance": "y",
                                    "team": "media", "app.kubernetes.io/component": "ctl"}}),
              "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector and all(labels[k] == v for k, v in selector.items()), (selector, labels)
    assert labels["team"] == "media"
    assert labels["app.kubernetes.io/component"] == "ctl", "other chart labels may be overridden"


# ---------------------------------------------------------------------------------------------
# Values that YAML reads as numbers, booleans or null when written unquoted: every template line
# that puts a user value, a name or the release namespace into a manifest quotes it.

def walk_strings(obj: object, path: str = "") -> list[tuple[str, object]]:
    """(path, value) of every metadata name/namespace, label and annotation key/value, selector
    label and string-typed spec field of the chart that is not a string."""
    bad: list[tuple[str, object]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            here = f"{path}.{k}"
            if not isinstance(k, str):
                bad.append((here, k))
            if k in ("labels", "annotations", "matchLabels", "selector", "nodeSelector") and isinstance(v, dict):
                bad += [(f"{here}.{lk}", lv) for lk, lv in v.items()
                        if not isinstance(lk, str) or (not isinstance(lv, str) and not isinstance(lv, dict))]
            if k in ("name", "namespace", "serviceAccountName", "priorityClassName", "interval",
                     "scrapeTimeout", "type", "imagePullPolicy", "image", "cidr") and not isinstance(v, (str, dict)):
                bad.append((here, v))
            if k in ("args", "matchNames", "policyTypes"):
                bad += [(f"{here}[{i}]", a) for i, a in enumerate(v) if not isinstance(a, str)]
            bad += walk_strings(v, here)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad += walk_strings(v, f"{path}[{i}]")
    return bad


def assert_all_strings(manifests: list[dict]) -> None:
    for m in manifests:
        bad = walk_strings(m, f"{m['kind']}/{m['metadata'].get('name')}")
        assert not bad, bad


@pytest.mark.parametrize("namespace", ["2024", "1e3", "true", "null", "0x1a"])
def test_a_release_namespace_yaml_reads_as_a_scalar_installs(namespace: str) -> None:
    """`helm install -n 2024`: every object in the release namespace, the RBAC subjects and the
    ServiceMonitor's namespaceSelector carry the namespace as a string (unquoted, Helm refused the
    install: "cannot unmarshal number into ... metadata.namespace")."""
    values = load(ALL_ENABLED)
    manifests = helm_native.render(CHART, values, namespace=namespace, release=RELEASE)
    assert_all_strings(manifests)
    for kind in ("Deployment", "ServiceAccount", "Service", "NetworkPolicy"):
        assert one(manifests, kind)["metadata"]["namespace"] == namespace, kind
    self_roles = [m for m in by_kind(manifests, "Role") + by_kind(manifests, "RoleBinding")
                  if m["metadata"]["name"] == f"{FULLNAME}-self"]
    assert len(self_roles) == 2 and all(m["metadata"]["namespace"] == namespace for m in self_roles)
    for binding in by_kind(manifests, "RoleBinding") + by_kind(manifests, "ClusterRoleBinding"):
        assert [s["namespace"] for s in binding["subjects"]] == [namespace], binding
    assert one(manifests, "ServiceMonitor")["spec"]["namespaceSelector"] == {"matchNames": [namespace]}
    # Cluster-wide RBAC and default namespaces for the optional objects.
    cluster = helm_native.render(CHART, {"watchNamespaces": [], "serviceMonitor": {"enabled": True},
                                         "prometheusRule": {"enabled": True},
                                         "prometheusAdapter": {"rules": {"enabled": True}}},
                                 namespace=namespace, release=RELEASE)
    assert_all_strings(cluster)
    assert one(cluster, "ClusterRoleBinding")["subjects"][0]["namespace"] == namespace
    for m in cluster:
        if m["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert m["metadata"]["namespace"] == namespace, (m["kind"], m["metadata"])


# A values file whose strings YAML 1.1 would read as numbers, booleans or null when unquoted.
SCALAR_LOOKALIKE_VALUES = """
watchNamespaces: ["2024", "1e3", "true", "null"]
serviceAccount:
  name: "1000"
priorityClassName: "100"
logLevel: "1"
metrics:
  service:
    labels:
      team: "1"
      tier: "true"
    annotations:
      example.com/port: "8080"
serviceMonitor:
  enabled: true
  namespace: "null"
  interval: "0"
  scrapeTimeout: "0"
  labels:
    release: "2024"
prometheusRule:
  enabled: true
  namespace: "0x1a"
  labels:
    release: "on"
prometheusAdapter:
  rules:
    enabled: true
    name: "1e3"
    namespace: "2025"
    labels:
      team: "yes"
dashboards:
  namespace: "true"
  labels:
    grafana_dashboard: "1"
  annotations:
    grafana_folder: "123"
podLabels:
  team: "007"
podAnnotations:
  example.com/audit: "true"
networkPolicy:
  enabled: true
  egress:
    enabled: true
    apiServerCIDRs: ["10.96.0.1/32", "::1/128"]
"""


def test_values_yaml_reads_as_scalars_stay_strings() -> None:
    """Names, namespaces, durations and labels given as "2024", "1000", "1e3", "true", "null",
    "0" stay strings in the manifests (unquoted, the install failed or the objects were invalid:
    a numeric namespace, serviceAccountName or priorityClassName, interval: 0)."""
    values = yaml.safe_load(SCALAR_LOOKALIKE_VALUES)
    assert values["serviceAccount"]["name"] == "1000" and values["dashboards"]["namespace"] == "true"
    manifests = helm_native.render(CHART, values, namespace=NS, release=RELEASE)
    assert_all_strings(manifests)

    sa = one(manifests, "ServiceAccount")
    assert sa["metadata"]["name"] == "1000"
    pod = one(manifests, "Deployment")["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == "1000"
    assert pod["spec"]["priorityClassName"] == "100"
    assert pod["metadata"]["labels"]["team"] == "007"
    assert pod["metadata"]["annotations"]["example.com/audit"] == "true"
    (c,) = pod["spec"]["containers"]
    assert "--namespaces=2024,1e3,true,null" in c["args"], c["args"]
    assert {"name": "RUST_LOG", "value": "1"} in c["env"]

    roles = {m["metadata"]["namespace"] for m in by_kind(manifests, "Role") if m["metadata"]["name"] == FULLNAME}
    bindings = [m for m in by_kind(manifests, "RoleBinding") if m["metadata"]["name"] == FULLNAME]
    assert roles == {m["metadata"]["namespace"] for m in bindings} == {"2024", "1e3", "true", "null"}
    for b in bindings + [m for m in by_kind(manifests, "RoleBinding") if m["metadata"]["name"].endswith("-self")]:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "1000", "namespace": NS}]

    svc = one(manifests, "Service")
    assert svc["metadata"]["labels"]["team"] == "1" and svc["metadata"]["labels"]["tier"] == "true"
    assert svc["metadata"]["annotations"]["example.com/port"] == "8080"
    sm = one(manifests, "ServiceMonitor")
    assert sm["metadata"]["namespace"] == "null"
    assert sm["metadata"]["labels"]["release"] == "2024"
    assert sm["spec"]["endpoints"][0]["interval"] == "0" and sm["spec"]["endpoints"][0]["scrapeTimeout"] == "0"
    rule = one(manifests, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "0x1a" and rule["metadata"]["labels"]["release"] == "on"
    (adapter,) = [cm for cm in by_kind(manifests, "ConfigMap") if cm["metadata"]["name"] == "1e3"]
    assert adapter["metadata"]["namespace"] == "2025" and adapter["metadata"]["labels"]["team"] == "yes"
    cms = dashboard_configmaps(manifests)
    assert cms and all(cm["metadata"]["namespace"] == "true" for cm in cms)
    assert all(cm["metadata"]["annotations"]["grafana_folder"] == "123" for cm in cms)
    cidrs = [t["ipBlock"]["cidr"] for r in one(manifests, "NetworkPolicy")["spec"]["egress"] for t in r.get("to", [])]
    assert cidrs == ["10.96.0.1/32", "::1/128"]


@pytest.mark.parametrize("fullname", ["12345", "1e3", "0x1a"])
def test_a_numeric_fullname_override_stays_a_string(fullname: str) -> None:
    """fullnameOverride "12345" (the metrics Service off: its name must start with a letter) names
    every object "12345", the string, and the leader-election Lease too."""
    values = {"fullnameOverride": fullname, "metrics": {"service": {"enabled": False}},
              "networkPolicy": {"enabled": True}, "prometheusRule": {"enabled": True}}
    manifests = helm_native.render(CHART, values, namespace=NS, release=RELEASE)
    assert_all_strings(manifests)
    names = {(m["kind"], m["metadata"]["name"]) for m in manifests if "-dashboard-" not in m["metadata"]["name"]}
    assert names == {("ServiceAccount", fullname), ("ClusterRole", fullname), ("ClusterRoleBinding", fullname),
                     ("Role", f"{fullname}-self"), ("RoleBinding", f"{fullname}-self"), ("Deployment", fullname),
                     ("NetworkPolicy", fullname), ("PrometheusRule", fullname)}, names
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == fullname and binding["subjects"][0]["name"] == fullname
    assert one(manifests, "RoleBinding")["roleRef"]["name"] == f"{fullname}-self"
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == fullname
    assert f"--lease-name={fullname}" in pod["containers"][0]["args"]


# ---------------------------------------------------------------------------------------------
# User label maps are merged into the chart's labels (no YAML key twice); like podLabels they may
# add labels and override the chart's other labels, never the selector labels.

SELECTOR_KEYS = ("app.kubernetes.io/name", "app.kubernetes.io/instance")
HOSTILE_LABELS = {"app.kubernetes.io/name": "x", "app.kubernetes.io/instance": "y",
                  "app.kubernetes.io/component": "metrics", "team": "media"}


def test_user_labels_cannot_take_the_selector_labels_away() -> None:
    """metrics.service.labels with app.kubernetes.io/name used to replace the Service's label (a
    duplicate YAML key, the last one wins), so the ServiceMonitor selected nothing."""
    values = {
        "metrics": {"service": {"labels": HOSTILE_LABELS}},
        "serviceMonitor": {"enabled": True, "labels": {**HOSTILE_LABELS, "release": "kps"}},
        "prometheusRule": {"enabled": True, "labels": {**HOSTILE_LABELS, "release": "kps"}},
        "prometheusAdapter": {"rules": {"enabled": True, "labels": HOSTILE_LABELS}},
        "dashboards": {"labels": {**HOSTILE_LABELS, "grafana_dashboard": "1"}},
        "podLabels": HOSTILE_LABELS,
    }
    manifests = render(values)
    dep = one(manifests, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    svc = one(manifests, "Service")
    sm = one(manifests, "ServiceMonitor")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "contentserver-operator", "app.kubernetes.io/instance": RELEASE}
    # The ServiceMonitor selects the metrics Service, which selects the operator pod.
    assert selector.items() <= svc["metadata"]["labels"].items(), svc["metadata"]["labels"]
    assert svc["spec"]["selector"] == selector
    assert selector.items() <= pod_labels.items()
    assert dep["spec"]["selector"]["matchLabels"] == selector
    user_labelled = [svc, sm, one(manifests, "PrometheusRule"), dep["spec"]["template"]] + [
        cm for cm in by_kind(manifests, "ConfigMap")]
    for m in user_labelled:
        labels = m["metadata"]["labels"]
        assert {k: labels[k] for k in SELECTOR_KEYS} == selector, (m.get("kind"), labels)
        assert labels["team"] == "media", labels
        # As for podLabels: the chart's other labels may be overridden.
        assert labels["app.kubernetes.io/component"] == "metrics", labels
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert all(cm["metadata"]["labels"]["grafana_dashboard"] == "1" for cm in dashboard_configmaps(manifests))


@pytest.mark.parametrize("template", ["service.yaml", "servicemonitor.yaml", "prometheusrule.yaml",
                                      "prometheus-adapter-rules.yaml", "dashboards.yaml", "deployment.yaml"])
def test_user_labels_are_merged_not_appended(template: str) -> None:
    """No template writes a user label map after the chart's labels (duplicate YAML keys)."""
    text = (CHART / "templates" / template).read_text()
    assert re.search(r'include "cso\.labels".*\n\s*\{\{-? *with [^}]*[lL]abels', text) is None, template
    assert "cso.labelsWith" in text, template
