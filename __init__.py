"""collsynth: synthesize, verify, simulate and compile straggler-aware collective schedules."""

__version__ = "0.1.0"

from collsynth.errors import CollsynthError

__all__ = ["CollsynthError", "__version__"]
