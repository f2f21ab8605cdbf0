#!/usr/bin/python3
"""promql_names.py FILE... - the metric names the PromQL queries of FILEs use.

A FILE is a Grafana dashboard (.json: every "expr" of every target, panels
in rows included) or Prometheus rules (.yml: every "expr:" line). Prints one
name per line, sorted, unique. metrics_test.sh compares them with what a
live master and node export, so a renamed metric cannot leave a dashboard
panel or an alert silently empty.

Names are what PromQL reads as series selectors: identifiers that are not
functions (followed by "("), keywords, aggregation modifiers' label lists,
label matchers ({...}), strings, durations ([5m], offset 5m), numbers or
Grafana variables ($var, ${var}, [$__rate_interval]).
"""
import json
import re
import sys

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan", "atan2",
}


def exprs_json(doc):
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from exprs_json(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from exprs_json(v)


def exprs_rules(text):
    for line in text.splitlines():
        m = re.match(r"\s*expr:\s*(.*)$", line)
        if m:
            yield m.group(1).strip().strip("'\"")


def names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    e = re.sub(r"\$\{[^}]*\}|\$\w+", " ", e)  # Grafana variables
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range and subquery durations
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+\w+", " ", e)
    out = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        tok = m.group(0)
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # the exponent or suffix of a number (1e3)
        if tok.lower() in KEYWORDS or re.match(r"\s*\(", e[m.end():]):
            continue  # keyword, or a function call
        out.add(tok)
    return out


def main(paths):
    found = set()
    for p in paths:
        text = open(p).read()
        exprs = exprs_json(json.loads(text)) if p.endswith(".json") else exprs_rules(text)
        n = 0
        for x in exprs:
            n += 1
            found |= names(x)
        if n == 0:
            sys.exit(f"promql_names.py: {p}: no queries found")
    for name in sorted(found):
        print(name)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
