"""The output widget's scroll box and its static (frozen) form; the theme-aware styles."""

from __future__ import annotations

import re

import ipywidgets as w
from ipywidgets.widgets.widget import _instances

from trainjob_magics.magics.views import styles
from trainjob_magics.magics.views.frontend import close_tree
from trainjob_magics.magics.views.output import WidgetOutputView, follow_tail_box


class RecordingDisplay:
    """Stands in for the display handle (no front end in unit tests): records ``freeze``."""

    def __init__(self) -> None:
        self.frozen: list[tuple[str, str]] = []

    def freeze(self, html: str, text: str) -> None:
        self.frozen.append((html, text))


def test_scroll_box_is_a_persistent_column_reverse_box_around_the_body() -> None:
    v = WidgetOutputView(interval=0, show=False)
    assert v.scroller.children == (v.body,)
    layout = v.scroller.layout
    assert (layout.flex_flow, layout.overflow, layout.display) == ("column-reverse", "auto", "flex")
    assert layout.max_height == styles.SCROLL_MAX_HEIGHT
    assert v.body.layout.flex == "0 0 auto"
    scroller = v.scroller
    for i in range(50):
        v.write("stdout", f"l{i}\n")
    assert v.scroller is scroller and v.widget.children[0] is scroller
    # the <pre> never becomes the scroll container (JupyterLab gives it overflow:auto)
    assert "overflow:visible" in v.body.value and "overflow:auto" not in v.body.value


def test_follow_tail_box_wraps_any_child() -> None:
    child = w.HTML("x")
    box = follow_tail_box(child)
    assert box.children == (child,) and "tjm-scroll" in box._dom_classes


def test_finish_freezes_into_static_html_with_tail_note_and_footer() -> None:
    v = WidgetOutputView(max_lines=3, interval=0, where="res.stdout", show=False)
    v.display = RecordingDisplay()
    for i in range(1, 8):
        v.write("stderr" if i == 6 else "stdout", f"line {i}\n")
    v.finish("exit code 1 · 0.50 s · pod p", ok=False)
    [(html, text)] = v.display.frozen
    assert html == v.static_html()
    assert html.startswith('<div class="trainjob-output tjm-static">')
    assert re.search(r'class="tjm-scroll" style="[^"]*flex-direction:column-reverse', html)
    assert "[… 4 lines hidden; the full output is in res.stdout]" in html
    assert html.index("line 5") < html.index("line 6") < html.index("line 7")
    assert "line 4<" not in html
    assert re.search(r'class="tjm-stderr"[^>]*>line 6<', html)
    assert re.search(r'class="tjm-footer" style="[^"]*font-weight:bold', html)
    # the note is said beside the footer too, where the reader of a finished cell looks
    footer = html[html.index('class="tjm-footer"') :]
    assert re.search(
        r'>exit code 1 · 0.50 s · pod p <span class="tjm-note" style="[^"]*font-weight:normal">'
        r"\[… 4 lines hidden; the full output is in res.stdout\]</span></div></div>$",
        footer,
    ), footer
    assert text.splitlines() == [
        "[… 4 lines hidden; the full output is in res.stdout]",
        "line 5",
        "line 6",
        "line 7",
        "exit code 1 · 0.50 s · pod p",
    ]


def test_finish_without_footer_freezes_the_lines_only() -> None:
    v = WidgetOutputView(interval=0, show=False)
    v.display = RecordingDisplay()
    v.write("stdout", "only\n")
    v.finish(None)
    [(html, text)] = v.display.frozen
    assert "tjm-footer" not in html and text == "only"


def test_close_tree_closes_the_widget_and_its_children() -> None:
    v = WidgetOutputView(interval=0, show=False)
    models = [v.widget, v.scroller, v.body, v.footer]
    ids = [m.model_id for m in models]
    close_tree(v.widget)
    assert not [i for i in ids if i in _instances]


def test_colours_come_from_theme_variables_and_stderr_is_not_red() -> None:
    for style in (styles.NOTE_STYLE, styles.OK_STYLE, styles.FAIL_STYLE, styles.STDERR_STYLE):
        colours = re.findall(r"(?:^|;)\s*color:([^;]+)", style)
        assert colours and all(c.startswith("var(--jp-") for c in colours), style
    assert styles.TEXT_COLOUR in styles.STDERR_STYLE
    assert "--jp-rendermime-error-background" in styles.STDERR_STYLE
    assert styles.FAIL_COLOUR not in styles.STDERR_STYLE


def _luminance(hex_colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def test_state_badges_reach_4_5_to_1_with_white_text() -> None:
    white = _luminance("#ffffff")
    for state, colour in styles.STATE_COLOURS.items():
        ratio = (white + 0.05) / (_luminance(colour) + 0.05)
        assert ratio >= 4.5, (state, colour, ratio)


def test_fallback_colours_reach_4_5_to_1_on_white() -> None:
    def fallback(var: str) -> str:
        match = re.search(r",rgb\((\d+),(\d+),(\d+)\)\)$", var)
        assert match, var
        return "#" + "".join(f"{int(c):02x}" for c in match.groups())

    white = _luminance("#ffffff")
    for var in (styles.MUTED_COLOUR, styles.OK_COLOUR, styles.FAIL_COLOUR):
        ratio = (white + 0.05) / (_luminance(fallback(var)) + 0.05)
        assert ratio >= 4.5, (var, ratio)


def test_a_shown_view_carries_the_script_that_holds_it_scrolled_up(
    published: list[dict[str, object]],
) -> None:
    """views/hold.py: an invisible Output widget (rendered trusted by the front end) with the
    script; a multi-pod view carries one for all its boxes, its pods' views none of their own."""
    from trainjob_magics.magics.views.pods import MultiPodWidgetView

    v = WidgetOutputView(interval=0)
    (keeper,) = [c for c in v.widget.children if "tjm-hold" in c._dom_classes]
    (output,) = keeper.outputs
    script = output["data"]["text/html"]
    assert script.startswith("<script>") and "closest('.trainjob-output" in script
    assert "addEventListener('scroll'" in script and "capture: true" in script
    multi = MultiPodWidgetView([("p-0", "node-0"), ("p-1", "node-1")], show=False)
    assert [c for c in multi.widget.children if "tjm-hold" in c._dom_classes]
    for pod_view in multi.views.values():
        assert not [c for c in pod_view.widget.children if "tjm-hold" in c._dom_classes]
