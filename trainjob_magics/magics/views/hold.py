"""Holding a scrolled-up live output where the reader left it.

A live output keeps its last ``max_lines`` lines, re-rendered as they come: scrolled up past
them, the reader's lines would be trimmed from under them (the browser holds the scroll position,
not the lines). Only the page knows where the reader is, so the view carries a small script, in
an invisible ``Output`` widget (whose outputs JupyterLab and Notebook 7 render as trusted): when
a live box of the view is scrolled away from its bottom, it shows a still copy of what the box
showed and keeps the live lines hidden under it, with a line saying that new output is below;
scrolled back to the bottom, the live lines show again and follow the tail. Nothing is held in
the kernel; a front end that does not run the script keeps the plain live view.
"""

from __future__ import annotations

from typing import Any

from .styles import NOTE_STYLE

# Scroll events do not bubble: one listener per view, in the capture phase, sees every box of it
# (the tabs of a multi-pod view included). ``column-reverse`` boxes: scrollTop is 0 at the bottom.
HOLD_SCRIPT = """
(() => {
  const script = document.currentScript;
  const view = script && script.closest('.trainjob-output, .trainjob-multipod-output');
  if (!view || view.dataset.tjmHold) return;
  view.dataset.tjmHold = '1';
  const held = new Map();
  const atBottom = box => Math.abs(box.scrollTop) <= 2;
  const hold = box => {
    const live = [...box.children].find(c => !c.classList.contains('tjm-held'));
    if (!live) return;
    const still = live.cloneNode(true);
    still.classList.add('tjm-held');
    live.style.display = 'none';
    box.insertBefore(still, live);
    const note = document.createElement('div');
    note.className = 'tjm-note tjm-held-note';
    note.style.cssText = 'NOTE_STYLE;font-size:12px';
    note.textContent = 'Held here while you read: new output is below; ' +
      'scroll to the bottom to follow it.';
    box.after(note);
    held.set(box, {live, still, note});
  };
  const release = box => {
    const h = held.get(box);
    held.delete(box);
    h.still.remove();
    h.note.remove();
    h.live.style.display = '';
  };
  view.addEventListener('scroll', e => {
    const box = e.target;
    if (!(box instanceof Element) || !box.classList.contains('tjm-scroll')) return;
    if (!held.has(box) && !atBottom(box)) hold(box);
    else if (held.has(box) && atBottom(box)) release(box);
  }, {capture: true, passive: true});
})();
""".replace("NOTE_STYLE", NOTE_STYLE)


def hold_widget() -> Any:
    """The invisible widget carrying :data:`HOLD_SCRIPT` (a child of the view it holds)."""
    import ipywidgets as w

    keeper = w.Output(layout=w.Layout(height="0px", overflow="hidden", margin="0"))
    keeper.outputs = (
        {
            "output_type": "display_data",
            "data": {"text/html": f"<script>{HOLD_SCRIPT}</script>", "text/plain": ""},
            "metadata": {},
        },
    )
    keeper.add_class("tjm-hold")
    return keeper
