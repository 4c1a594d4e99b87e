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


# Cache statuses answered from a stored entry (the body came from the disk, not the origin).
FROM_CACHE = "hit|updating|stale|revalidated"
# Rows of the caching node (cache volumes and their origins), kept together at the end.
CACHE_ROW = "Cache: $volume"
ORIGIN_ROW = "Origin"


def dashed_right(regexp):
    """Series matching `regexp` on the right axis, dashed and unfilled (a limit, not a value)."""
    return {
        "matcher": {"id": "byRegexp", "options": regexp},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "custom.fillOpacity", "value": 0},
        ],
    }


def share(metric, part, whole=""):
    """Per pod, the share of the volume's `metric` rate (of the series matching `whole`) that
    matches `part`."""
    return (f"sum by (pod) ({rate(metric, VSEL, part)}) / "
            f"sum by (pod) ({rate(metric, VSEL, whole)})")


def cache_rows(lay, p):
    """The caching node: one row per cache volume (repeated like the pool row) and one row for
    the origins those volumes fill from (origin series are per origin, not per volume)."""
    p.append(row(lay, CACHE_ROW,
                 "A cache volume ([volumes.cache]): what it answers from disk, what it fetches "
                 "from the origin, how full it is. Volumes without a cache show no data here.",
                 repeat="volume"))
    p.append(timeseries(
        lay, "Hit ratio by requests",
        "Share of the volume's cache-route requests answered from a stored entry (X-Cache HIT, "
        "UPDATING, STALE or REVALIDATED), of every answer but BYPASS (answers the origin does "
        "not let be stored are left out; a miss whose origin request failed, a 502 or 504, "
        "counts as a miss, so an origin that cannot be reached or times out lowers it too; a 5xx the "
        "origin answers is passed through as BYPASS and left out: watch Origin requests/s by outcome "
        "for that). Healthy: steady and high for your catalogue (often "
        "above 90% on a warm edge). Unhealthy: a drop that stays (a purge, a config change that "
        "changed the keys, a catalogue that outgrew max_size); a new replica starts at 0% and "
        "climbs as it fills.",
        "percentunit",
        [(share("contentserver_cache_requests_total", f'status=~"{FROM_CACHE}"',
                'status!="bypass"'), "{{pod}}")],
        w=6, maximum=1))
    p.append(timeseries(
        lay, "Hit ratio by bytes",
        "Share of the body bytes sent to clients that came from the disk rather than from an "
        "origin fill. Healthy: close to the request hit ratio, high. Unhealthy: far below the "
        "request hit ratio, which means the large objects miss (max_size too small for them, "
        "or slices evicted before they are asked again).",
        "percentunit",
        [(share("contentserver_cache_served_bytes_total", 'source="cache"'), "{{pod}}")],
        w=6, maximum=1))
    p.append(timeseries(
        lay, "Bytes served/s by source",
        "Body bytes per second sent to clients from the disk (cache) and from origin fills or "
        "pass-throughs (origin): the origin line is this volume's share of the origin egress. "
        "Healthy: origin far below cache once warm. Unhealthy: origin close to or above cache "
        "for long (the cache is not absorbing the load; see Evictions/s).",
        "Bps",
        [(f"sum by (pod, source) ({rate('contentserver_cache_served_bytes_total', VSEL)})",
          "{{pod}} {{source}}")], w=6))
    stale = rate("contentserver_cache_requests_total", VSEL,
                 'status=~"stale|updating|revalidated"')
    p.append(timeseries(
        lay, "Stale served/s",
        "Requests per second answered with an expired entry: STALE (the origin failed; "
        "stale-if-error), UPDATING (served while one background request revalidates; "
        "stale-while-revalidate), and REVALIDATED (the origin confirmed the entry with 304). "
        "Healthy: UPDATING and REVALIDATED follow the expiry of popular objects, STALE is 0. "
        "Unhealthy: STALE above 0 for more than a few minutes: clients get old content because "
        "the origin is failing (see the Origin row).",
        "reqps",
        [(f"sum by (pod, status) ({stale})", "{{pod}} {{status}}")], w=6))
    p.append(timeseries(
        lay, "Fills in flight and collapsed waiters/s",
        "Origin fills (one per object slice) running now, and requests per second that joined "
        "a fill already under way instead of asking the origin again (request collapsing). "
        "Healthy: fills in flight small and short-lived; collapsed waiters rise with a burst "
        "of requests for a new object and save as many origin requests. Unhealthy: fills in "
        "flight that keep climbing (the origin is slow, see Origin p99 latency, or at "
        "max_connections).",
        "short",
        [
            (f"sum by (pod) (contentserver_cache_fills_in_flight{{{VSEL}}})",
             "{{pod}} fills in flight"),
            (f"sum by (pod) ({rate('contentserver_cache_collapsed_total', VSEL)})",
             "{{pod}} collapsed/s"),
        ]))
    p.append(timeseries(
        lay, "Cache bytes vs max",
        "Bytes of stored entries, and the size they are kept under (max_size, or 10% of the "
        "filesystem kept free; dashed, right axis). Healthy: grows after a start, then stays at "
        "the max while the least recently used entries are evicted. Unhealthy: the max drops "
        "below the configured max_size (the disk filled: something else uses it), or the "
        "volume is at the max while Hit ratio by bytes falls (the working set does not fit).",
        "bytes",
        [
            (f"sum by (pod) (contentserver_cache_size_bytes{{{VSEL}}})", "{{pod}} stored"),
            (f"sum by (pod) (contentserver_cache_max_bytes{{{VSEL}}})", "{{pod}} max"),
        ],
        overrides=[dashed_right(".* max")]))
    p.append(timeseries(
        lay, "Evictions/s by reason",
        "Entries deleted per second: size (room for new entries at the max), inactive (unused "
        "for inactive_secs), invalid (unreadable or corrupt files), replaced (older versions of objects that changed at the origin); "
        "and entries not stored (served all the same): not stored disk_full (ENOSPC: the max "
        "is lowered and eviction frees space), not stored error (anything else). Healthy: size evictions "
        "at a rate the hit ratio does not notice, inactive steady, invalid 0, nothing not "
        "stored. Unhealthy: size "
        "evictions close to the miss rate (each fill pushes out something still wanted: give "
        "the volume more space or the ContentServer more replicas), any invalid evictions "
        "(a failing disk), not stored disk_full (something else writes to the disk, or the "
        "claim is smaller than maxSize), not stored error (the pod's log says why).",
        "ops",
        [(f"sum by (pod, reason) ({rate('contentserver_cache_evictions_total', VSEL)})",
          "{{pod}} {{reason}}"),
         (f"sum by (pod, reason) ({rate('contentserver_cache_store_failures_total', VSEL)})",
          "{{pod}} not stored {{reason}}")]))

    p.append(row(lay, ORIGIN_ROW,
                 "The origins the cache volumes fill from (label origin)."))
    p.append(timeseries(
        lay, "Origin egress bytes/s",
        "Body bytes per second received from each origin: what the caches cost the origin. "
        "Healthy: a small fraction of Response bytes/s once the caches are warm. Unhealthy: "
        "close to Response bytes/s for long (hit ratio collapsed), or a step up after a "
        "scale-out (new replicas fill from the origin: expected, and it settles).",
        "Bps",
        [(f"sum by (origin) ({rate('contentserver_origin_received_bytes_total', SEL)})",
          "{{origin}}")], w=6))
    p.append(timeseries(
        lay, "Origin p99 latency",
        "Median and 99th percentile time from sending an origin request to its response head. "
        "Only answers that arrived are in it: a read timeout is, a connect that failed or timed "
        "out is not (see origin requests by code, error). "
        "Healthy: the origin's usual latency (tens of milliseconds nearby). Unhealthy: a p99 "
        "near read_timeout_ms (misses wait that long, then answer 504 or stale), or origin "
        "errors rising while this stays flat.",
        "s",
        [(quantile(q, "contentserver_origin_request_duration_seconds", SEL, "origin"),
          f"{{{{origin}}}} p{int(q * 100)}") for q in (0.5, 0.99)], w=6))
    p.append(timeseries(
        lay, "Origin requests/s by outcome",
        "Origin requests per second by status class, and error (connect refused, timeout, "
        "truncated body). Healthy: 2xx and 3xx (304 revalidations), 4xx as your catalogue "
        "has them. Unhealthy: any 5xx or error for more than a moment (misses become 502/504, "
        "expired entries are served STALE).",
        "reqps",
        [(f"sum by (origin, code) ({rate('contentserver_origin_requests_total', SEL)})",
          "{{origin}} {{code}}")], w=6))
    p.append(timeseries(
        lay, "Origin connections",
        "Origin connections open now (busy and idle), per pod. Healthy: well below the "
        "origin's max_connections. Unhealthy: at max_connections (fills queue for a "
        "connection; raise it if the origin can take more).",
        "short",
        [(f"sum by (pod, origin) (contentserver_origin_connections{{{SEL}}})",
          "{{pod}} {{origin}}")], w=6))
    p.append(timeseries(
        lay, "Origin servers down",
        "Pods that have an origin server marked down: a connect to it failed (refused, "
        "unreachable, timed out) or it took a request and gave no answer head (timeout, "
        "closed), within the last 10 s, so it is tried after the origin's other servers (one "
        "request probes it every 10 s; its answer ends the mark). Healthy: 0. Unhealthy: a "
        "server down for minutes (its traffic is on the others; with none left, misses answer "
        "502 or 504 and expired entries are served STALE).",
        "short",
        [(f"sum by (origin, server) (contentserver_origin_server_down{{{SEL}}})",
          "{{origin}} {{server}}")], w=6))


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
            # Clamped at 1 like the autoscaling metric (prometheus-adapter.yaml): busy time is
            # brought up to date at each scrape and rate() extrapolates, so a saturated pool
            # reads a hair above 1.
            (f"clamp_max(sum by (pod, volume) ({rate('contentserver_pool_busy_seconds_total', VSEL)}) / "
             f"sum by (pod, volume) (contentserver_pool_threads{{{VSEL}}}), 1)",
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
        overrides=[dashed_right(".* capacity")]))
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
        lay, "Connections, parked and in-flight requests",
        "Client connections open now, how many of them are parked (idle keep-alive "
        "connections quiet for limits.idle_park_ms, held in a worker's idle set at a few "
        "hundred bytes each, no task or timer of their own), and requests being answered now, "
        "per pod. Healthy: with keep-alive clients most open connections are parked (parked "
        "close to connections minus in flight) and rise and fall with the clients. Unhealthy: "
        "connections far above parked + in flight (connections stuck mid-request or in slow "
        "sends, or limits.idle_park_ms 0 or too long to park them), or parked close to "
        "limits.max_connections (idle clients hold the connection budget: new ones get "
        "refused; shorten limits.keepalive_timeout_secs).",
        "short",
        [
            (f"sum by (pod) (contentserver_connections_active{{{SEL}}})", "{{pod}} connections"),
            (f"sum by (pod) (contentserver_connections_parked{{{SEL}}})", "{{pod}} parked"),
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

    cache_rows(lay, p)

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
        "Pools per volume, event loop, requests, page cache, and the caching node's cache "
        "volumes and origins, of content-server.",
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
        lay, "Reconcile and watch errors/s",
        "Reconciliations that failed per second, and failed lists or watches of ContentServers "
        "and their children (API server unreachable, access refused): while watches fail, "
        "nothing is reconciled and the managed count is what was last seen. Both are retried "
        "with backoff.",
        "ops",
        [(f"sum by (pod) ({rate('contentoperator_reconcile_errors_total', sel)})",
          "reconcile {{pod}}"),
         (f"sum by (pod) ({rate('contentoperator_watch_errors_total', sel)})",
          "watch {{pod}}")],
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
