"""Reaching the Hugging Face Hub: the local cache first, then one quick try, then one line.

`huggingface_hub` retries a failed connection five times with a growing wait (1 + 2 + 4 + 8 + 8 s) and logs a
line for each try on stderr: offline, `octlm inspect --hf gpt2` took 27 s and 11 lines to fail. Here a caller
first loads from the cache alone (`local_files_only`); only when that misses does it ask `require_hub`, which
sends one HEAD request to the Hub's endpoint (`HF_ENDPOINT`) with a short timeout and no retries, and refuses
in one line naming the model or data set and the fix when nothing answers. `quiet_hub` holds back the
library's retry lines while the real download runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from octlm.errors import UserError

HUB_TIMEOUT = 3.0  # seconds for the one try: a reachable Hub answers a HEAD far sooner
HUB_LOGGERS = ("huggingface_hub", "datasets", "transformers")


def is_hub_id(name: str) -> bool:
    """`name` or `owner/name` (letters, digits, `-`, `_`, `.`): what the Hub can hold; a path is not one."""
    return re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None and not name.startswith(".")


def endpoint() -> str:
    """The Hub's address as huggingface_hub uses it (`HF_ENDPOINT`, else https://huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def unreachable(timeout: float = HUB_TIMEOUT) -> str | None:
    """Why the Hub does not answer now (one HEAD of its endpoint, no retries), or None when it does."""
    from huggingface_hub.utils import get_session

    try:  # huggingface_hub's own client: the proxies and certificates its downloads would use
        get_session().head(endpoint(), timeout=timeout, follow_redirects=False)
    except Exception as error:  # a refused port, no DNS, a timeout, a TLS failure: the transport's own types
        text = " ".join(str(error).split())[:200] or "no answer"
        return f"{type(error).__name__}: {text}"
    return None  # any HTTP status is an answer: the Hub is there, and the real request says what it thinks


def require_hub(what: str, fix: str) -> None:
    """A one-line UserError when the Hub cannot be reached. `what` says why it is needed ("--hf 'gpt2' is not
    in the local Hugging Face cache"), `fix` what to do instead of connecting."""
    from huggingface_hub import constants

    if constants.is_offline_mode():  # the user said not to ask: no request at all
        raise UserError(
            f"{what}, and offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE); "
            f"unset it and connect to the internet, or {fix}"
        )
    reason = unreachable()
    if reason is not None:
        raise UserError(
            f"{what}, and {endpoint()} cannot be reached ({reason}); connect to the internet and try again, "
            f"or {fix}"
        )


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """The Hugging Face libraries' warnings (retry lines) held back; their errors still raise."""
    loggers = [logging.getLogger(name) for name in HUB_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
