"""Writing bench/RESULTS.md, one section per benchmark.

Each benchmark script owns one section, between <!-- NAME:start --> and
<!-- NAME:end -->: it replaces its own and keeps every other, so that each
can be run alone. machine() is the line every section opens with.
"""
import datetime
import os
import re


def machine(pg_version=None):
    """'Machine: N CPUs (model), PostgreSQL x.y, date.' for the section's first line."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    parts = [f"{os.cpu_count()} CPUs ({cpu})"]
    if pg_version:
        parts.append(pg_version.split(" on ")[0])
    parts.append(str(datetime.date.today()))
    return "Machine: " + ", ".join(parts) + "."


def write_section(results, name, lines):
    """Puts `lines` (the section's text, markers excluded) into `results` as section `name`."""
    section = "\n".join([f"<!-- {name}:start -->", *lines, f"<!-- {name}:end -->"]) + "\n"
    text = open(results).read() if os.path.exists(results) else "# Benchmark results\n"
    pattern = re.compile(rf"<!-- {name}:start -->.*?<!-- {name}:end -->\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    open(results, "w").write(text)
    print(section, end="")
