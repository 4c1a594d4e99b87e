"""The dashboard lint rules, as functions returning a list of problems (empty = clean).

Owns what "a well-formed dashboard" means here: units and descriptions on panels, the
datasource variable on every query and variable, selectors narrowed by the dashboard variables,
`$__rate_interval` ranges, metric names that exist in an exposition. Pure: it reads dicts and
strings and starts nothing, so the tests can run it on the real dashboards and on broken copies.
"""

import re

from lib import dashboards as D

SERVER_SELECTOR_LABELS = ["namespace", "contentserver", "pod"]
OPERATOR_SELECTOR_LABELS = ["namespace", "pod"]
# Series that exist once per volume: their selectors must also narrow by $volume.
PER_VOLUME_PREFIXES = ("contentserver_pool_", "contentserver_page_cache_", "contentserver_cache_")


def panel_problems(dash):
    out = []
    for p in D.content_panels(dash):
        title = p.get("title") or f"panel {p.get('id')}"
        if not p.get("title"):
            out.append(f"{title}: no title")
        if not p.get("description", "").strip():
            out.append(f"{title}: no description")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit", "").strip():
            out.append(f"{title}: no unit")
        if not p.get("targets"):
            out.append(f"{title}: no query")
    ids = [p.get("id") for p in D.all_panels(dash)]
    if len(ids) != len(set(ids)):
        out.append("duplicate panel ids")
    return out


def layout_problems(dash):
    """Panels fit Grafana's 24-column grid and do not overlap."""
    out, placed = [], []
    for p in D.all_panels(dash):
        g = p.get("gridPos") or {}
        title = p.get("title") or f"panel {p.get('id')}"
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            out.append(f"{title}: gridPos missing")
            continue
        if g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > 24:
            out.append(f"{title}: gridPos {g} outside the 24-column grid")
        for other, og in placed:
            if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"]
                    and g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                out.append(f"{title}: overlaps {other}")
        placed.append((title, g))
    return out


def datasource_problems(dash):
    out = []
    for p in D.content_panels(dash):
        if p.get("datasource", {}).get("uid") != "${datasource}":
            out.append(f"{p.get('title')}: panel datasource is not ${{datasource}}")
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}":
                out.append(f"{p.get('title')} [{t.get('refId')}]: datasource is not ${{datasource}}")
            if not t.get("expr", "").strip():
                out.append(f"{p.get('title')} [{t.get('refId')}]: empty expr")
    for v in D.variables(dash):
        if v.get("type") == "query" and v.get("datasource", {}).get("uid") != "${datasource}":
            out.append(f"variable {v.get('name')}: datasource is not ${{datasource}}")
    return out


def query_problems(dash):
    """Ranges are $__rate_interval; every metric has a selector narrowed by the variables."""
    out = []
    for p, t in D.queries(dash):
        expr, where = t.get("expr", ""), f"{p.get('title')} [{t.get('refId')}]"
        for dur in D.range_durations(expr):
            if dur != "$__rate_interval":
                out.append(f"{where}: range [{dur}] instead of [$__rate_interval]")
        for word in D.bare_identifiers(expr):
            out.append(f"{where}: {word} named without a selector")
        plain = D.strip_strings_keep_vars(expr)
        for metric in D.metric_names(expr):
            if metric.startswith("contentserver_"):
                labels = SERVER_SELECTOR_LABELS + (
                    ["volume"] if metric.startswith(PER_VOLUME_PREFIXES) else [])
            else:
                labels = OPERATOR_SELECTOR_LABELS
            for sel in re.findall(re.escape(metric) + r"\{([^}]*)\}", plain):
                for lbl in labels:
                    if f'{lbl}=~"${lbl}"' not in sel:
                        out.append(f"{where}: {metric}{{{sel}}} not narrowed by ${lbl}")
    return out


def dashboard_metrics(dash):
    names = set()
    for _, t in D.queries(dash):
        names |= D.metric_names(t.get("expr", ""))
    for v in D.variables(dash):
        if v.get("type") == "query":
            names |= D.metric_names(D.label_values_query(D.variable_query(v))[0])
    return names


def missing_metrics(dash, exposition_text):
    """Metric names the dashboard selects that are not sample names of the exposition."""
    exposed = D.exposition_sample_names(exposition_text)
    return sorted(dashboard_metrics(dash) - exposed)
