"""`octlm train`: parse the flags, train (`octlm.training.loop`), then print the figures, a sample and the
report.

The command owns what happens around the loop: which config (a new run's, or the run's own for `--resume`),
how many threads, and what a user sees at the end. A run a signal stopped (SIGINT, SIGTERM, SIGHUP: it
finished the step and wrote a checkpoint) prints where it stopped and how to resume, and the command returns
128 + the signal's number, so the CLI needs no special case. Sampling and the report come after `train()`
returns, of the model it hands back, so the training loop imports neither generation nor the report.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from octlm.commands import options
from octlm.commands.options import add_config_arguments, overrides_from_args
from octlm.config import Config, load_config
from octlm.errors import UserError
from octlm.runtime import BF16Support, cpu_bf16_support, cpu_share, resolve_device, torch_threads
from octlm.storage.run import Run
from octlm.training.loop import TrainResult, train
from octlm.training.resume import config_for_resume


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, no_flag=("train.run_name", "train.out_dir"))  # --name and --out give them
    run = parser.add_argument_group("run")
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue the run in RUN_DIR (e.g. runs/day1-learned) from its last checkpoint; "
        "its config is reused, and only bookkeeping such as --steps may change",
    )
    run.add_argument(
        "--name",
        action=options.Given,
        what="train.run_name",
        default=None,
        help="run name: the run lives in runs/<name>/ (see --out)",
    )
    run.add_argument(
        "--out",
        metavar="RUN_DIR",
        default=None,
        help="the run folder to write, e.g. runs/my-run (default: runs/<name>, or "
        "runs/<config>-<position> without --name)",
    )
    options.add_deprecated(
        run,
        "--run-name",
        "name",
        "give the run name with --name NAME",
        what="train.run_name",
        metavar="NAME",
    )
    options.add_deprecated(
        run,
        "--out-dir",
        "cfg__train__out_dir",
        "give the run folder: octlm train --out DIR/NAME",
        metavar="DIR",
    )
    run.add_argument("--overwrite", action="store_true", help="start again in a run folder that holds a run")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    options.add_threads(run)


def config_and_run(args: argparse.Namespace) -> tuple[Config, Run]:
    """The config to train and its run folder: from the flags, or for `--resume` the run's own config."""
    folder: Run | None = None
    own: dict[str, options.Spelt] = {}  # the fields --out gives, checked against --set's
    if args.out is not None:
        given = {"--name": args.name, "--out-dir": args.cfg__train__out_dir, "--resume": args.resume}
        for flag in (flag for flag, value in given.items() if value):
            raise UserError(f"--out {args.out!r} names the run folder; leave out {flag}")
        folder = Run.of(args.out)
        if folder.name in ("", ".", ".."):
            raise UserError(f"--out {args.out!r} must end in the run's own folder name, e.g. runs/my-run")
        # the run's config records where it lives, as it records --name
        for key, value in (("train.out_dir", str(folder.path.parent)), ("train.run_name", folder.name)):
            own[key] = options.Spelt("--out", value, f"--out {args.out}")
    overrides = overrides_from_args(args, own)
    if args.name:
        overrides["train.run_name"] = args.name
    if args.resume:
        run = Run.of(args.resume)
        return config_for_resume(run, overrides, args.config), run
    config = load_config(args.config, overrides)
    return config, folder or Run.default(config)


def bf16_notice(config: Config, support: BF16Support | None = None, stream: TextIO | None = None) -> bool:
    """Say once on `stream` (stderr) that `--dtype bf16` will be slower than fp32 on a CPU without bf16
    instructions, naming what was detected (`support`: detected here when None). True when it spoke."""
    if not config.train.dtype.startswith("bf16") or resolve_device(config.train.device).type != "cpu":
        return False
    support = support or cpu_bf16_support()
    if support.native:
        return False
    print(
        f"note: --dtype bf16 will be slower than fp32 here: this CPU has no native bf16 ({support.detail}), "
        "so every bf16 matmul is converted to fp32 and back; use --dtype fp32 unless you are testing bf16",
        file=stream or sys.stderr,
    )
    return True


def run(args: argparse.Namespace, bf16: BF16Support | None = None) -> int:
    """`octlm train`; `bf16`: the processor's bf16 support (detected when None; tests pass one)."""
    share = cpu_share() if args.threads is None else None
    with torch_threads(args.threads if share is None else share.threads):
        started = time.perf_counter()
        config, folder = config_and_run(args)
        if int(os.environ.get("RANK", "0")) == 0:  # one notice per command, not one per DDP rank
            bf16_notice(config, bf16)
        crowded = share is not None and share.crowded and resolve_device(config.train.device).type == "cpu"
        result = train(
            config,
            folder,
            resume=bool(args.resume),
            progress=not args.no_progress,
            overwrite=args.overwrite,
            notes=[share.note("training")] if crowded else [],
        )
        if result.interrupted:
            # 128 + N, as a shell reports a process a signal ended (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)
            code = 128 + (result.stop_signal or signal.SIGINT)
            if result.rank == 0:
                name = signal.Signals(result.stop_signal).name if result.stop_signal else "request"
                print(
                    f"stopped at step {result.step} of {config.train.steps} on {name}; checkpoint saved in "
                    f"{folder.checkpoint_dir}"
                )
                print(f"resume with: octlm train --resume {folder.path}")
            return code
        if result.rank != 0:
            return 0
        sample, report = finish(config, result)
        from octlm.generation.generate import sample_prompt

        report_figures(result, time.perf_counter() - started, sample, report, sample_prompt(config))
        return 0


def finish(config: Config, result: TrainResult) -> tuple[str, Path | None]:
    """What follows a finished run: a sample from the final model and the embedding report (as configured),
    both of the model the loop hands back (its last checkpoint's weights), on the CPU as a loaded run's."""
    from octlm.generation.generate import sample_prompt, sample_text

    model, tokenizer, tc = result.model.cpu().eval(), result.data.tokenizer, config.train
    sample = ""
    if tc.sample_tokens > 0:
        sample = sample_text(model, tokenizer, sample_prompt(config), tc.sample_tokens, tc.seed)
    if not tc.report:
        return sample, None
    from octlm.inspect.analysis import token_counts
    from octlm.inspect.report import Trained, write_report

    counts = token_counts(result.data.train, config.model.vocab_size)
    trained = Trained(Run.of(result.run_dir), model, config, tokenizer, result.step, counts)
    return sample, write_report(trained)[0]


def report_figures(
    result: TrainResult, seconds: float, sample: str, report: Path | None, prompt: str
) -> None:
    print(
        f"validation   loss {result.val_loss:.4f}, perplexity {result.val_perplexity:.2f}, "
        f"bits per byte {result.val_bpb:.4f} (step {result.step})"
    )
    print(f"speed        {result.tokens_per_second:,.0f} tokens/s, {seconds:.1f} s in all")
    if sample:
        print("sample       " + sample.replace("\n", "\n             "))
    print(f'run          {result.run_dir}  (generate: octlm generate {result.run_dir} --prompt "{prompt}")')
    if report is not None:
        print(f"report       {report}")
