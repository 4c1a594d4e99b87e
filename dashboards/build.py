#!/usr/bin/env python3
"""Generates the Grafana dashboards (contentserver.json, operator.json) from one description.

Owns the panel list, the PromQL of every panel and the dashboard variables. It writes JSON only;
it must not talk to Grafana or Prometheus. Edit this file, run `python3 dashboards/build.py`, and
commit both: e2e/test_dashboards.py fails when the JSON and this generator disagree.

Label conventions (see dashboards/README.md): every content-server series carries the target
labels `namespace`, `pod` and `contentserver` (the ContentServer's name, relabelled from the pod
label `app.kubernetes.io/instance`); operator series carry `namespace` and `pod`.
"""

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}

# Selectors shared by every content-server query.
SEL = 'namespace=~"$namespace", contentserver=~"$contentserver", pod=~"$pod"'
VSEL = SEL + ', volume=~"$volume"'
RI = "$__rate_interval"


def rate(metric, sel, extra=""):
    inner = f"{sel}, {extra}" if extra else sel
    return f"rate({metric}{{{inner}}}[{RI}])"


def quantile(q, metric, sel, by):
    return (
        f"histogram_quantile({q}, sum by ({by + ', ' if by else ''}le) "
        f"({rate(metric + '_bucket', sel)}))"
    )


class Layout:
    """Places panels left to right on Grafana's 24-column grid and hands out ids."""

    def __init__(self):
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_h = 0

    def take_id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def place(self, w, h):
        if self.x + w > 24:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def new_row(self):
        if self.x:
            self.y += self.row_h
        self.x = 0
        self.row_h = 0
        pos = {"h": 1, "w": 24, "x": 0, "y": self.y}
        self.y += 1
        return pos


def target(ref, expr, legend):
    return {
        "refId": ref,
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "instant": False,
    }


def timeseries(lay, title, description, unit, queries, w=8, h=8, minimum=0, maximum=None,
               overrides=()):
    defaults = {"unit": unit, "min": minimum, "custom": {"fillOpacity": 10, "lineWidth": 1}}
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "id": lay.take_id(),
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": lay.place(w, h),
        "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [target(chr(ord("A") + i), e, l) for i, (e, l) in enumerate(queries)],
    }


def stat(lay, title, description, unit, expr, legend, w=6, h=6):
    return {
        "id": lay.take_id(),
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": lay.place(w, h),
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
        "targets": [target("A", expr, legend)],
    }


def row(lay, title, description, repeat=None):
    r = {
        "id": lay.take_id(),
        "type": "row",
        "title": title,
        "description": description,
        "collapsed": False,
        "gridPos": lay.new_row(),
        "panels": [],
    }
    if repeat:
        r["repeat"] = repeat
    return r


def query_var(name, label, query, description):
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DS,
        "query": query,
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "hide": 0,
        "regex": "",
    }


def datasource_var():
    return {
        "name": "datasource",
        "label": "Data source",
        "description": "The Prometheus that scrapes the content platform.",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "refresh": 1,
        "regex": "",
    }


def dashboard(uid, title, description, variables, panels):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["content-platform"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": variables},
        "panels": panels,
    }


