"""Reading the Grafana dashboards and alert rules in dashboards/: panels, queries, variables.

Owns the parsing used by the dashboard lint, the alert-rule tests and the Prometheus e2e:
walking panels (including rows), pulling PromQL out of targets, naming the metrics a query
selects, substituting Grafana variables and parsing a Prometheus text exposition. It starts
nothing and talks to no server.
"""

import json
import math
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
DASHBOARD_FILES = ["contentserver.json", "operator.json"]
ALERTS = DASHBOARDS / "alerts.yaml"
ALERT_TESTS = DASHBOARDS / "alerts.test.yaml"
# Titles of the contentserver.json rows of the caching node (dashboards/build.py).
CACHE_ROWS = ("Cache: $volume", "Origin")
# Alert groups of the caching node in alerts.yaml.
CACHE_ALERT_GROUP = "content-server-cache"

# PromQL words that are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
    # aggregation operators (may be followed by `by (...)` instead of `(`)
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SELECTOR_METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
_RANGE = re.compile(r"\[([^\]]*)\]")


def load(name):
    return json.loads((DASHBOARDS / name).read_text())


def all_panels(dash):
    """Every panel, rows included, with the panels nested in (collapsed) rows."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def content_panels(dash):
    """Panels that show data (everything but rows)."""
    return [p for p in all_panels(dash) if p.get("type") != "row"]


def row_panels(dash, which):
    """Panels inside the rows for which `which(row)` is true (the panels after such a row, up to
    the next row, or those nested in it when collapsed)."""
    out, inside = [], False
    for p in dash.get("panels", []):
        if p.get("type") == "row":
            inside = which(p)
            if inside:
                out.extend(p.get("panels", []))
            continue
        if inside:
            out.append(p)
    return out


def repeated_panels(dash, var):
    """Panels inside rows that repeat per `var`."""
    return row_panels(dash, lambda r: r.get("repeat") == var)


def cache_panels(dash):
    """Panels of the caching node's rows (cache volumes and origins): they have data only on a
    content-server with cache volumes (e2e/test_cache_e2e.py evaluates them)."""
    return row_panels(dash, lambda r: r.get("title") in CACHE_ROWS)


def queries(dash):
    """(panel, target) for every query target of every panel."""
    return [(p, t) for p in content_panels(dash) for t in p.get("targets", [])]


def variables(dash):
    return dash.get("templating", {}).get("list", [])


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or ""


def strip_strings(expr):
    return _STRING.sub('""', expr)


def metric_names(expr):
    """Metric names the query selects (every one written as `name{...}`)."""
    return set(_SELECTOR_METRIC.findall(strip_strings(expr)))


def bare_identifiers(expr):
    """Identifiers that are neither functions, keywords, label names nor `name{...}` selectors:
    a metric named without a selector (and so without the dashboard variables)."""
    e = strip_strings(expr)
    e = re.sub(r"\{[^}]*\}", "{}", e)  # label matchers
    e = _RANGE.sub("[]", e)  # range and subquery durations
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)
    out = []
    for m in _IDENT.finditer(e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if word.lower() in KEYWORDS or rest.startswith("(") or rest.startswith("{"):
            continue
        if re.fullmatch(r"\d+(e\d+)?", word) or word.startswith("$"):
            continue
        # Numbers such as 0.99 split into digits; durations like 5m are inside [] already.
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue
        out.append(word)
    return out


def range_durations(expr):
    """The contents of every `[...]` range selector, strings removed."""
    return _RANGE.findall(strip_strings(expr))


def variables_used(expr):
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", strip_strings_keep_vars(expr)))


def strip_strings_keep_vars(expr):
    # Grafana interpolates inside strings too, so variables are looked for everywhere; only
    # PromQL's own `${1}` (a regex group in label_replace) is not a variable.
    return re.sub(r"\$\{\d+\}", "", expr)


def substitute(expr, values, rate_interval="5s", interval="1s", range_="60s"):
    """Replace Grafana variables the way Grafana does for a single selected value each."""
    builtins = {
        "__rate_interval": rate_interval,
        "__interval": interval,
        "__range": range_,
    }
    allvals = {**builtins, **values}

    def repl(m):
        name = m.group(1) or m.group(2)
        if name in allvals:
            return allvals[name]
        return m.group(0)  # unknown (e.g. label_replace's ${1}): Grafana leaves it alone

    return re.sub(r"\$\{([A-Za-z0-9_]+)\}|\$([A-Za-z_][A-Za-z0-9_]*)", repl, expr)


def label_values_query(query):
    """Parse `label_values(selector, label)` -> (selector, label)."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query, re.S)
    if not m:
        raise ValueError(f"not a label_values() query: {query!r}")
    return m.group(1).strip(), m.group(2)


def exposition_sample_names(text):
    """Names of every sample line of a Prometheus text exposition (histogram suffixes included)."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _IDENT.match(line)
        if m:
            names.add(m.group(0))
    return names


def exposition_families(text):
    """Metric family name -> type, from the `# TYPE` lines."""
    fams = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "#" and parts[1] == "TYPE":
            fams[parts[2]] = parts[3]
    return fams


def panel_expr(dash, title, ref="A"):
    """The query `ref` of the panel titled `title`."""
    for p, t in queries(dash):
        if p["title"] == title and t["refId"] == ref:
            return t["expr"]
    raise AssertionError(f"no panel {title!r} {ref}")


def has_data(result):
    """Does a Prometheus range-query result hold any value that is not NaN?"""
    return any(not math.isnan(float(val)) for series in result for _, val in series["values"])
