"""Port forwarding to a session's pods (``session.forward()``) over pods/portforward."""

from .forward import Forward

__all__ = ["Forward"]