def contentserver():
    lay = Layout()
    p = []
    # --- Pools, one row per volume (Grafana repeats the row for each selected volume).
    p.append(row(lay, "Pool: $volume",
                 "One bounded thread pool per mounted volume, named after it.", repeat="volume"))
    p.append(timeseries(
        lay, "Pool utilisation",
        "Share of the pool's threads running a task: busy_threads/threads as scraped, and "
        "the time-averaged busy thread-seconds per second over threads. 100% means new work "
        "queues; a full queue then answers 503.",
        "percentunit",
        [
            (f"sum by (pod, volume) (contentserver_pool_busy_threads{{{VSEL}}}) / "
             f"sum by (pod, volume) (contentserver_pool_threads{{{VSEL}}})",
             "{{pod}} busy now"),
            (f"sum by (pod, volume) ({rate('contentserver_pool_busy_seconds_total', VSEL)}) / "
             f"sum by (pod, volume) (contentserver_pool_threads{{{VSEL}}})",
             "{{pod}} busy (averaged)"),
        ], maximum=1))
    p.append(timeseries(
        lay, "Queue depth vs capacity",
        "Tasks waiting for a pool thread (left axis), and the queue's capacity, max_queue "
        "(dashed, right axis). Tasks beyond the capacity are rejected at once with 503.",
        "short",
        [
            (f"sum by (pod, volume) (contentserver_pool_queue_depth{{{VSEL}}})",
             "{{pod}} queued"),
            (f"sum by (pod, volume) (contentserver_pool_queue_capacity{{{VSEL}}})",
             "{{pod}} capacity"),
        ],
        # max_queue is often far above the depth: capacity gets its own (right) axis, dashed.
        overrides=[{
            "matcher": {"id": "byRegexp", "options": ".* capacity"},
            "properties": [
                {"id": "custom.axisPlacement", "value": "right"},
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                {"id": "custom.fillOpacity", "value": 0},
            ],
        }]))
    p.append(timeseries(
        lay, "Overflow rejects/s",
        "Tasks rejected per second because the pool's queue was full; each is a 503 response.",
        "reqps",
        [(f"sum by (pod, volume) ({rate('contentserver_pool_rejected_total', VSEL)})",
          "{{pod}}")]))
    p.append(timeseries(
        lay, "p99 queue wait",
        "99th percentile of the time a task waited in the queue before a thread took it.",
        "s",
        [(quantile(0.99, "contentserver_pool_queue_wait_seconds", VSEL, "pod, volume"),
          "{{pod}} p99")]))
    p.append(timeseries(
        lay, "Task duration by operation",
        "Median and 99th percentile time a pool thread spent on a task (open, read, sendfile) "
        "across the selected pods. A slow disk shows here first.",
        "s",
        [
            (quantile(0.5, "contentserver_pool_task_duration_seconds", VSEL, "volume, op"),
             "{{op}} p50"),
            (quantile(0.99, "contentserver_pool_task_duration_seconds", VSEL, "volume, op"),
             "{{op}} p99"),
        ]))
    p.append(timeseries(
        lay, "Tasks/s by operation",
        "Tasks the pool completed per second, by operation, across the selected pods.",
        "ops",
        [(f"sum by (volume, op) ({rate('contentserver_pool_tasks_total', VSEL)})", "{{op}}")]))

    # --- Event loop.
    p.append(row(lay, "Event loop",
                 "The epoll workers. They must never block; lag and stalls show when they do."))
    p.append(timeseries(
        lay, "p99 event-loop lag per worker",
        "99th percentile lateness of each worker's periodic tick. Anything near 100 ms means "
        "the worker blocked (a stall).",
        "s",
        [(quantile(0.99, "contentserver_event_loop_lag_seconds", SEL, "pod, worker"),
          "{{pod}} worker {{worker}}")], w=12))
    p.append(timeseries(
        lay, "Event-loop stalls/s",
        "Ticks later than 100 ms per second, per worker. Every stall delayed every connection "
        "on that worker.",
        "cps",
        [(f"sum by (pod, worker) ({rate('contentserver_event_loop_stalls_total', SEL)})",
          "{{pod}} worker {{worker}}")], w=12))

    # --- RED.
    p.append(row(lay, "Requests (RED)", "Rate, errors and duration of HTTP responses."))
    p.append(timeseries(
        lay, "Requests/s by status class",
        "Responses sent per second, grouped by status class (2xx, 3xx, 4xx, 5xx).",
        "reqps",
        [("sum by (class) (label_replace("
          f"{rate('contentserver_http_requests_total', SEL)}, "
          '"class", "${1}xx", "code", "([0-9]).."))',
          "{{class}}")]))
    requests = rate("contentserver_http_requests_total", SEL)
    errors5xx = rate("contentserver_http_requests_total", SEL, 'code=~"5.."')
    p.append(timeseries(
        lay, "5xx ratio",
        "Share of responses with a 5xx status, per pod (pool overflow answers 503).",
        "percentunit",
        [(f"(sum by (pod) ({errors5xx}) or 0 * sum by (pod) ({requests}))"
          f" / sum by (pod) ({requests})",
          "{{pod}}")], maximum=1))
    p.append(timeseries(
        lay, "Latency p50 / p95 / p99",
        "Time from a complete request head to the last byte of its response, across the "
        "selected pods.",
        "s",
        [(quantile(q, "contentserver_http_request_duration_seconds", SEL, ""),
          f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)]))
    p.append(timeseries(
        lay, "Response bytes/s",
        "Bytes of responses (headers and bodies) written to clients per second.",
        "Bps",
        [(f"sum by (pod) ({rate('contentserver_http_response_bytes_total', SEL)})", "{{pod}}")]))
    p.append(timeseries(
        lay, "Connections and in-flight requests",
        "Client connections open now and requests being answered now, per pod.",
        "short",
        [
            (f"sum by (pod) (contentserver_connections_active{{{SEL}}})", "{{pod}} connections"),
            (f"sum by (pod) (contentserver_http_requests_in_flight{{{SEL}}})",
             "{{pod}} in flight"),
        ]))
    p.append(timeseries(
        lay, "Connections accepted and refused/s",
        "Client connections accepted per second, and refused per second because "
        "limits.max_connections was reached.",
        "cps",
        [
            (f"sum by (pod) ({rate('contentserver_connections_accepted_total', SEL)})",
             "{{pod}} accepted"),
            (f"sum by (pod) ({rate('contentserver_connections_refused_total', SEL)})",
             "{{pod}} refused"),
        ]))

    # --- Page cache.
    p.append(row(lay, "Page cache (offload = auto)",
                 "Volumes with offload = auto serve page-cache hits inline; misses go to the pool."))
    hits = rate("contentserver_page_cache_hits_total", VSEL)
    misses = rate("contentserver_page_cache_misses_total", VSEL)
    p.append(timeseries(
        lay, "Inline hit ratio",
        "Share of opens and reads served inline on the event loop because the data was "
        "already in the page cache (offload = auto volumes only).",
        "percentunit",
        [(f"sum by (volume) ({hits}) / (sum by (volume) ({hits}) + sum by (volume) ({misses}))",
          "{{volume}}")], w=12, maximum=1))
    p.append(timeseries(
        lay, "Page-cache misses/s per volume",
        "Opens and reads per second that needed disk I/O and went to the volume's pool.",
        "ops",
        [(f"sum by (volume, op) ({misses})", "{{volume}} {{op}}")], w=12))

    variables = [
        datasource_var(),
        query_var("namespace", "Namespace", "label_values(contentserver_build_info, namespace)",
                  "Kubernetes namespace of the content-server pods."),
        query_var("contentserver", "ContentServer",
                  'label_values(contentserver_build_info{namespace=~"$namespace"}, contentserver)',
                  "Name of the ContentServer resource (target label contentserver)."),
        query_var("pod", "Pod",
                  'label_values(contentserver_build_info{namespace=~"$namespace", '
                  'contentserver=~"$contentserver"}, pod)',
                  "Content-server pods."),
        query_var("volume", "Volume",
                  f"label_values(contentserver_pool_threads{{{SEL}}}, volume)",
                  "Mounted volumes; each has its own pool, named after it."),
    ]
    return dashboard(
        "contentserver-overview", "Content server",
        "Pools per volume, event loop, requests and page cache of content-server.",
        variables, p)


