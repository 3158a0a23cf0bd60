"""The one exception type users can cause; the CLI turns it into a one-line error and exit 2."""


class CollsynthError(ValueError):
    """A problem with the user's input: the message says what to change."""


class ScheduleFileError(CollsynthError):
    """A schedule file that cannot be read (malformed, unknown version)."""
