"""The "Across Kubernetes versions" section of results.md: for each Kubernetes version, the exec
round trip and the 256 MB forward, ours vs the kubectl of that version, as
``python -m devtools.realstack bench`` measured them. A version run again replaces its rows and
its note; the other versions' stay, with their own date and command."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

SECTION = "## Across Kubernetes versions"
COLUMNS = (
    "Kubernetes",
    "What",
    "Ours",
    "kubectl",
    "Ratio (kubectl / ours)",
    "Load average (1 min)",
    "Date",
    "Command",
)
HEAD = "| " + " | ".join(COLUMNS) + " |"
RULE = "|" + " --- |" * len(COLUMNS)
# the rows of one version, in this order
WHAT_ORDER = ("exec round trip", "forward")
INTRO = (
    "One stack per version (`devtools/realstack`: control plane, kubelet and kube-proxy of that "
    "version; etcd, containerd and CoreDNS as everywhere), brought up, measured and taken down "
    "one after another in the same run, against the `kubectl` built from the same "
    "`k8s.io/kubernetes` version (`devtools/realstack/gobuild.py`). Per version: the exec round "
    "trip of `true` (`session.execute` vs `kubectl exec`, interleaved in shuffled order with the "
    "stock loop and the raw reader, `bench_roundtrip.measure`) and 256 MB through one forwarded "
    "connection (`session.forward()` vs `kubectl port-forward`, shuffled each round, "
    "`bench_forward`'s server and readers), the exec blocks between the forward rounds so both "
    "see the same load. A 2-core machine shared with other work: compare a row's ours with its "
    "kubectl, not rows with each other; the load average is the run's own."
)


@dataclass
class VersionRow:
    """One line of the table (``kubernetes`` is its version, then what it ran with)."""

    kubernetes: str
    what: str
    ours: str
    kubectl: str
    ratio: str
    load: str
    date: str
    command: str

    @property
    def version(self) -> str:
        """The row's Kubernetes version, ``v1.31.0``."""
        return self.kubernetes.split()[0] if self.kubernetes.strip() else ""


def cell(text: str) -> str:
    """Text fit for one markdown table cell (no pipe, no line break)."""
    return " ".join(str(text).replace("|", "/").split())


def fmt(row: VersionRow) -> str:
    """The row's table line."""
    return "| " + " | ".join(cell(getattr(row, f.name)) for f in fields(VersionRow)) + " |"


def version_key(version: str) -> tuple[int, ...]:
    """``v1.31.0`` -> (1, 31, 0), for sorting."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def _what_key(what: str) -> int:
    low = what.lower()
    return next((i for i, w in enumerate(WHAT_ORDER) if w in low), len(WHAT_ORDER))


def parse(section: str) -> tuple[list[VersionRow], dict[str, str]]:
    """The rows and the per-version notes (``- v1.31.0: ...``) of a rendered section."""
    rows: list[VersionRow] = []
    notes: dict[str, str] = {}
    lines = section.splitlines()
    if HEAD in lines:
        for line in lines[lines.index(HEAD) + 2 :]:
            if not line.startswith("| "):
                break
            parts = [p.strip() for p in line.strip().strip("|").split(" | ")]
            if len(parts) == len(COLUMNS):
                rows.append(VersionRow(*parts))
    for line in lines:
        m = re.match(r"- (v\d+\.\d+\.\d+\S*): ", line)
        if m:
            notes[m.group(1)] = line[m.end() :]
    return rows, notes


def render(rows: list[VersionRow], notes: dict[str, str]) -> str:
    """The whole section: title, what it measures, the table, a note per version."""
    rows = sorted(rows, key=lambda r: (version_key(r.version), _what_key(r.what)))
    out = [SECTION, "", INTRO, "", HEAD, RULE, *(fmt(r) for r in rows), ""]
    if notes:
        out += ["Notes:", ""]
        out += [f"- {v}: {cell(notes[v])}" for v in sorted(notes, key=version_key)]
        out.append("")
    return "\n".join(out)


def merge(old: str, rows: list[VersionRow], notes: dict[str, str]) -> str:
    """The section ``old`` (may be empty) with ``rows`` and ``notes``: every version they name
    loses its old rows and note."""
    old_rows, old_notes = parse(old)
    again = {r.version for r in rows} | set(notes)
    kept = [r for r in old_rows if r.version not in again]
    kept_notes = {v: n for v, n in old_notes.items() if v not in again}
    return render(kept + rows, {**kept_notes, **notes})


def split(doc: str) -> tuple[str, str]:
    """(the document without the section, the section): it runs from its title to the next
    ``## `` title or the end."""
    found = ("\n" + doc).find("\n" + SECTION + "\n")
    if found < 0:
        return doc, ""
    nxt = doc.find("\n## ", found + len(SECTION))
    end = len(doc) if nxt < 0 else nxt + 1
    before, after = doc[:found].rstrip("\n"), doc[end:]
    rest = "\n\n".join(p for p in (before, after.rstrip("\n")) if p)
    return (rest + "\n" if rest else ""), doc[found:end].rstrip("\n") + "\n"


def write(path: Path, rows: list[VersionRow], notes: dict[str, str]) -> str:
    """Merge ``rows`` and ``notes`` into ``path``'s section (placed last); the new section."""
    doc = path.read_text() if path.exists() else "# Benchmark results\n"
    rest, old = split(doc)
    section = merge(old, rows, notes)
    path.write_text(rest.rstrip("\n") + "\n\n" + section)
    return section