def operator():
    lay = Layout()
    sel = 'namespace=~"$namespace", pod=~"$pod"'
    p = [row(lay, "Reconciliation", "The operator's reconcile loop over ContentServer resources.")]
    p.append(stat(
        lay, "Managed ContentServers",
        "ContentServer resources the operator manages now.",
        "short",
        f"sum (contentoperator_managed_contentservers{{{sel}}})", "managed"))
    p.append(timeseries(
        lay, "Reconciles/s by result",
        "Reconciliations finished per second, by result.",
        "ops",
        [(f"sum by (result) ({rate('contentoperator_reconciles_total', sel)})", "{{result}}")],
        w=18, h=6))
    p.append(timeseries(
        lay, "Reconcile errors/s",
        "Reconciliations that failed per second; the operator retries them with backoff.",
        "ops",
        [(f"sum by (pod) ({rate('contentoperator_reconcile_errors_total', sel)})", "{{pod}}")],
        w=12))
    p.append(timeseries(
        lay, "Reconcile duration p50 / p99",
        "Time one reconciliation took.",
        "s",
        [(quantile(q, "contentoperator_reconcile_duration_seconds", sel, ""),
          f"p{int(q * 100)}") for q in (0.5, 0.99)], w=12))
    variables = [
        datasource_var(),
        query_var("namespace", "Namespace",
                  "label_values(contentoperator_managed_contentservers, namespace)",
                  "Namespace the operator runs in."),
        query_var("pod", "Pod",
                  'label_values(contentoperator_managed_contentservers{namespace=~"$namespace"}, pod)',
                  "Operator pods."),
    ]
    return dashboard(
        "contentoperator-overview", "Content operator",
        "Reconciliation rate, errors and duration of content-operator, and how many "
        "ContentServers it manages.",
        variables, p)


def render(d):
    return json.dumps(d, indent=2, sort_keys=False) + "\n"


OUTPUTS = {"contentserver.json": contentserver, "operator.json": operator}


def main(argv):
    check = "--check" in argv
    stale = []
    for name, build in OUTPUTS.items():
        text = render(build())
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("out of date (run python3 dashboards/build.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
