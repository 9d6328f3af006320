"""The tokens a trained run is analysed on: its validation stream, through its data cache, or a UTF-8 text
file of the user's, encoded with the run's tokenizer. `octlm probe`, `octlm score`, `octlm compare` and the
report's attention and gates sections all read them here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from octlm.errors import UserError

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer


def validation_tokens(config: Config, tokenizer: Tokenizer) -> np.ndarray:
    """The run's validation stream `[N]`, through its data cache; refused if made with another tokenizer."""
    from octlm.data.cache import prepare_data

    data = prepare_data(config.data, config.model.vocab_size, progress=False)
    if data.tokenizer_sha256 != tokenizer.sha256:
        raise UserError(
            f"the data cache {str(data.folder)!r} was made with another tokenizer than this run's; "
            "probe a text of your own with --text FILE"
        )
    return np.asarray(data.val)


def text_tokens(path: str | Path, tokenizer: Tokenizer) -> np.ndarray:
    """A UTF-8 text file encoded with the run's tokenizer, `[N]`."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(
            f"--text {str(path)!r} is not UTF-8 text (byte {error.start}); convert it with iconv"
        ) from None
    except IsADirectoryError:
        raise UserError(f"--text {str(path)!r} is a folder; give the path of a text file") from None
    return np.asarray(tokenizer.encode(text), dtype=np.int64)
