"""The errors aksgpu's domain raises and the exit codes of every aksgpu command (docs: "Exit codes").

UserError is the one exception commands turn into a clear message and an exit code instead of a
traceback; the spec's own problems (path, value, rule, fix) are aksgpu.spec.base.Issue, carried by
SpecError.
"""

EXIT_FAILED = 1  # the spec has errors, a check found drift, or an operation failed
EXIT_USAGE = 2  # bad input or a missing prerequisite
EXIT_CHANGES = 3  # `preview --expect-no-changes` found changes
EXIT_INTERNAL_ERROR = 70  # an error aksgpu did not foresee: a bug (BSD's EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (128 + SIGPIPE, as a shell reports it)


class UserError(Exception):
    """A problem with the user's input or environment: printed as one message, no traceback."""
