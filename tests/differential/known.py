"""The known differences (known_differences.yaml): key pattern -> reason; matching, and the
docs/local-cluster.md section that lists them."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
KNOWN_FILE = HERE / "known_differences.yaml"
DOC = HERE.parents[1] / "docs" / "local-cluster.md"
BEGIN = "<!-- differences: generated from tests/differential/known_differences.yaml -->"
END = "<!-- /differences -->"


@dataclass(frozen=True)
class Known:
    pattern: str  # fnmatch over "scenario/runtime/object/path"
    reason: str
    group: str


def load(path: Path = KNOWN_FILE) -> list[Known]:
    data = yaml.safe_load(path.read_text()) or {}
    out: list[Known] = []
    for group in data.get("groups") or []:
        for entry in group.get("differences") or []:
            patterns = entry["keys"] if isinstance(entry["keys"], list) else [entry["keys"]]
            for p in patterns:
                out.append(Known(p, " ".join(str(entry["reason"]).split()), group["title"]))
    return out


def match(key: str, known: list[Known]) -> Known | None:
    for k in known:
        if fnmatch.fnmatchcase(key, k.pattern):
            return k
    return None


def doc_section(path: Path = KNOWN_FILE) -> str:
    """The markdown docs/local-cluster.md carries between BEGIN and END."""
    data = yaml.safe_load(path.read_text()) or {}
    lines = [BEGIN, ""]
    for group in data.get("groups") or []:
        lines.append(f"**{group['title']}**")
        lines.append("")
        for entry in group.get("differences") or []:
            reason = " ".join(str(entry["reason"]).split())
            lines.append(f"- {reason}")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def doc_text(doc: Path = DOC) -> str:
    text = doc.read_text()
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    return m.group(0) if m else ""


def write_doc(doc: Path = DOC) -> None:
    """Rewrite the section of docs/local-cluster.md between BEGIN and END."""
    text = doc.read_text()
    current = doc_text(doc)
    if not current:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} section")
    doc.write_text(text.replace(current, doc_section()))


if __name__ == "__main__":
    write_doc()
