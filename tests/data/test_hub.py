"""Reaching the Hugging Face Hub (octlm/data/hub.py): offline, a Hub name ends in one stderr line and exit 2
within seconds, with no retry lines; a model in the local cache loads with the Hub out of reach.

"Offline" is real: HF_ENDPOINT points at a local port nothing listens on (connection refused), HF_HOME at an
empty folder, in a real `python -m octlm` process (huggingface_hub reads both when it is imported).
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from tiny import PYTHON, quiet_env

from octlm.data import hub

HUB_FIX = "connect to the internet and try again, or "


def closed_port() -> int:
    """A local port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_octlm(argv: list[str], home: Path, cwd: Path) -> tuple[int, str, str, float, str]:
    """`python -m octlm argv` with the Hub out of reach: (exit status, stdout, stderr, seconds, endpoint)."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in quiet_env().items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home))
    start = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-m", "octlm", *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=180
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start, endpoint


def refused(endpoint: str) -> str:
    return f"{endpoint} cannot be reached (ConnectError: [Errno 111] Connection refused); {HUB_FIX}"


def test_an_offline_hub_model_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    code, out, err, seconds, endpoint = offline_octlm(
        ["inspect", "--hf", "gpt2", "--out", str(tmp_path / "report")], tmp_path / "hf-home", tmp_path
    )
    print(f"\n[hub] octlm inspect --hf gpt2 offline: exit {code} in {seconds:.1f} s (imports included)")
    assert (code, out) == (2, ""), err
    assert err == (
        f"octlm inspect: error: --hf 'gpt2' is not in the local Hugging Face cache, and {refused(endpoint)}pass "
        "a local folder with the model (--hf path/to/folder, saved by transformers' save_pretrained)\n"
    )
    assert not (tmp_path / "report").exists()


def test_an_offline_hub_data_set_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    code, out, err, seconds, endpoint = offline_octlm(
        [
            "data",
            "--source",
            "hub",
            "--hub-dataset",
            "roneneldan/TinyStories",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        tmp_path / "hf-home",
        tmp_path,
    )
    print(f"\n[hub] octlm data --source hub offline: exit {code} in {seconds:.1f} s (imports included)")
    assert (code, out) == (2, ""), err
    assert err == (
        "octlm data: error: data set 'roneneldan/TinyStories' is streamed from the Hugging Face Hub, and "
        f"{refused(endpoint)}set data.hub_dataset to a local file or folder of the data\n"
    )


def test_a_cached_model_loads_with_the_hub_out_of_reach(tmp_path: Path) -> None:
    """The model in HF_HOME's cache layout (refs/main -> snapshots/<commit>/): found there, no Hub asked."""
    transformers = pytest.importorskip("transformers")
    home, commit = tmp_path / "hf-home", "0123456789abcdef0123456789abcdef01234567"
    repo = home / "hub" / "models--octlm-test--tiny-gpt2"
    config = transformers.GPT2Config(
        vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=12, bos_token_id=0, eos_token_id=0
    )
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    code, out, err, _seconds, _endpoint = offline_octlm(
        ["inspect", "--hf", "octlm-test/tiny-gpt2", "--out", str(tmp_path / "report")], home, tmp_path
    )
    assert code == 0 and "Retry" not in err and "cannot be reached" not in err, err
    assert (tmp_path / "report" / "report.json").is_file()


def test_only_hub_ids_are_sent_to_the_hub() -> None:
    assert hub.is_hub_id("gpt2") and hub.is_hub_id("roneneldan/TinyStories") and hub.is_hub_id("a_b/c.d-e")
    assert not any(
        hub.is_hub_id(n) for n in ("./stories", "data/more/stories.jsonl", "/abs", "~/x", "a b", "")
    )


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:  # noqa: N802 (the name http.server calls)
        self.send_response(404)  # any status is an answer: the Hub is there
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_unreachable_asks_once_and_any_answer_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub.unreachable() is None
        hub.require_hub("x", "y")  # reachable: no refusal
    finally:
        server.shutdown()
        server.server_close()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    assert hub.unreachable() == "ConnectError: [Errno 111] Connection refused"
    assert time.monotonic() - start < hub.HUB_TIMEOUT + 5  # one try, no backoff (retries alone wait 23 s)
    with pytest.raises(
        hub.UserError,
        match=r"^what, and http://127\.0\.0\.1:\d+ cannot be reached .*; "
        r"connect to the internet and try again, or fix$",
    ):
        hub.require_hub("what", "fix")
