"""known_differences.yaml is well formed and docs/local-cluster.md lists what it lists."""

from __future__ import annotations

from tests.differential import known as K


def test_every_known_difference_has_a_reason() -> None:
    entries = K.load()
    assert entries, "known_differences.yaml lists nothing"
    for e in entries:
        assert e.reason and len(e.reason) > 20, e
        assert e.pattern.count("/") >= 1, e


def test_the_docs_list_the_known_differences() -> None:
    """docs/local-cluster.md carries the generated section; regenerate it with
    ``python -m tests.differential.known`` after editing the YAML."""
    assert K.doc_text() == K.doc_section(), (
        "docs/local-cluster.md's differences section is out of date: run "
        "`python -m tests.differential.known`"
    )
