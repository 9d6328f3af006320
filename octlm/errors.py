"""The one exception type for user mistakes.

Anything a user can fix (a bad flag, a missing file, a token id out of range, a corrupt checkpoint) raises
`UserError` (a ValueError) with a message that names the bad value and the fix. The CLI prints that message on one line and
exits with status 2; library callers get an ordinary exception they can catch.
"""


class UserError(ValueError):
    """A mistake the user can fix. The message is one readable line."""
