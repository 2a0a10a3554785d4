"""What the user sees: front-end choice (widgets or text), styles, the streaming output views
(single pod, per pod), the status panel, sessions and job tables, and transfer progress.

Views import nothing from the command modules, the registry or the engine.
"""
