"""The demo's own error: what it reports in one line before stopping everything."""


class DemoError(RuntimeError):
    """A part of the demo could not be started."""
