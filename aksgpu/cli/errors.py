"""The one exception commands turn into a clear message and an exit code instead of a traceback."""


class UserError(Exception):
    """A problem with the user's input or environment: printed as one message, no traceback."""
