"""Every hash (octlm/hashing.py) pinned on a fixed input to the value it had before it moved there: runs,
caches and cells on disk keep matching, and the objects that carry a hash give the module's."""

from __future__ import annotations

import numpy as np

from octlm.config import Config, config_from_dict
from octlm.data.sources import Document
from octlm.data.tokenizer import train_tokenizer
from octlm.hashing import (
    config_sha256,
    corpus_sha256,
    eval_text_sha256,
    meta_hashes,
    name_fraction,
    seal,
    sha256_array,
    sha256_bytes,
    tokenizer_sha256,
)


def test_bytes_and_token_streams() -> None:
    assert sha256_bytes(b"octlm") == "14669c5874e6d16907527efbf1bc9f52db0ffc9cb78e8d9e17fac3bd71dd1175"
    stream = np.arange(12, dtype=np.uint16)
    assert sha256_array(stream) == "a46b67c8fb1c4c35fdfc8387c647f8c442a84e1520334a92a127f740b4c1dd5c"
    assert sha256_array(stream[::2]) == "9ecfac555f525ac198b316e08560bad4b0f8885134fd9e9dbce37aebd16db78c"


def test_config_hash_leaves_out_bookkeeping_and_later_fields_at_their_defaults() -> None:
    assert Config().hash() == "a9055a2da10d1920fa6068d537ba99802316bba67003068868eda19e9cfbd47f"
    changed = config_from_dict(
        {
            "train": {"dtype": "fp32", "steps": 7, "out_dir": "x"},
            "model": {
                "position": "rope",
                "rope_scaling": "linear",
                "rope_factor": 2.0,
                "rope_original_length": 64,
            },
        }
    )
    assert changed.hash() == config_sha256(changed.to_dict())
    assert changed.hash() == "ba1eb3e9be889dc89ad54f6c0f941381adcc65dc57316bb2a5f43363ae18d638"
    sections = Config().to_dict()
    sections["train"]["out_dir"] = "elsewhere"
    assert config_sha256(sections) == Config().hash() and sections["train"]["out_dir"] == "elsewhere"


def test_tokenizer_corpus_and_split() -> None:
    assert (
        tokenizer_sha256('{"model": "é"}')
        == "919d7fb4422100813d5a5062c69902cf8afaf2b00e6c7ce09737aa7cbee6fb83"
    )
    docs = [Document("a.txt", "hello"), Document("dir/b.py", "wörld\n")]
    assert corpus_sha256(docs) == "fe151381ae4b28dd6016b22917730600a3a7755b6ae1576880aa77af232d852d"
    assert (name_fraction("a.txt"), name_fraction("dir/b.py")) == (0.09655446037742849, 0.1190460104615089)
    tokenizer = train_tokenizer([Document("a", "abc abc abd " * 20)], 260)
    assert tokenizer.sha256 == tokenizer_sha256(tokenizer.to_json())


def test_checkpoint_description_table() -> None:
    meta = {
        "schema_version": 1,
        "step": 3,
        "config_name": "tiny",
        "config": {"model": {"d": 4}, "train": {}},
        "sha256": {"x": "y"},
        "state": {
            "rng": {"torch": {"__tensor__": "uint8", "shape": [2], "base64": "AAA="}},
            "losses_since_eval": [1.5, 2.0],
        },
    }
    expected = {
        "schema_version": "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
        "step": "4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce",
        "config_name": "be726b61602057ef6958400911596c3d248d753a67cd60b4853c9a9517235fa8",
        "config.model.d": "4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a",
        "config.train": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "state.rng.torch": "d2780cc5f523111fa6d74454e4e688b86faae1cec715faef336c2b944f8bef92",
        "state.losses_since_eval": "77de60106506b6c9cb819615096d1ed3f6dbf75c361d1dfe347c46549b3dbd27",
    }
    assert meta_hashes(meta) == expected
    assert seal({**meta, "meta_sha256": {"stale": "0"}}) == {**meta, "meta_sha256": expected}


def test_evaluation_text() -> None:
    tokens, token_bytes = np.array([5, 1, 2, 3], dtype=np.int64), np.arange(6, dtype=np.int64)
    expected = "7c253f57b63456e1f376c3ff7da136763a107cf2884acdc4880cfff1b30f9c7a"
    assert eval_text_sha256(tokens, token_bytes) == expected
