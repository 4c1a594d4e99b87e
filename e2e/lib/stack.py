"""Real processes for the dashboard tests: content-server and Prometheus on 127.0.0.1.

Owns building the binaries, choosing free ports, writing their configuration into a temporary
directory, starting them, waiting until they answer, and stopping exactly the processes it
started. It asserts nothing about dashboards.
"""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from lib import dashboards as D
from lib.dashboards import ROOT

TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
SERVER_BIN = TARGET / "debug" / "content-server"
OPERATOR_BIN = TARGET / "debug" / "content-operator"


def build_bins():
    """`cargo build --all-features --bins` for the workspace (a no-op when scripts/test.sh already
    built them with the same features)."""
    subprocess.run(
        ["cargo", "build", "--workspace", "--all-features", "--bins", "-q"],
        cwd=ROOT, check=True,
    )
    assert SERVER_BIN.exists(), f"{SERVER_BIN} missing after cargo build"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    """(status, body bytes); HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_until(what, fn, timeout, proc=None, log=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{what}: process exited with {proc.returncode}\n{read_log(log)}")
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})\n{read_log(log)}")


def read_log(path):
    if path is None:
        return ""
    try:
        return pathlib.Path(path).read_text(errors="replace")[-4000:]
    except OSError:
        return ""


class Proc:
    """A started process with its log file; stop() ends only this process."""

    def __init__(self, argv, log, env=None, cwd=None):
        self.log = log
        self._logf = open(log, "wb")
        self.p = subprocess.Popen(
            argv, stdout=self._logf, stderr=subprocess.STDOUT, env=env, cwd=cwd)

    def stop(self, grace=10):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=5)
        self._logf.close()


class MetricsProcess:
    """A started process serving /metrics on 127.0.0.1:`metrics_port`: started by `launch`,
    which returns once /metrics answers 200."""

    metrics_port = 0
    stop_grace = 10

    def launch(self, what, argv, log, env):
        self.what = what
        self.proc = Proc(argv, log, env=env)
        wait_until(f"{what} /metrics",
                   lambda: http_get(self.metrics_url, timeout=1)[0] == 200,
                   timeout=15, proc=self.proc.p, log=self.proc.log)

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics_text(self):
        status, body = http_get(self.metrics_url)
        assert status == 200, f"{self.what} /metrics answered {status}"
        return body.decode()

    def stop(self):
        self.proc.stop(grace=self.stop_grace)


class ConfiguredServer(MetricsProcess):
    """content-server run with the config file `config` (written by the caller, e.g. rendered by
    the operator), its admin listener (/metrics) on 127.0.0.1:`admin_port`."""

    def __init__(self, tmp, config, admin_port, env_extra=None):
        self.config = pathlib.Path(config)
        self.admin_port = self.metrics_port = admin_port
        env = dict(os.environ)
        env.update(env_extra or {})
        self.launch("content-server", [str(SERVER_BIN), "serve", "--config", str(self.config)],
                    pathlib.Path(tmp) / "content-server.log", env)


class ContentServer(ConfiguredServer):
    """content-server with the given volumes: [(name, dir, offload, threads, max_queue)], and
    `extra_toml` (tables only: more volumes, routes, origins) after them."""

    def __init__(self, tmp, volumes, env_extra=None, workers=2, extra_toml=""):
        self.port = free_port()
        admin_port = free_port()
        routes = "".join(
            f'\n[[routes]]\nprefix = "/{name}/"\nvolume = "{name}"\nstrip_prefix = true\n'
            for name, *_ in volumes)
        vols = "".join(
            f'\n[[volumes]]\nname = "{name}"\npath = "{path}"\noffload = "{offload}"\n'
            f"[volumes.pool]\nthreads = {threads}\nmax_queue = {max_queue}\n"
            for name, path, offload, threads, max_queue in volumes)
        cfg = (
            f"workers = {workers}\nshutdown_timeout_secs = 1\n"
            f'\n[[listeners]]\naddress = "127.0.0.1"\nport = {self.port}\n'
            f'\n[admin]\nlisten = "127.0.0.1:{admin_port}"\n'
            f'\n[logging]\nlevel = "warn"\n' + vols + routes + extra_toml)
        config = pathlib.Path(tmp) / "content-server.toml"
        config.write_text(cfg)
        super().__init__(tmp, config, admin_port, env_extra)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"


class Prometheus:
    """The Debian `prometheus` binary scraping the given targets every second.

    targets: [(job, "127.0.0.1:PORT", {label: value})]; rule_files are loaded too."""

    def __init__(self, tmp, targets, rule_files=()):
        exe = shutil.which("prometheus")
        assert exe, "prometheus is not installed (scripts/deps.sh installs the Debian package)"
        self.port = free_port()
        tmp = pathlib.Path(tmp)
        scrape = [
            {
                "job_name": job,
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "static_configs": [{"targets": [addr], "labels": labels}],
            }
            for job, addr, labels in targets
        ]
        cfg = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": scrape,
        }
        # JSON is YAML: no yaml dependency needed to write the config.
        (tmp / "prometheus.yml").write_text(json.dumps(cfg, indent=2))
        (tmp / "prom-data").mkdir()
        self.proc = Proc(
            [exe, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            tmp / "prometheus.log", cwd=tmp)
        wait_until("prometheus /-/ready",
                   lambda: http_get(f"{self.base}/-/ready", timeout=1)[0] == 200,
                   timeout=30, proc=self.proc.p, log=self.proc.log)

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def api(self, path, **params):
        q = urllib.parse.urlencode(params, doseq=True)
        status, body = http_get(f"{self.base}/api/v1/{path}?{q}", timeout=10)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params} -> {status}: {doc}")
        return doc["data"]

    def query_range(self, expr, start, end, step="1"):
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def resolve_variables(self, dash, start, end):
        """Each query variable's values, resolved in order like Grafana (label values API)."""
        chosen, values = {}, {}
        for v in D.variables(dash)[1:]:
            selector, label = D.label_values_query(D.variable_query(v))
            sel = D.substitute(selector, chosen)
            vals = self.api(f"label/{label}/values", **{"match[]": sel, "start": start, "end": end})
            assert vals, f"variable {v['name']}: {selector} -> no values"
            values[v["name"]] = vals
            chosen[v["name"]] = vals[0] if len(vals) == 1 else "|".join(vals)
        return values

    def stop(self):
        self.proc.stop()


class Operator(MetricsProcess):
    """content-operator (`run --no-leader-election`) against the Kubernetes API in `kubeconfig`,
    its /metrics on a free 127.0.0.1 port."""

    # Graceful shutdown is not what these tests are about, and the operator can take long
    # to stop when the API is unreachable: SIGKILL after 2 s.
    stop_grace = 2

    def __init__(self, tmp, kubeconfig, namespaces=()):
        self.port = self.metrics_port = free_port()
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), RUST_LOG="warn", NO_COLOR="1")
        argv = [str(OPERATOR_BIN), "run", "--no-leader-election",
                f"--metrics-listen=127.0.0.1:{self.port}"]
        if namespaces:
            argv.append("--namespaces=" + ",".join(namespaces))
        self.launch("content-operator", argv, pathlib.Path(tmp) / "content-operator.log", env)
